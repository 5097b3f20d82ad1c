"""core.openvino_branches: a model compiled per pattern of its If conditions, each If replaced by its branch.

On small ONNX graphs: an If decided by an integer input, or by a float input's shape, takes each branch right, the
compiled model holds no If, patterns compile once and the least recent goes past `keep`; an If decided by a float
input's values compiles the model as it is. The tiny Qwen exports through `OpenVINOSession` at every validation layout (uniform and mixed
packs: both branches) are in tests/test_openvino.py.
"""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

openvino = pytest.importorskip("openvino", reason="the openvino extra is not installed (make install installs it)")

from vlm_vision_onnx.core import openvino_branches, openvino_session


def _if_model(path, condition_from: str):
    """y = If(cond, x * 2 + 1, -x) twice in a row; cond = ReduceSum(n) > 0 (`condition_from` "int": n int64 [k],
    "float": x itself), or len(x) - sum(n) > 0 ("shape")."""
    nodes, current = [], "x"
    if condition_from == "int":
        nodes += [helper.make_node("ReduceSum", ["n"], ["total"], keepdims=0),
                  helper.make_node("Greater", ["total", "zero"], ["cond"])]
        zero = helper.make_tensor("zero", TensorProto.INT64, [], [0])
    elif condition_from == "shape":  # the rows of x (a float input's shape, not its values) minus sum(n) > 0
        nodes += [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Shape", ["r"], ["rows"]),
                  helper.make_node("ReduceSum", ["n"], ["claimed"], keepdims=1),
                  helper.make_node("Sub", ["rows", "claimed"], ["left"]),
                  helper.make_node("ReduceSum", ["left"], ["total"], keepdims=0),
                  helper.make_node("Greater", ["total", "zero"], ["cond"])]
        zero = helper.make_tensor("zero", TensorProto.INT64, [], [0])
    else:
        nodes += [helper.make_node("ReduceSum", ["x"], ["total"], keepdims=0),
                  helper.make_node("Greater", ["total", "zero"], ["cond"])]
        zero = helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0])
    two, one = (helper.make_tensor(name, TensorProto.FLOAT, [], [v]) for name, v in (("two", 2.0), ("one", 1.0)))
    for i in range(2):
        then_out = helper.make_tensor_value_info(f"t{i}", TensorProto.FLOAT, None)
        else_out = helper.make_tensor_value_info(f"e{i}", TensorProto.FLOAT, None)
        then = helper.make_graph([helper.make_node("Mul", [current, "two"], [f"m{i}"]),
                                  helper.make_node("Add", [f"m{i}", "one"], [f"t{i}"])], f"then{i}", [], [then_out])
        other = helper.make_graph([helper.make_node("Neg", [current], [f"e{i}"])], f"else{i}", [], [else_out])
        nodes.append(helper.make_node("If", ["cond"], [f"y{i}"], name=f"if{i}", then_branch=then, else_branch=other))
        current = f"y{i}"
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N"]),
              helper.make_tensor_value_info("n", TensorProto.INT64, ["K"])]
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(current, TensorProto.FLOAT, ["N"])],
                              initializer=[zero, two, one])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), path)
    return path


def _compiler(path, keep=2):
    core = openvino.Core()
    compiled = []

    def compile_model(model):
        compiled.append(model)
        return openvino_session.compile_cpu(core, model, {"INFERENCE_PRECISION_HINT": "f32"})

    return openvino_branches.BranchCompiler(core.read_model(str(path)), lambda: core.read_model(str(path)),
                                            compile_model, keep), compiled


def _layer_types(compiled) -> set[str]:
    return {op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ops()}


def test_each_if_becomes_the_branch_it_takes(tmp_path):
    branches, compiled = _compiler(_if_model(tmp_path / "m.onnx", "int"), keep=2)
    assert branches.specializes
    x = np.array([1.0, -2.0, 3.0], np.float32)
    cases = {"then": (np.array([1, 2]), (x * 2 + 1) * 2 + 1), "else": (np.array([-3]), x)}
    for name, (n, expected) in cases.items():
        model = branches({"x": x, "n": n})
        assert branches.pattern({"n": n}) == ((True, True) if name == "then" else (False, False))
        np.testing.assert_allclose(model({"x": x, "n": n})[0], expected, err_msg=name)
        assert "If" not in _layer_types(model), name
    assert len(compiled) == 2
    branches({"x": x, "n": np.array([5])})  # a pattern compiled already: no compile
    assert len(compiled) == 2


def test_a_condition_on_a_float_input_shape_is_computed_from_the_shape(tmp_path):
    branches, compiled = _compiler(_if_model(tmp_path / "m.onnx", "shape"))
    assert branches.specializes
    x = np.array([1.0, -2.0, 3.0], np.float32)
    for n, expected in (([1], (x * 2 + 1) * 2 + 1), ([3], x), ([2], (x * 2 + 1) * 2 + 1)):
        model = branches({"x": x, "n": np.array(n)})
        np.testing.assert_allclose(model({"x": x, "n": np.array(n)})[0], expected, err_msg=str(n))
        assert "If" not in _layer_types(model)
    assert len(compiled) == 2


def test_the_least_recent_pattern_goes_past_keep(tmp_path):
    branches, compiled = _compiler(_if_model(tmp_path / "m.onnx", "int"), keep=1)
    x = np.ones(2, np.float32)
    for n in ([1], [-1], [1]):
        branches({"x": x, "n": np.array(n)})
    assert len(compiled) == 3  # the first pattern compiled again after the second took its place


def test_a_condition_on_a_float_input_compiles_the_model_as_it_is(tmp_path):
    branches, _compiled = _compiler(_if_model(tmp_path / "m.onnx", "float"))
    assert not branches.specializes and branches.pattern({}) == ()
    x = np.array([1.0, 2.0], np.float32)
    model = branches({"x": x, "n": np.array([0])})
    np.testing.assert_allclose(model({"x": x, "n": np.array([0])})[0], (x * 2 + 1) * 2 + 1)
    assert "If" in _layer_types(model)


def test_the_session_runs_both_patterns_right(tmp_path):
    path = _if_model(tmp_path / "m.onnx", "int")
    session = openvino_session.OpenVINOSession(path, threads=1)
    x = np.array([0.5, -1.0], np.float32)
    assert [p.name for p in session.get_inputs()] == ["x", "n"]
    for n, expected in (([2], (x * 2 + 1) * 2 + 1), ([-2], x), ([1], (x * 2 + 1) * 2 + 1)):
        np.testing.assert_allclose(session.run(None, {"x": x, "n": np.array(n)})[0], expected)
