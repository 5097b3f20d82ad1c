"""quantize/passes/static_dims.py on small parsed graphs: rotate_half's split point as TorchScript computes it,
Shape(x)[-1] // 2, becomes the constant D/2 when x's last dim is static (the Shape, Gather and Div folded away,
the Slice reading a constant end), with the same outputs in ONNX Runtime; a dim that is not static, or a Gather on
a Shape with start / end (whose index is not x's axis), stays computed at run time."""

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from quantize.passes import static_dims

D = 8  # the static last dim


def i64(name: str, values) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.array(values, np.int64), name)


def half_model(index: int, dims=("N", 4, D), **shape_attributes) -> onnx.ModelProto:
    """x [dims] -> x[..., :Shape(x, **shape_attributes)[index] // 2] (Slice on the last axis)."""
    inits = [i64("index", index), i64("two", 2), i64("zero", [0]), i64("last", [-1])]
    nodes = [h.make_node("Shape", ["x"], ["shape"], **shape_attributes),
             h.make_node("Gather", ["shape", "index"], ["dim"], axis=0),
             h.make_node("Div", ["dim", "two"], ["half"]),
             h.make_node("Unsqueeze", ["half", "zero"], ["end"]),
             h.make_node("Slice", ["x", "zero", "end", "last"], ["y"])]
    graph = h.make_graph(nodes, "half", [h.make_tensor_value_info("x", T.FLOAT, list(dims))],
                         [h.make_tensor_value_info("y", T.FLOAT, None)], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])


def run(proto: onnx.ModelProto) -> np.ndarray:
    x = proto.graph.input[0]
    shape = [d.dim_value or 6 for d in x.type.tensor_type.shape.dim]  # symbolic dims: 6
    values = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": values})[0]


@pytest.mark.parametrize("index", [-1, 2])
def test_a_static_dim_folds_to_a_constant_with_the_same_outputs(index):
    proto = half_model(index)
    model = ir.from_proto(proto)
    assert static_dims.apply(model) == 1
    assert [n.op_type for n in model.graph] == ["Slice"]  # Shape, Gather, Div, Unsqueeze folded into its end
    end = ir.convenience.get_const_tensor(next(iter(model.graph)).inputs[2])
    assert end is not None and end.numpy().tolist() == [D // 2]
    assert list(model.graph.outputs[0].shape) == ["N", 4, D // 2]  # shape inference now knows the slice
    produced, expected = run(ir.to_proto(model)), run(proto)
    assert produced.shape == (6, 4, D // 2)
    np.testing.assert_array_equal(produced, expected)


@pytest.mark.parametrize(("index", "dims", "attributes"),
                         [(0, ("N", 4, D), {}),  # x's dim 0 is symbolic
                          (0, (D, 4, "N"), {"start": 1}),  # Shape(x, start=1)[0] is dim 1 (4), not dim 0 (8)
                          (1, ("N", 4, D), {"end": 2})],  # static, but the Shape is sliced: not folded either
                         ids=["symbolic", "shape_start", "shape_end"])
def test_a_dim_that_is_not_static_or_of_a_sliced_shape_stays(index, dims, attributes):
    proto = half_model(index, dims, **attributes)
    model = ir.from_proto(proto)
    assert static_dims.apply(model) == 0
    assert [n.op_type for n in model.graph] == ["Shape", "Gather", "Div", "Unsqueeze", "Slice"]
    np.testing.assert_array_equal(run(ir.to_proto(model)), run(proto))
