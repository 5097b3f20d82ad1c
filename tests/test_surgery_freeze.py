"""freeze: no symbolic dim left, shape arithmetic folded, same outputs; data-dependent refused."""

import onnx
import onnx_ir as ir
import pytest

from surgery import examples as ex
from surgery.cli import main
from surgery.freeze import freeze, non_static, verify
from surgery.probe import probe_feeds
from vlm_vision_onnx.core.errors import CheckFailed


def test_symbolic_batch_frozen_at_4():
    model = ir.from_proto(ex.symbolic_batch())
    shapes = {"x": (4, 3, 8, 8)}
    feeds = probe_feeds(model, shapes)
    frozen, report = freeze(model, shapes, feeds)
    assert report["inputs"] == {"x": "[s77,3,8,8] -> [4,3,8,8]"}
    assert report["shape_ops"] == {"before": 1, "after": 0}
    values = list(frozen.graph.inputs) + [v for n in frozen.graph for v in n.outputs]
    assert all(isinstance(d, int) for v in values for d in v.shape)
    assert non_static(frozen) == []
    ok, lines = verify(frozen, model, feeds)
    assert ok, lines


def test_nonzero_cannot_be_frozen():
    model = ir.from_proto(ex.nonzero_model())
    with pytest.raises(CheckFailed, match="NonZero 'where'"):
        freeze(model, {}, probe_feeds(model, {}))


def test_freeze_cli(tmp_path, capsys):
    src, out = tmp_path / "s77.onnx", tmp_path / "frozen" / "model.onnx"
    onnx.save(ex.symbolic_batch(), src)
    assert main(["freeze", str(src), str(out)]) == 2
    assert "give each one --shape NAME=AxBx..." in capsys.readouterr().err
    assert main(["freeze", str(src), str(out), "--shape", "x=4x3x8x8"]) == 0
    text = capsys.readouterr().out
    assert "verified: vs the original: features: max abs diff" in text
    frozen = onnx.load(out)
    dims = [d for vi in [*frozen.graph.input, *frozen.graph.output, *frozen.graph.value_info]
            for d in vi.type.tensor_type.shape.dim]
    assert dims and all(d.HasField("dim_value") for d in dims)
    nz_src = tmp_path / "nz.onnx"
    onnx.save(ex.nonzero_model(), nz_src)
    assert main(["freeze", str(nz_src), str(tmp_path / "nz" / "model.onnx")]) == 1
    assert not (tmp_path / "nz" / "model.onnx").exists()
