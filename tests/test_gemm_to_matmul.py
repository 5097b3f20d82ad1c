"""quantize/passes/gemm_to_matmul.py on small parsed graphs: a Gemm with a constant 2-D weight, alpha = beta = 1 and
transA = 0 becomes MatMul (+ Add of the bias when there is one), the weight stored [K, M] (transposed once when
transB = 1), with the same outputs in ONNX Runtime; a Gemm with alpha or beta != 1, transA = 1 or a weight that is
not a constant stays a Gemm."""

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from quantize.passes import gemm_to_matmul

K, M = 6, 5  # in and out features


def weight(trans_b: bool) -> np.ndarray:
    """The Gemm's weight: [M, K] when transB = 1, else [K, M]."""
    return np.random.default_rng(0).standard_normal((M, K) if trans_b else (K, M)).astype(np.float32)


def gemm_model(bias: bool = True, constant_weight: bool = True, **attributes) -> onnx.ModelProto:
    """x [N, K] ([K, N] when transA = 1) -> Gemm(x, w [, b [M]], **attributes) -> y [N, M]; w an initializer, or
    the input w when not `constant_weight`."""
    inputs = [h.make_tensor_value_info("x", T.FLOAT, [K, "N"] if attributes.get("transA") else ["N", K])]
    inits = []
    w = weight(bool(attributes.get("transB", 0)))
    if constant_weight:
        inits.append(onnx.numpy_helper.from_array(w, "w"))
    else:
        inputs.append(h.make_tensor_value_info("w", T.FLOAT, list(w.shape)))
    gemm_inputs = ["x", "w"]
    if bias:
        inits.append(onnx.numpy_helper.from_array(np.random.default_rng(1).standard_normal(M).astype(np.float32), "b"))
        gemm_inputs.append("b")
    graph = h.make_graph([h.make_node("Gemm", gemm_inputs, ["y"], **attributes)], "gemm", inputs,
                         [h.make_tensor_value_info("y", T.FLOAT, ["N", M])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])


def run(proto: onnx.ModelProto) -> np.ndarray:
    """The model's output for random inputs, x with N = 3 (the input w, when there is one, is weight(False))."""
    feeds = {}
    for value in proto.graph.input:
        shape = [d.dim_value or 3 for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = np.random.default_rng(2).standard_normal(shape).astype(np.float32)
    if "w" in feeds:
        feeds["w"] = weight(False)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)[0]


@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no_bias"])
@pytest.mark.parametrize("attributes", [{}, {"transB": 1}, {"transB": 0}, {"alpha": 1.0, "beta": 1.0, "transA": 0}],
                         ids=["defaults", "transB", "transB_0", "alpha_beta_1"])
def test_gemm_becomes_matmul_and_add_with_the_same_outputs(bias, attributes):
    proto = gemm_model(bias, **attributes)
    model = ir.from_proto(proto)
    assert gemm_to_matmul.apply(model) == 1
    assert [n.op_type for n in model.graph] == (["MatMul", "Add"] if bias else ["MatMul"])
    matmul = next(iter(model.graph))
    stored = matmul.inputs[1].const_value
    assert matmul.inputs[1].is_initializer() and stored is not None
    w = weight(bool(attributes.get("transB", 0)))
    np.testing.assert_array_equal(stored.numpy(), w.T if attributes.get("transB") else w)  # [K, M]
    assert sorted(model.graph.initializers) == sorted(["w.matmul", *(["b"] if bias else [])])  # the Gemm's w is gone
    np.testing.assert_allclose(run(ir.to_proto(model)), run(proto), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("change", [{"alpha": 2.0}, {"beta": 0.5}, {"bias": False, "alpha": 0.5}, {"transA": 1},
                                    {"constant_weight": False}],
                         ids=["alpha", "beta", "alpha_no_bias", "transA", "weight_input"])
def test_any_other_gemm_is_left_alone(change):
    proto = gemm_model(**change)
    model = ir.from_proto(proto)
    assert gemm_to_matmul.apply(model) == 0
    assert [n.op_type for n in model.graph] == ["Gemm"]
    np.testing.assert_array_equal(run(ir.to_proto(model)), run(proto))


def test_two_gemms_sharing_a_weight_both_become_matmuls_in_a_valid_model():
    w = onnx.numpy_helper.from_array(weight(True)[:, :M], "w")  # [M, M]: y1 = x W^T, y = y1 W^T
    nodes = [h.make_node("Gemm", ["x", "w"], ["y1"], transB=1), h.make_node("Gemm", ["y1", "w"], ["y"], transB=1)]
    graph = h.make_graph(nodes, "shared", [h.make_tensor_value_info("x", T.FLOAT, ["N", M])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["N", M])], [w])
    proto = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])
    model = ir.from_proto(proto)
    assert gemm_to_matmul.apply(model) == 2
    assert [n.op_type for n in model.graph] == ["MatMul", "MatMul"]
    assert all(n.inputs[1].is_initializer() for n in model.graph)
    np.testing.assert_allclose(run(ir.to_proto(model)), run(proto), rtol=1e-6, atol=1e-6)
