"""quantize/passes/patch_matmul.py on small parsed graphs: the one-kernel-per-row patch Conv becomes a MatMul with
the same outputs, anything else stays a Conv; the quantizers keep the MatMul that reads the model input fp32."""

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from quantize import quantizers
from quantize.passes import patch_matmul

C, TP, P, M = 3, 2, 4, 5  # channels, temporal patch, patch side, out channels
K = C * TP * P * P


def patch_model(bias: bool, strides=(TP, P, P), rows=(-1, C, TP, P, P), flat=(-1, M)) -> onnx.ModelProto:
    """x [N, K] -> Reshape rows -> Conv3d(W [M, C, TP, P, P], strides) [+ bias] -> Reshape flat -> MatMul(., V)."""
    rng = np.random.default_rng(0)
    inits = [onnx.numpy_helper.from_array(rng.standard_normal((M, C, TP, P, P)).astype(np.float32), "w"),
             onnx.numpy_helper.from_array(np.array(rows, np.int64), "rows"),
             onnx.numpy_helper.from_array(np.array(flat, np.int64), "flat"),
             onnx.numpy_helper.from_array(rng.standard_normal((M, 7)).astype(np.float32), "v")]
    conv_inputs = ["patches", "w"]
    if bias:
        inits.append(onnx.numpy_helper.from_array(rng.standard_normal(M).astype(np.float32), "b"))
        conv_inputs.append("b")
    nodes = [h.make_node("Reshape", ["x", "rows"], ["patches"]),
             h.make_node("Conv", conv_inputs, ["conv"], kernel_shape=[TP, P, P], strides=list(strides)),
             h.make_node("Reshape", ["conv", "flat"], ["embedded"]),
             h.make_node("MatMul", ["embedded", "v"], ["y"])]
    graph = h.make_graph(nodes, "patch", [h.make_tensor_value_info("x", T.FLOAT, ["N", K])],
                         [h.make_tensor_value_info("y", T.FLOAT, ["N", 7])], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])


def run(proto: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]


@pytest.mark.parametrize("bias", [True, False])
def test_the_patch_conv_becomes_one_matmul_with_the_same_outputs(bias):
    proto = patch_model(bias)
    model = ir.serde.deserialize_model(proto)
    assert patch_matmul.apply(model) == 1
    ops = [n.op_type for n in model.graph]
    assert "Conv" not in ops and "Reshape" not in ops and ops.count("MatMul") == 2 and ops.count("Add") == int(bias)
    x = np.random.default_rng(1).standard_normal((6, K)).astype(np.float32)
    np.testing.assert_allclose(run(ir.serde.serialize_model(model), x), run(proto, x), rtol=1e-5, atol=1e-5)
    # the new MatMul reads the model's input: the quantizers leave it fp32, the other MatMul is theirs
    readers = quantizers.input_readers(model)
    assert len(readers) == 1 and [n.op_type for n, _ in quantizers.quantizable(model)] == ["MatMul"]
    assert readers[0] not in [n.name for n, _ in quantizers.quantizable(model)]


@pytest.mark.parametrize("change", [{"strides": (1, P, P)}, {"rows": (-1, C, TP, P * P, 1)}, {"flat": (-1, M, 1)}])
def test_any_other_conv_or_reshape_is_left_alone(change):
    model = ir.serde.deserialize_model(patch_model(True, **change))
    assert patch_matmul.apply(model) == 0
    assert "Conv" in [n.op_type for n in model.graph]
