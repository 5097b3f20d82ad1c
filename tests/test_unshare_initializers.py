"""quantize/passes/unshare_initializers.py on a small parsed graph: a float initializer read by three nodes gets a
copy for the second and third reader, same values, same outputs in ONNX Runtime; an int64 one (a shape) stays
shared."""

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from quantize.passes import unshare_initializers


def _model() -> onnx.ModelProto:
    inits = [numpy_helper.from_array(np.arange(4, dtype=np.float32), "b"),
             numpy_helper.from_array(np.array([2, 2], np.int64), "shape")]
    nodes = [h.make_node("Add", ["x", "b"], ["y1"]), h.make_node("Mul", ["y1", "b"], ["y2"]),
             h.make_node("Sub", ["y2", "b"], ["y3"]), h.make_node("Reshape", ["y3", "shape"], ["y"]),
             h.make_node("Reshape", ["x", "shape"], ["z"])]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4])],
                         [h.make_tensor_value_info("y", T.FLOAT, None), h.make_tensor_value_info("z", T.FLOAT, None)],
                         inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)], ir_version=10)


def _run(proto):
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": np.array([1, -2, 3, 0.5], np.float32)})


def test_each_reader_of_a_float_initializer_gets_its_own():
    proto = _model()
    before = _run(proto)
    assert unshare_initializers.apply(proto) == 2
    readers = [n.input[1] for n in proto.graph.node]
    assert readers[:3] == ["b", "b.copy1", "b.copy2"] and readers[3:] == ["shape", "shape"]
    values = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    np.testing.assert_array_equal(values["b.copy1"], values["b"])
    for got, want in zip(_run(proto), before):
        np.testing.assert_array_equal(got, want)
    assert unshare_initializers.apply(proto) == 0  # nothing shared is left
