"""quantize/passes/ort_transformer.py on small parsed graphs: ONNX Runtime's transformer optimizer fuses a decomposed
LayerNorm and an Erf GELU; the weights held out of it (HOLD_OUT_BYTES or more) come back with their values; a
main-graph constant read only two subgraph levels down (a Loop inside an If branch, as the segment attention's)
survives ORT's pruning; the outputs are the same in ONNX Runtime before and after."""

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

from quantize.passes import ort_transformer

WIDTH, OUT = 64, 512  # the MatMul weight [64, 512] float32 is 128 KiB: held out (>= HOLD_OUT_BYTES)
RNG = np.random.default_rng(0)


def _init(name: str, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values), name)


def _layer_norm_and_gelu() -> tuple[list, list]:
    """x [N, WIDTH] -> decomposed LayerNorm (ReduceMean, Sub, Pow, Sqrt, Div, scale, bias) -> MatMul W [WIDTH, OUT]
    -> Erf GELU -> h [N, OUT]: the nodes and initializers."""
    inits = [_init("axes", np.array([-1], np.int64)), _init("two", np.float32(2)), _init("eps", np.float32(1e-5)),
             _init("gamma", RNG.standard_normal(WIDTH).astype(np.float32)),
             _init("beta", RNG.standard_normal(WIDTH).astype(np.float32)),
             _init("W", (RNG.standard_normal((WIDTH, OUT)) / 8).astype(np.float32)),
             _init("sqrt2", np.float32(np.sqrt(2))), _init("one", np.float32(1)), _init("half", np.float32(0.5))]
    nodes = [h.make_node("ReduceMean", ["x", "axes"], ["mean"]),
             h.make_node("Sub", ["x", "mean"], ["centred"]),
             h.make_node("Pow", ["centred", "two"], ["squared"]),
             h.make_node("ReduceMean", ["squared", "axes"], ["var"]),
             h.make_node("Add", ["var", "eps"], ["var_eps"]),
             h.make_node("Sqrt", ["var_eps"], ["std"]),
             h.make_node("Div", ["centred", "std"], ["normed"]),
             h.make_node("Mul", ["normed", "gamma"], ["scaled"]),
             h.make_node("Add", ["scaled", "beta"], ["ln"]),
             h.make_node("MatMul", ["ln", "W"], ["proj"]),
             h.make_node("Div", ["proj", "sqrt2"], ["proj_s"]),
             h.make_node("Erf", ["proj_s"], ["erf"]),
             h.make_node("Add", ["erf", "one"], ["erf1"]),
             h.make_node("Mul", ["proj", "erf1"], ["gelu2"]),
             h.make_node("Mul", ["gelu2", "half"], ["h"])]
    return nodes, inits


def _model(nodes, inits, outputs=("h",)) -> onnx.ModelProto:
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, ["N", WIDTH])],
                         [h.make_tensor_value_info(o, T.FLOAT, None) for o in outputs], inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)], ir_version=10)


def _deep_model() -> onnx.ModelProto:
    """The LayerNorm + GELU block, then an If whose then-branch runs a Loop that adds the main graph's constant C
    (read nowhere else) to h twice: y = h + 2 C, two subgraph levels down."""
    nodes, inits = _layer_norm_and_gelu()
    inits += [_init("C", RNG.standard_normal(OUT).astype(np.float32)), _init("trips", np.int64(2)),
              _init("go", np.bool_(True))]
    body = h.make_graph([h.make_node("Identity", ["cond_in"], ["cond_out"]),
                         h.make_node("Add", ["acc_in", "C"], ["acc_out"])], "body",
                        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
                         h.make_tensor_value_info("acc_in", T.FLOAT, None)],
                        [h.make_tensor_value_info("cond_out", T.BOOL, []),
                         h.make_tensor_value_info("acc_out", T.FLOAT, None)])
    then = h.make_graph([h.make_node("Loop", ["trips", "go", "h"], ["looped"], body=body)], "then", [],
                        [h.make_tensor_value_info("looped", T.FLOAT, None)])
    otherwise = h.make_graph([h.make_node("Identity", ["h"], ["same"])], "else", [],
                             [h.make_tensor_value_info("same", T.FLOAT, None)])
    nodes += [h.make_node("If", ["go"], ["y"], then_branch=then, else_branch=otherwise)]
    return _model(nodes, inits, outputs=("y",))


def _run(proto: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def _apply(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, dict]:
    result, stats = ort_transformer.apply(ir.from_proto(proto), num_heads=0, hidden_size=0)
    return ir.to_proto(result), stats


def _weight(proto: onnx.ModelProto, name: str) -> np.ndarray:
    return numpy_helper.to_array(next(t for t in proto.graph.initializer if t.name == name))


def test_fuses_layer_norm_and_gelu_and_puts_the_held_weight_back():
    proto = _model(*_layer_norm_and_gelu())
    assert "W" in ort_transformer._held_names(ir.from_proto(proto))
    x = RNG.standard_normal((5, WIDTH)).astype(np.float32)
    optimized, stats = _apply(proto)
    ops = [n.op_type for n in optimized.graph.node]
    assert "LayerNormalization" in ops and "ReduceMean" not in ops, ops
    assert "Gelu" in ops and "Erf" not in ops, ops
    assert stats.get("LayerNormalization") == 1 and stats.get("Gelu") == 1, stats
    np.testing.assert_array_equal(_weight(optimized, "W"), _weight(proto, "W"))
    np.testing.assert_allclose(_run(optimized, x), _run(proto, x), rtol=1e-4, atol=1e-5)


def test_a_constant_read_two_subgraph_levels_down_survives():
    proto = _deep_model()
    model = ir.from_proto(proto)
    assert [v.name for v in ort_transformer._deep_reads(model)] == ["C"]
    assert ort_transformer._held_names(model) == {"W"}  # with subgraphs: every large initializer
    x = RNG.standard_normal((3, WIDTH)).astype(np.float32)
    optimized, _ = _apply(proto)
    assert "C" in {t.name for t in optimized.graph.initializer}
    assert [o.name for o in optimized.graph.output] == ["y"]  # the keepers are gone again
    assert not [n for n in optimized.graph.node if n.name.endswith(ort_transformer.KEPT)]
    np.testing.assert_array_equal(_weight(optimized, "W"), _weight(proto, "W"))
    np.testing.assert_allclose(_run(optimized, x), _run(proto, x), rtol=1e-4, atol=1e-5)


def test_the_input_model_is_left_as_it_was():
    """`apply` gives the caller's model its real weights and outputs back, whatever the optimizer did."""
    proto = _deep_model()
    model = ir.from_proto(proto)
    ort_transformer.apply(model, num_heads=0, hidden_size=0)
    again = ir.to_proto(model)
    assert [o.name for o in again.graph.output] == ["y"]
    np.testing.assert_array_equal(_weight(again, "W"), _weight(proto, "W"))
