"""SkipLayerNormalization split into Add (+ bias Add) + LayerNormalization: the same outputs (the normalised
value and the residual sum, which feeds the next residual and may be a graph output), none left when mean /
inv_std are unread, and left as it is when they are read."""

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantize.passes import unfuse_skip_layer_norm
from tests import support

WIDTH = 8


def skip_graph(rng, with_bias: bool, read_mean: bool = False) -> ir.Model:
    """y, _, _, s = SkipLayerNorm(x @ W, res, gamma, beta[, b]); out = y @ W + s (the next residual); y and s
    are graph outputs too, rank 3 [B, S, WIDTH]."""
    w, b, gamma, beta = (rng.standard_normal(s).astype(np.float32) for s in ((WIDTH, WIDTH), WIDTH, WIDTH, WIDTH))
    skip_inputs = ["mm", "res", "gamma", "beta"] + (["b"] if with_bias else [])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"]),
             helper.make_node("SkipLayerNormalization", skip_inputs, ["y", "mean" if read_mean else "", "", "s"],
                              domain="com.microsoft", epsilon=1e-6),
             helper.make_node("MatMul", ["y", "W"], ["y2"]), helper.make_node("Add", ["y2", "s"], ["out"])]
    dims = ["B", "S", WIDTH]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, dims) for n in ("x", "res", "out", "y", "s")]
    if read_mean:
        io.append(helper.make_tensor_value_info("mean", TensorProto.FLOAT, None))
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "W"), (b, "b"), (gamma, "gamma"), (beta, "beta"))]
    graph = helper.make_graph(nodes, "skip", io[:2], io[2:], inits if with_bias else inits[:1] + inits[2:])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    return ir.from_proto(proto)


def feeds(rng) -> dict[str, np.ndarray]:
    return {n: rng.standard_normal((2, 5, WIDTH), dtype=np.float32) for n in ("x", "res")}


@pytest.mark.parametrize("with_bias", [True, False])
def test_split_keeps_every_output(with_bias):
    rng = np.random.default_rng(0)
    model, inputs = skip_graph(rng, with_bias), feeds(rng)
    expected = support.run_graph(model, inputs)
    assert unfuse_skip_layer_norm.apply(model) == 1
    assert not support.ops(model, "SkipLayerNormalization")
    assert [n.op_type for n in model.graph] == (["MatMul", "Add"] + ["Add"] * with_bias
                                               + ["LayerNormalization", "MatMul", "Add"])
    (norm,) = support.ops(model, "LayerNormalization")
    assert norm.attributes.get_float("epsilon") == pytest.approx(1e-6) and norm.attributes.get_int("axis") == -1
    assert [o.name for o in model.graph.outputs] == ["out", "y", "s"]
    for got, want in zip(support.run_graph(model, inputs), expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_a_read_mean_keeps_the_fused_op():
    rng = np.random.default_rng(1)
    model = skip_graph(rng, with_bias=True, read_mean=True)
    assert unfuse_skip_layer_norm.apply(model) == 0
    assert len(support.ops(model, "SkipLayerNormalization")) == 1
