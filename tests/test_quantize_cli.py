"""`python -m quantize optimize` and `int4` end to end on the tiny encoder, and bad input."""

import json

import onnx_ir as ir
import pytest

from quantize import __main__ as cli
from quantize import quantizers
from quantize.options import StageRun
from tests import builds, support
from tests.conftest import single_error


@pytest.fixture(scope="module")
def optimized(tiny_optimized):
    """{exporter: optimized stage folder} (TorchScript's is the session's shared one). Read-only."""
    return {"torchscript": tiny_optimized, "dynamo": builds.path(builds.stage(builds.QWEN3_VL_DYNAMO, "optimize"))}


@pytest.fixture(scope="module")
def int4_folder():
    """The int4 stage (blocks of 32) of the TorchScript export's optimize stage. Read-only."""
    return builds.path(builds.stage(builds.QWEN3_VL_OPTIMIZED, "int4", "--block-size", "32"))


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_optimized_model_is_fused_and_exact(optimized, exporter):
    model = ir.load(str(optimized[exporter] / "model.onnx"))
    report = json.loads((optimized[exporter] / "report.json").read_text())
    # per block two: the batched If branch (segments of one size) and the Loop step (sizes that differ)
    assert len(support.all_ops(model, "MultiHeadAttention")) == 2 * support.DEPTH
    assert len(support.ops(model, "RotaryEmbedding")) == 2 * support.DEPTH
    assert len(support.ops(model, "LayerNormalization")) >= 2 * support.DEPTH
    assert not support.ops(model, "SkipLayerNormalization")  # ORT's CPU kernel is ~4x slower than the pair
    assert not support.ops(model, "Gemm") and not support.all_ops(model, "Softmax")
    cases = report["validation"]["cases"]
    assert report["validation"]["passed"] and len(cases) >= 10
    assert {"video t=2 256x256", "pack image + video t=2 + image"} <= {c["case"] for c in cases}
    worst = max(o["max_abs"] for c in cases for o in c["outputs"].values())
    assert worst <= support.TOLERANCE


def test_int4_quantizes_every_linear_layer(int4_folder):
    model = ir.load(str(int4_folder / "model.onnx"))
    report = json.loads((int4_folder / "report.json").read_text())
    assert len(support.ops(model, "MatMulNBits")) == 4 * support.DEPTH + 2 * 3
    # only the patch embedding (a MatMul reading pixel_values since the optimize stage's patch pass)
    assert [(n["op"], n["reason"]) for n in report["fp32_weight_nodes"]] == [("MatMul", quantizers.INPUT_READER_REASON)]
    outputs = report["validation"]["cases"][0]["outputs"]
    assert set(outputs) == {"image_features", "deepstack_embeds_0", "deepstack_embeds_1"}
    assert all(0.9 < o["cosine"] <= 1 + 1e-9 for c in report["validation"]["cases"] for o in c["outputs"].values())
    assert report["size_ratio"] < 1


def test_int4_exclude_keeps_matches_fp32(optimized, tmp_path):
    out = tmp_path / "int4"
    assert cli.main(["int4", str(optimized["torchscript"]), str(out), "--exclude", r"merger", "--threads", "1"]) == 0
    report = json.loads((out / "report.json").read_text())
    kept = [n["weight"] for n in report["fp32_weight_nodes"] if n["reason"] == "excluded (--exclude)"]
    assert len(kept) == 6 and all("merger" in w for w in kept)


def test_int4_hqq_fits_zero_points_and_keeps_the_accuracy_level(optimized, tmp_path, capsys):
    """--algorithm hqq: every MatMul as MatMulNBits with fitted float zero points, the asked accuracy level set
    (ORT's HQQ writes none), the algorithm in the report; symmetric HQQ is refused (it fits zero points)."""
    out = tmp_path / "hqq"
    assert cli.main(["int4", str(optimized["torchscript"]), str(out), "--block-size", "128", "--asymmetric",
                     "--algorithm", "hqq", "--outliers", "off", "--threads", "1"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["config"]["algorithm"] == "hqq" and report["config"]["accuracy_level"] == 4
    nodes = support.ops(ir.load(str(out / "model.onnx")), "MatMulNBits")
    assert len(nodes) == report["quantized_nodes"] == 4 * support.DEPTH + 2 * 3
    assert all(n.attributes["accuracy_level"].as_int() == 4 and n.inputs[3].dtype == ir.DataType.FLOAT for n in nodes)
    assert report["validation"]["min_token_cosine"] > 0.95
    assert cli.main(["int4", str(optimized["torchscript"]), str(tmp_path / "x"), "--algorithm", "hqq"]) == 2
    assert single_error(capsys.readouterr().err) == "error: --algorithm hqq fits a zero point per block: give --asymmetric"
    assert not (tmp_path / "x").exists()


def test_int4_of_a_model_without_matmul_is_refused(tiny_exports, tmp_path, capsys):
    # the export has only Gemm nodes: the quantizer would silently do nothing
    out = tmp_path / "int4"
    assert cli.main(["int4", str(tiny_exports["torchscript"]), str(out)]) == 2
    line = single_error(capsys.readouterr().err)
    assert "no MatMul" in line and "quantize optimize" in line
    assert not out.exists() and not list(tmp_path.glob(".int4*"))


@pytest.mark.parametrize("args, words", [
    (["int4", "IN", "OUT", "--block-size", "48"], "--block-size"),
    (["int4", "IN", "OUT", "--accuracy-level", "9"], "--accuracy-level"),
    (["optimize", "IN", "OUT", "--skip", "everything"], "--skip"),
    (["optimize", "IN", "OUT", "--fast"], "--fast"),
    (["optimize", "missing/model.onnx", "OUT"], "not found"),
    # a stage folder that was never made, beside OUT (the stage before failed): said missing, not a clash
    (["int4", "SIBLING", "OUT"], "not found"),
])
def test_bad_input_is_one_line_and_exit_2(tiny_exports, tmp_path, capsys, args, words):
    named = {"IN": str(tiny_exports["torchscript"]), "OUT": str(tmp_path / "out"), "SIBLING": str(tmp_path / "optimized")}
    args = [named.get(a, a) for a in args]
    assert cli.main(args) == 2
    assert words in single_error(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_a_pass_that_breaks_parity_is_named_and_nothing_is_written(tiny_exports, tmp_path, monkeypatch):
    """The default checks only the saved model; when it fails, the passes run again one at a time at the failing
    layouts and the first one beyond tolerance is named."""
    from quantize import optimize
    from vlm_vision_onnx.core.errors import CheckFailed

    title, rotary = optimize.PASSES["rotary"]

    def broken(model: ir.Model):
        model, made = rotary(model)
        weight = next(v for v in model.graph.initializers.values()
                      if v.const_value is not None and len(v.const_value.shape) == 2)
        weight.const_value = ir.tensor(weight.const_value.numpy() * 1.5)
        return model, made

    monkeypatch.setitem(optimize.PASSES, "rotary", (title, broken))
    out = tmp_path / "optimized"
    with pytest.raises(CheckFailed, match=r"pass 'rotary' .* breaks parity at .*--skip rotary"):
        optimize.run(tiny_exports["torchscript"], out, set(), StageRun(threads=1))
    assert not out.exists() and not list(tmp_path.iterdir())
