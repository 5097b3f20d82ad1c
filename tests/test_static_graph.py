"""core/static_graph.py: what keeps a graph from being static (torch-free)."""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from vlm_vision_onnx.core import static_graph


def _model(nodes, inputs, outputs, inits=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_static_graph_passes():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])
    assert static_graph.problems(_model([helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])], [x], [y])) == []


def test_symbolic_dim_and_data_dependent_op_found():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    found = static_graph.problems(_model([helper.make_node("Relu", ["x"], ["y"])], [x], [y]))
    assert any("input x axis 0 is symbolic (n)" in f for f in found)
    n = helper.make_tensor_value_info("n", TensorProto.INT64, [])
    r = helper.make_tensor_value_info("r", TensorProto.INT64, None)
    zero, one = (numpy_helper.from_array(np.array(v, np.int64), name) for v, name in ((0, "zero"), (1, "one")))
    found = static_graph.problems(_model([helper.make_node("Range", ["zero", "n", "one"], ["r"], name="range")],
                                         [n], [r], [zero, one]))
    assert found[0] == "node range is Range: a control-flow or data-dependent op"
    assert any("axis 0 is unknown" in f or "symbolic" in f for f in found[1:])
