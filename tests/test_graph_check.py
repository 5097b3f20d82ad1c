"""core/graph_check.py: what makes a parsed ONNX file no graph, named in one line at load (core.onnx_io), on both
protobuf classes (onnx's and core.onnx_light's). The fuzzer's findings (tools/fuzz: a cycle, a dangling input, an
empty graph ended in tracebacks of onnx-ir) are each a case here, through the commands in test_fuzz.py."""

import onnx
import pytest
from onnx import TensorProto, helper

from vlm_vision_onnx.core import graph_check, onnx_io, onnx_light
from vlm_vision_onnx.core.errors import UsageError


def _model(nodes, inputs=("x",), outputs=("y",), opsets=(("", 17),), initializers=()):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2]) for n in outputs], initializer=list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets])
    model.ir_version = 10
    return model


def _both(model) -> list[list[str]]:
    """problems() on onnx's ModelProto and on the same bytes parsed by core.onnx_light."""
    return [graph_check.problems(model), graph_check.problems(onnx_light.parse(model.SerializeToString()))]


def _constant_typed_float():
    """A Constant whose `value` (a tensor attribute by its name) says it is a FLOAT."""
    constant = helper.make_node("Constant", [], ["c"], value=helper.make_tensor("v", TensorProto.FLOAT, [2], [1, 2]))
    constant.attribute[0].type = onnx.AttributeProto.FLOAT
    return _model([helper.make_node("Relu", ["x"], ["a"]), constant, helper.make_node("Add", ["a", "c"], ["y"])])


def _absurd_input():
    model = _model([helper.make_node("Relu", ["x"], ["y"])])
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2**31
    return model


def _weighted(edit):
    """x + w (w: float32 [2], raw bytes) with `edit(w)` applied to the initializer."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [2], vals=b"\0" * 8, raw=True)
    edit(weight)
    return _model([helper.make_node("Add", ["x", "w"], ["y"])], initializers=[weight])


def _loop_body(reads: str) -> onnx.GraphProto:
    """A Loop body (i, cond, v) -> (cond, v + `reads`)."""
    return helper.make_graph(
        [helper.make_node("Identity", ["cond"], ["cond_out"]), helper.make_node("Add", ["v", reads], ["v_out"])],
        "body", [helper.make_tensor_value_info("i", TensorProto.INT64, []),
                 helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
                 helper.make_tensor_value_info("v", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [2])])


def test_a_valid_graph_with_a_loop_reading_the_outer_scope_has_none():
    trip = helper.make_tensor("trip", TensorProto.INT64, [], [2])
    cond = helper.make_tensor("cond0", TensorProto.BOOL, [], [True])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Loop", ["trip", "cond0", "x"], ["y"], body=_loop_body("r"))]
    assert _both(_model(nodes, initializers=[trip, cond])) == [[], []]


@pytest.mark.parametrize("case, expected", [
    ("cycle", "wait on each other's outputs (a cycle)"),
    ("dangling", "reads 'nowhere', which no graph input, initializer or node provides"),
    ("duplicate", "writes 'a', which another node also provides"),
    ("unproduced output", "output 'y' is provided by no node, input or initializer"),
    ("unknown domain", "is of domain 'com.example', which the model imports no opset for"),
    ("opset 0", "opset ai.onnx version 0 (versions start at 1)"),
    ("empty body", "attribute 'body' is an empty graph"),
    ("dangling in a body", "> #1 (Loop).body: node #1 (Add) reads 'ghost'"),
    ("constant without value", "Constant node #1 (Constant) has [] as attributes (exactly one holds its value"),
    ("constant of another kind", "Constant node #1 (Constant) has [('value', 1)] as attributes"),
    ("undefined type", "initializer 'w' has element type 0, which ONNX does not define"),
    ("bytes off the dims", "initializer 'w' holds 8 bytes, but its dims [2, 2147483648] need 17179869184"),
    ("negative dim", "initializer 'w' has a negative dim [-2]"),
    ("no outputs", "the graph has no outputs"),
    ("absurd input", "input 'x' declares dims [2147483648]"),
    ("cycle through a body", "wait on each other's outputs (a cycle)"),
])
def test_each_problem_is_named(case, expected):
    relu = helper.make_node("Relu", ["x"], ["a"])
    trip = helper.make_tensor("trip", TensorProto.INT64, [], [2])
    cond = helper.make_tensor("cond0", TensorProto.BOOL, [], [True])
    loop = {"initializers": [trip, cond]}
    model = {
        "cycle": lambda: _model([helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                                 helper.make_node("Relu", ["b"], ["y"])]),
        "dangling": lambda: _model([relu, helper.make_node("Add", ["a", "nowhere"], ["y"])]),
        "duplicate": lambda: _model([relu, helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Relu", ["a"], ["y"])]),
        "unproduced output": lambda: _model([relu]),
        "unknown domain": lambda: _model([relu, helper.make_node("Relu", ["a"], ["y"], domain="com.example")]),
        "opset 0": lambda: _model([relu, helper.make_node("Relu", ["a"], ["y"])], opsets=(("", 0),)),
        "empty body": lambda: _model([relu, helper.make_node("Loop", ["trip", "cond0", "x"], ["y"], body=helper.make_graph(
            [], "body", [], []))], **loop),
        "no outputs": lambda: _model([relu], outputs=()),
        "absurd input": lambda: _absurd_input(),
        # the Loop's body reads 'r', which a Relu computes from the Loop's own output: the nodes wait on each other
        "cycle through a body": lambda: _model([helper.make_node("Loop", ["trip", "cond0", "x"], ["y"],
                                                                 body=_loop_body("r")),
                                                helper.make_node("Relu", ["y"], ["r"])], **loop),
        "undefined type": lambda: _weighted(lambda w: setattr(w, "data_type", 0)),
        "bytes off the dims": lambda: _weighted(lambda w: w.dims.append(2**31)),
        "negative dim": lambda: _weighted(lambda w: w.dims.__setitem__(0, -2)),
        "constant without value": lambda: _model([relu, helper.make_node("Constant", [], ["c"]),
                                                  helper.make_node("Add", ["a", "c"], ["y"])]),
        "constant of another kind": lambda: _constant_typed_float(),
        "dangling in a body": lambda: _model([relu, helper.make_node("Loop", ["trip", "cond0", "x"], ["y"],
                                                                     body=_loop_body("ghost"))], **loop),
    }[case]()
    for found in _both(model):
        assert found and expected in found[0], found


def test_load_refuses_it_in_one_line_naming_the_file(tmp_path):
    model = _model([helper.make_node("Add", ["x", "b"], ["a"]), helper.make_node("Relu", ["a"], ["b"]),
                    helper.make_node("Relu", ["b"], ["y"])])
    path = tmp_path / "cycle.onnx"
    onnx.save(model, str(path))
    for read in (onnx_io.read_proto, onnx_io.read_light, onnx_io.load):
        with pytest.raises(UsageError, match=f"{path} is not a valid ONNX graph: the graph: nodes .* cycle"):
            read(path)
