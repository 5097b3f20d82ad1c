"""Phi-4-multimodal `--static WIDTHxHEIGHT`: one image of that size, its crop layout the model's constants
(builders/phi4_mm/static_model.py). Static by the NPU rule, equal to the eager model and to the dynamic export at
that layout; a video refused; its A16W8 QDQ and fp16 forms run with every node on Qualcomm's HTP (simulator; skipped
with the reason where the QNN EP is unavailable)."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from core import static_graph
from core.parity import compare
from core.session import open_session
from families.phi4_mm import layouts
from runtime import npu
from tests.conftest import export_phi4_tiny, single_error

SIZE, IMAGE = "600x250", [[250, 600]]  # 1 x 2 HD crops + the global one; 27 of 32 patch rows real


@pytest.fixture(scope="module")
def static(tmp_path_factory):
    from builders import vision

    out = tmp_path_factory.mktemp("phi4-static") / "export"
    assert vision.main(["--model", "phi-4-mm-tiny", "--static", SIZE, "--out", str(out)]) == 0
    return out


def _full_inputs(seed: int) -> dict[str, np.ndarray]:
    return layouts.pack(IMAGE, np.random.default_rng(seed))


def test_static_by_the_rule_with_the_layout_as_constants(static):
    proto = onnx.load(str(static / "model.onnx"))
    assert static_graph.problems(proto) == []
    assert [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in proto.graph.input] == [
        ("pixel_values", [1, 3, 3, 448, 448])]
    metadata = {p.key: p.value for p in proto.metadata_props}
    assert json.loads(metadata["static_image_sizes"]) == IMAGE and metadata["static_num_crops"] == "3"
    assert metadata["static_size"] == SIZE and json.loads(metadata["static_inputs"]) == ["pixel_values"]
    report = json.loads((static / "report.json").read_text())
    assert report["validation"]["passed"] and len(report["validation"]["cases"]) == 2


def test_equal_to_eager_and_to_the_dynamic_export(static):
    """Pixels the export never saw (seed 7): the static model against the eager embedding (the export's weights,
    seed 0) and against the dynamic export of the same weights fed the layout's mask and sizes."""
    from builders.phi4_mm.model import reference_outputs

    _, embed, dynamic = export_phi4_tiny()
    inputs = _full_inputs(7)
    got = open_session(static / "model.onnx").run(None, {"pixel_values": inputs["pixel_values"]})[0]
    tolerance = json.loads((static / "report.json").read_text())["tolerance"]
    assert compare(got, reference_outputs(embed, inputs)[0], tolerance)["ok"]
    want = ort.InferenceSession(dynamic.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    assert got.shape == want.shape and compare(got, want, 1e-4)["ok"]


def test_a_video_size_is_refused(tmp_path, capsys):
    from builders import vision

    out = tmp_path / "out"
    assert vision.main(["--model", "phi-4-mm-tiny", "--static", "2x448x448", "--out", str(out)]) == 2
    assert "takes no video" in single_error(capsys.readouterr().err)
    assert not out.exists()


@pytest.mark.skipif(npu.unavailable() is not None, reason=f"QNN EP HTP backend unavailable: {npu.unavailable()}")
@pytest.mark.parametrize("stage", ["qnn", "fp16"])
def test_every_node_on_the_htp(static, tmp_path, capsys, stage):
    """quantize qnn (its biases, all zeros with random weights, are one shared tensor in the export: the stage gives
    each reader its own copy, else the HTP refuses the model) and quantize fp16, then npu-check."""
    from quantize import __main__ as quantize_cli
    from runtime import __main__ as runtime_cli

    variant = tmp_path / stage
    assert quantize_cli.main([stage, str(static), str(variant), "--threads", "1",
                              *(["--outliers", "off"] if stage == "fp16" else [])]) == 0
    report = tmp_path / "npu.json"
    code = runtime_cli.main(["npu-check", str(variant), "--json", str(report), "--context-dir", str(tmp_path / "ctx")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "every node on the HTP" in out
    (record,) = json.loads(report.read_text())["npu_check"]
    assert record["ok"] and record["finite"] and record["static_size"] == SIZE


def test_a_package_refuses_a_phi4_static_bucket(static, tmp_path, capsys):
    """The bucket records of a package hold a Qwen grid: `release package` of a Phi-4 build with a static folder is
    one error line naming what to do, and nothing is written."""
    import shutil

    from builders import vision
    from release import __main__ as release_cli

    build, dist = tmp_path / "phi-4-mm-tiny", tmp_path / "dist"
    assert vision.main(["--model", "phi-4-mm-tiny", "--out", str(build / "export")]) == 0
    shutil.copytree(static, build / f"static-{SIZE}" / "export")
    capsys.readouterr()
    assert release_cli.main(["package", str(build), "--dist", str(dist)]) == 2
    line = single_error(capsys.readouterr().err)
    assert "static buckets of the Qwen generations only" in line and "npu-check" in line
    assert not dist.exists() or not any(dist.iterdir())
