"""quantize.gptq: GPTQ rounding that propagates its errors (ORT 1.31's does not), packed into MatMulNBits exactly."""

import json

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization.neural_compressor.weight_only import gptq as ort_gptq
from onnxruntime.quantization.neural_compressor.weight_only import qdq_tensor

from quantize import __main__ as cli
from quantize import calibration, gptq
from vlm_vision_onnx.core import parity
from vlm_vision_onnx.core.session import open_session

RNG = np.random.default_rng(0)


_DIRECTIONS: dict[int, np.ndarray] = {}


def _correlated(tokens: int, k: int) -> np.ndarray:
    """Inputs with most of their energy in 16 fixed directions (per width k), as activations of real inputs have."""
    directions = _DIRECTIONS.setdefault(k, RNG.standard_normal((16, k)))
    return (RNG.standard_normal((tokens, 16)) @ directions + 0.1 * RNG.standard_normal((tokens, k))).astype(np.float32)


def _dequantized(ints, scales, zeros, block: int) -> np.ndarray:
    return (ints.astype(np.float32) - np.repeat(zeros.astype(np.float32), block, 0)) * np.repeat(scales, block, 0)


def _relative_error(x, approx, weight) -> float:
    return float(np.linalg.norm(x @ approx - x @ weight) / np.linalg.norm(x @ weight))


def test_ort_gptq_is_round_to_nearest_and_ours_propagates_the_errors():
    k, m, block = 256, 64, 32
    weight = (0.02 * RNG.standard_normal((k, m))).astype(np.float32)
    x = _correlated(2000, k)
    held_out = _correlated(500, k)
    hessian = x.T.astype(np.float64) @ x
    rtn = qdq_tensor(weight.T.copy(), 4, block, "asym").T
    theirs = ort_gptq(weight.copy(), hessian.copy(), num_bits=4, group_size=block, scheme="asym")
    assert np.abs(theirs - rtn).max() < 1e-6  # ORT 1.31: no error propagated (the bug quantize/gptq.py works around)
    ours = _dequantized(*gptq.round_weight(weight, hessian, 4, block, symmetric=False), block)[:k]
    assert _relative_error(held_out, ours, weight) < 0.5 * _relative_error(held_out, rtn, weight)


@pytest.mark.parametrize("symmetric", [True, False])
def test_with_an_identity_hessian_it_is_round_to_nearest(symmetric):
    k, m, block = 128, 16, 32
    weight = RNG.standard_normal((k, m)).astype(np.float32)
    ints, scales, zeros = gptq.round_weight(weight, np.eye(k), 4, block, symmetric)
    rtn = qdq_tensor(weight.T.copy(), 4, block, "sym" if symmetric else "asym").T
    ours = _dequantized(ints, scales, zeros, block)
    # symmetric: a block's largest |w| sits exactly on a rounding tie (7.5 steps), which float32 and float64
    # break apart; every other weight must agree
    peaks = np.repeat(np.abs(weight).reshape(k // block, block, -1).max(axis=1), block, 0)
    away = np.abs(weight) < peaks if symmetric else np.ones_like(weight, bool)
    np.testing.assert_allclose(ours[away], rtn[away], atol=1e-6)


@pytest.mark.parametrize("bits, block, symmetric, k", [(4, 32, False, 100), (4, 128, True, 256), (8, 32, False, 64)])
def test_matmulnbits_computes_exactly_the_rounded_weight(tmp_path, bits, block, symmetric, k):
    """The packed MatMulNBits (accuracy level 0: fp32 compute) equals x @ the dequantized GPTQ weight, K padded
    to whole blocks where it is not a multiple of the block."""
    m = 24
    weight = RNG.standard_normal((k, m)).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"], name="mm")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", m])],
                              [numpy_helper.from_array(weight, "W")])
    src, dst = tmp_path / "mm.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), src)
    feeds = [{"x": _correlated(300, k)}]
    gptq.quantize(src, dst, [], bits, block, symmetric, accuracy_level=0, feeds=feeds, threads=1)
    model = onnx.load(str(dst))
    assert [n.op_type for n in model.graph.node] == ["MatMulNBits"]
    x = feeds[0]["x"]
    hessian = gptq.hessians(src, {"x": k}, feeds, threads=1)["x"]  # the very Hessian quantize used
    expected = x @ _dequantized(*gptq.round_weight(weight, hessian, bits, block, symmetric), block)[:k]
    got = open_session(dst, 1).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4 * np.abs(expected).max())


def test_int4_gptq_stage_is_calibrated_on_photos(tiny_optimized, tmp_path):
    """--algorithm gptq: every MatMul quantized, the calibration set in the report, and closer to fp32 than RTN at
    the same options on photos it was not calibrated on (what GPTQ optimises: on the tiny model's random-pixel
    validation layouts it is not better, see docs/quantization.md)."""
    reports = {}
    for algorithm in ("rtn", "gptq"):
        out = tmp_path / algorithm
        assert cli.main(["int4", str(tiny_optimized), str(out), "--threads", "1", "--asymmetric", "--block-size",
                         "32", "--algorithm", algorithm, "--outliers", "off"]) == 0
        reports[algorithm] = json.loads((out / "report.json").read_text())
    got = reports["gptq"]
    assert got["config"]["algorithm"] == "gptq" and got["calibration"]["items"] >= 8
    assert got["quantized_nodes"] == reports["rtn"]["quantized_nodes"]
    held_out = [p for p in calibration.PHOTOS if p not in calibration.STAGE_PHOTOS][:3]
    feeds = calibration.for_model(tiny_optimized, photos=held_out, sizes=((448, 448), (512, 768)))
    reference = parity.run_all(open_session(tiny_optimized / "model.onnx", 1), feeds)
    cosine = {}
    for algorithm in reports:
        produced = parity.run_all(open_session(tmp_path / algorithm / "model.onnx", 1), feeds)
        cosine[algorithm] = min(parity.min_token_cosine(g, r) for got_, ref in zip(produced, reference)
                                for g, r in zip(got_, ref))
    assert cosine["gptq"] > cosine["rtn"], cosine
