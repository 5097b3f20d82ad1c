"""SkipLayerNormalization fusion with a linear bias between the residual Add and the MatMul (real
checkpoints have biases; the random tiny weights have zero biases that the fold pass removes)."""

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from quantize.passes import skip_layer_norm
from tests import test_quantize_support as support


def residual_graph(rng, width: int = 8) -> ir.Model:
    """y = LayerNorm(res + (x @ W + b)), with the residual sum also an output: inputs [N, width]."""
    w, b, gamma, beta = (rng.standard_normal(s).astype(np.float32) for s in ((width, width), width, width, width))
    nodes = [helper.make_node("MatMul", ["x", "W"], ["mm"]), helper.make_node("Add", ["mm", "b"], ["lin"]),
             helper.make_node("Add", ["res", "lin"], ["sum"]),
             helper.make_node("LayerNormalization", ["sum", "gamma", "beta"], ["y"], axis=-1, epsilon=1e-6)]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", width]) for n in ("x", "res", "y", "sum")]
    inits = [numpy_helper.from_array(a, n) for a, n in ((w, "W"), (b, "b"), (gamma, "gamma"), (beta, "beta"))]
    graph = helper.make_graph(nodes, "residual", io[:2], io[2:], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    return ir.from_proto(proto)


def test_bias_goes_into_skip_layer_norm():
    rng = np.random.default_rng(0)
    model = residual_graph(rng)
    feeds = {"x": rng.standard_normal((5, 8), dtype=np.float32), "res": rng.standard_normal((5, 8), dtype=np.float32)}
    expected = support.run_graph(model, feeds)
    assert skip_layer_norm.apply(model) == 1
    (fused,) = support.ops(model, "SkipLayerNormalization")
    assert len(fused.inputs) == 5 and fused.inputs[4].name == "b"  # the linear bias is the 5th input
    assert [n.op_type for n in model.graph] == ["MatMul", "SkipLayerNormalization"]
    for got, want in zip(support.run_graph(model, feeds), expected):
        np.testing.assert_allclose(got, want, atol=1e-5)
