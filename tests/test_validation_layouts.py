"""families.validation.quick_indices: the few layouts each pass of a stage is checked at."""

import numpy as np

from vlm_vision_onnx.families import validation


def layouts(*names):
    return [{"case": n} for n in names]


def feeds(*sizes):
    return [{"pixel_values": np.zeros(s, np.float32)} for s in sizes]


def test_quick_layouts_keep_the_hidden_ones_the_export_example_and_the_largest():
    names = ("image 224x224", "image 1024x1024", "pack", "export example", "same patch count #1",
             "same patch count #2", "padded patch rows")
    picked = validation.quick_indices(layouts(*names), feeds(10, 400, 50, 20, 20, 20, 30))
    assert [names[i] for i in picked] == ["image 224x224", "image 1024x1024", "export example",
                                         "same patch count #1", "padded patch rows"]


def test_quick_layouts_of_a_short_suite():
    assert validation.quick_indices(layouts("only"), feeds(4)) == [0]


def test_report_layouts_out_of_range_are_refused(tmp_path):
    """Found by tools/fuzz: a report's validation case with a negative (or 10^12) grid reached numpy as an
    allocation (ValueError traceback in `quantize int4`); `from_report` refuses it naming the case."""
    import json

    import pytest

    from vlm_vision_onnx.core.errors import UsageError
    from vlm_vision_onnx.families import family

    qwen = family("qwen3-vl")
    (tmp_path / "model.onnx").write_bytes(b"")
    for grid in ([[1, -4, 4]], [[1, 10**12, 4]], [[1, 2048, 2048]], [["1", 4, 4]], [0, [1, 4, 4]], [[1, 4], [1, 4, 4]], [0], [[1, 4, 0]]):
        (tmp_path / "report.json").write_text(json.dumps({"validation": {"cases": [{"case": "c", "grid_thw": grid}]}}))
        with pytest.raises(UsageError, match="validation case 'c' has grid_thw .* not rows of integers"):
            validation.from_report(tmp_path / "model.onnx", qwen)
    (tmp_path / "report.json").write_text(json.dumps({"validation": {"cases": [{"case": "c", "grid_thw": [[1, 4, 4]]}]}}))
    assert validation.from_report(tmp_path / "model.onnx", qwen) == [{"case": "c", "grid_thw": [[1, 4, 4]]}]
