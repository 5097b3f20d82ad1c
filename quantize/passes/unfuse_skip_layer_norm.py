"""com.microsoft SkipLayerNormalization -> Add (+ bias Add) + LayerNormalization, for ONNX Runtime's CPU.

Target: y, mean, inv_std, s = SkipLayerNormalization(a, b, gamma[, beta[, bias]]) with mean and inv_std unused.
Replacement: s = Add(a, b) (then Add(s, bias)); y = LayerNormalization(s, gamma[, beta], axis=-1, epsilon);
s feeds whatever read output 3 (the next residual).

Why: ORT 1.31's CPU SkipLayerNormalization kernel is 4.3-4.7x slower than Add + LayerNormalization (one
thread, AMD EPYC: 11.8 vs 2.7 ms at Phi-4-multimodal's [2, 1025, 1152], 4.1 vs 0.9 ms at Qwen3-VL 2B's
[784, 1024]; `python -m bench.skip_layer_norm`, bench/results/skip-layer-norm.md), and it was 5-7% of the
INT8 encoders' node time (docs/quantization.md, "optimize"). ORT's CPU session does not
fuse the pair back at load (its own SkipLayerNormFusion leaves an Add whose sum feeds the next residual).
ORT's transformer optimizer still fuses SkipLayerNormalization for Phi-4-multimodal, because its Attention
fusion anchors on it; this pass then splits them. Outputs change only by float rounding (<= 1e-5).
"""

import onnx_ir as ir

MS_DOMAIN = "com.microsoft"
DEFAULT_EPSILON = 1e-12  # the contrib op's schema default


def _split(graph: ir.Graph, node: ir.Node) -> bool:
    """Replace one SkipLayerNormalization by Add (+ Add) + LayerNormalization; False when it cannot be."""
    if any(out.uses() or out.is_graph_output() for out in node.outputs[1:3] if out is not None and out.name):
        return False  # mean / inv_std read: no standard equivalent
    a, b, gamma = node.inputs[:3]
    beta = node.inputs[3] if len(node.inputs) > 3 else None
    bias = node.inputs[4] if len(node.inputs) > 4 else None
    epsilon = node.attributes.get_float("epsilon", DEFAULT_EPSILON)
    added = [ir.node("Add", [a, b])]
    if bias is not None:
        added.append(ir.node("Add", [added[-1].outputs[0], bias]))
    total = added[-1].outputs[0]
    norm = ir.node("LayerNormalization", [total, gamma] + ([beta] if beta is not None else []),
                   attributes={"axis": -1, "epsilon": epsilon})
    graph.insert_after(node, [*added, norm])
    _take_over(node.outputs[0], norm.outputs[0])
    if len(node.outputs) > 3 and node.outputs[3] is not None:
        _take_over(node.outputs[3], total)
    graph.remove(node, safe=True)
    return True


def _take_over(old: ir.Value, new: ir.Value) -> None:
    """`new` replaces `old` for every reader; a graph output keeps its name."""
    new.shape, new.type = old.shape, old.type
    name = old.name if old.is_graph_output() else None
    old.replace_all_uses_with(new, replace_graph_outputs=True)
    if name is not None:
        old.name, new.name = None, name


def apply(model: ir.Model) -> int:
    """Split every SkipLayerNormalization of the main graph whose mean / inv_std nobody reads; return how many."""
    if model.opset_imports.get("", 0) < 17:
        return 0  # LayerNormalization is opset 17
    nodes = [n for n in model.graph if n.op_type == "SkipLayerNormalization" and n.domain == MS_DOMAIN]
    return sum(_split(model.graph, node) for node in nodes)
