"""quantize/passes/standard_attention.py: MultiHeadAttention -> MatMul + Softmax computes what the contrib op does,
inside a Loop body too, and refuses what it cannot lower."""

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

from quantize.passes import standard_attention

HEADS, WIDTH = 4, 32


def mha_model(extra_inputs: int = 0, scale: float | None = 0.25) -> onnx.ModelProto:
    """q [1, Sq, 32], k, v [1, Skv, 32] (and a key_padding_mask when extra_inputs) -> MultiHeadAttention."""
    names = ["q", "k", "v"] + ["", "mask"] * extra_inputs
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, f"S{n}", WIDTH]) for n in ("q", "k", "v")]
    if extra_inputs:
        inputs.append(helper.make_tensor_value_info("mask", TensorProto.INT32, [1, "Sk"]))
    attrs = {"num_heads": HEADS, **({"scale": scale} if scale is not None else {})}
    node = helper.make_node("MultiHeadAttention", names, ["y"], domain="com.microsoft", name="mha", **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=10)


def feeds(sq=5, skv=7):
    rng = np.random.default_rng(0)
    return {"q": rng.standard_normal((1, sq, WIDTH), dtype=np.float32),
            "k": rng.standard_normal((1, skv, WIDTH), dtype=np.float32),
            "v": rng.standard_normal((1, skv, WIDTH), dtype=np.float32)}


@pytest.mark.parametrize("scale", [0.25, None], ids=["scale", "default scale"])
def test_lowered_equals_the_contrib_op(scale):
    proto = mha_model(scale=scale)
    expected = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds())[0]
    model = ir.serde.deserialize_model(proto)
    assert standard_attention.apply(model) == 1
    lowered = ir.serde.serialize_model(model)
    assert {n.domain for n in lowered.graph.node} == {""} and "com.microsoft" not in {o.domain for o in lowered.opset_import}
    got = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds())[0]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(ReferenceEvaluator(lowered).run(None, feeds())[0], expected, rtol=0, atol=1e-5)


def test_a_key_padding_mask_is_lowered_to_what_the_contrib_op_computes():
    """The window attention's cut windows: keys past a window's size masked (int32 [B, Skv], 0 = padded)."""
    proto = mha_model(extra_inputs=1)
    feed = dict(feeds(), mask=np.array([[1, 1, 1, 0, 1, 0, 0]], np.int32))
    expected = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    model = ir.serde.deserialize_model(proto)
    assert standard_attention.apply(model) == 1
    lowered = ir.serde.serialize_model(model)
    assert {n.domain for n in lowered.graph.node} == {""}
    got = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(ReferenceEvaluator(lowered).run(None, feed)[0], expected, rtol=0, atol=1e-5)
    unmasked = ort.InferenceSession(mha_model().SerializeToString(), providers=["CPUExecutionProvider"])
    assert np.abs(unmasked.run(None, feeds())[0] - expected).max() > 1e-2  # control: the mask changes the result


def test_an_attention_with_a_bias_is_refused_with_its_reason():
    proto = mha_model(extra_inputs=1)
    node = proto.graph.node[0]
    node.input[:] = ["q", "k", "v", "mask"]  # the 4th input is the bias
    model = ir.serde.deserialize_model(proto)
    refused = {}
    assert standard_attention.apply(model, refused) == 0
    assert refused == {"mha": "takes a bias or past"}
    assert "com.microsoft" in model.opset_imports
