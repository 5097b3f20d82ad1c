"""quantize/passes/decompose_layer_norm.py: LayerNormalization written out equals the op (torch-free)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantize.passes import decompose_layer_norm
from vlm_vision_onnx.core.session import open_session


def _model(axis: int = -1, bias: bool = True) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "scale")]
    inputs = ["x", "scale"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "bias"))
        inputs.append("bias")
    node = helper.make_node("LayerNormalization", inputs, ["y"], name="ln", axis=axis, epsilon=1e-6)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


@pytest.mark.parametrize("bias", [True, False])
def test_written_out_equals_the_op(bias):
    x = {"x": np.random.default_rng(1).standard_normal((5, 8)).astype(np.float32) * 3 + 1}
    model = _model(bias=bias)
    want = open_session(model).run(None, x)[0]
    assert decompose_layer_norm.apply(model) == 1
    assert "LayerNormalization" not in {n.op_type for n in model.graph.node}
    onnx.checker.check_model(model)
    np.testing.assert_allclose(open_session(model).run(None, x)[0], want, atol=1e-5)


def test_other_axis_refused():
    with pytest.raises(ValueError, match="not the last"):
        decompose_layer_norm.apply(_model(axis=0))
