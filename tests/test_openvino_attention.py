"""core.openvino_attention: the MatMul form of ScaledDotProductAttention is the same attention, the key's transpose
no longer a node of its own, and the ops it cannot take are left as they are."""

import numpy as np
import pytest

openvino = pytest.importorskip("openvino")
from openvino import opset13 as ops

from bench.ov_attention_kernels import attention_model
from vlm_vision_onnx.core.openvino_attention import SDPA, untranspose_keys

ROWS, HEADS, WIDTH = 24, 4, 32
HEAD = WIDTH // HEADS


def feeds(shape=(1, ROWS, WIDTH)) -> dict:
    return {n: np.random.default_rng(i).standard_normal(shape, dtype=np.float32) for i, n in enumerate("qkv")}


def compiled(model, precision="f32"):
    return openvino.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": precision,
                                                        "INFERENCE_NUM_THREADS": 1})


def sdpa_count(model) -> int:
    return sum(op.get_type_name() == SDPA for op in model.get_ops())


def key_transposes(compiled_model) -> int:
    """Runtime Transpose nodes whose output is k^T [1, heads, head_dim, rows]."""
    return sum(op.get_rt_info()["layerType"].astype(str) == "Transpose"
               and list(op.get_output_partial_shape(0).to_shape()) == [1, HEADS, HEAD, ROWS]
               for op in compiled_model.get_runtime_model().get_ops())


@pytest.mark.parametrize("precision", ["f32", "bf16"])
def test_the_matmul_form_is_the_same_attention_without_a_key_transpose(precision):
    from vlm_vision_onnx.core import openvino_session

    if precision == "bf16" and not openvino_session.bf16_supported():
        pytest.skip("this CPU has no bf16 in OpenVINO")
    core = openvino.Core()
    before = core.read_model(attention_model(1, ROWS, HEADS, WIDTH), b"")
    after = core.read_model(attention_model(1, ROWS, HEADS, WIDTH), b"")
    assert sdpa_count(after) == 1  # the ONNX frontend reads MultiHeadAttention as the op
    assert untranspose_keys(after) == 1 and sdpa_count(after) == 0
    plain, rewritten = compiled(before, precision), compiled(after, precision)
    assert key_transposes(plain) == 1 and key_transposes(rewritten) == 0
    inputs = feeds()
    # the scale on q, where the plugin's own decomposition puts it on q or k: equal up to the rounding of
    # head_dim^-0.5 (1/sqrt(8) here; Qwen's 1/8 is exact on either)
    atol = 1e-6 if precision == "f32" else 2e-2
    np.testing.assert_allclose(rewritten(inputs)[0], plain(inputs)[0], atol=atol)


def sdpa_model(**kw):
    """One opset13 ScaledDotProductAttention on q/k/v [1, HEADS, ROWS, HEAD]; `kw` its mask/scale/causal; a mask
    named "mask" becomes an input."""
    q, k, v = (ops.parameter([1, HEADS, ROWS, HEAD], np.float32, name=n) for n in "qkv")
    params = [q, k, v]
    args = [q, k, v]
    if "mask" in kw:
        mask = kw.pop("mask")
        if isinstance(mask, str):
            mask = ops.parameter([1, 1, ROWS, ROWS], np.float32, name=mask)
            params.append(mask)
        else:
            mask = ops.constant(np.float32(mask))
        args.append(mask)
        if "scale" in kw:
            args.append(ops.constant(np.float32(kw.pop("scale"))))
    out = ops.scaled_dot_product_attention(*args, causal=kw.pop("causal", False))
    return openvino.Model([out], params, "sdpa")


def reference(q, k, v, scale):
    """softmax(q k^T * scale) v on [1, heads, rows, head] (numpy, float64)."""
    scores = q.astype(np.float64) @ k.astype(np.float64).swapaxes(-1, -2) * scale
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    return (weights / weights.sum(-1, keepdims=True)) @ v.astype(np.float64)


@pytest.mark.parametrize("kw, scale", [({}, HEAD ** -0.5), ({"mask": 0.0}, HEAD ** -0.5),
                                       ({"mask": 0.0, "scale": 0.3}, 0.3)])
def test_the_scale_is_the_ops_own(kw, scale):
    model = sdpa_model(**kw)
    assert untranspose_keys(model) == 1
    inputs = feeds((1, HEADS, ROWS, HEAD))
    np.testing.assert_allclose(compiled(model)(inputs)[0], reference(*inputs.values(), scale), atol=1e-5)


@pytest.mark.parametrize("kw", [{"causal": True}, {"mask": 1.0}, {"mask": "mask"}])
def test_ops_it_cannot_take_stay(kw):
    model = sdpa_model(**kw)
    assert untranspose_keys(model) == 0 and sdpa_count(model) == 1
