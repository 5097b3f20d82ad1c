"""com.microsoft MultiHeadAttention without bias or past -> standard ONNX ops (`--ops standard`).

Runtimes without Microsoft's contrib ops (the ONNX reference evaluator, OpenVINO's ONNX frontend for this op,
TensorRT, CoreML, many NPUs) cannot run MultiHeadAttention. The segment attention of the Qwen exports
(builders/qwen_vl/segment_attention.py) uses exactly this form: unmasked MultiHeadAttention on frames; Qwen2.5-VL's
window attention (builders/qwen_vl/window_attention.py) adds a key padding mask on the windows cut at an edge.

Target (q [B, Sq, H*D], k and v [B, Skv, H*D]; num_heads = H; scale, default 1/sqrt(D)):
    y = MultiHeadAttention(q, k, v, num_heads=H[, scale])                                   # [B, Sq, H*D]
Replacement, opset 13+ ops only (the export's opset is 17-20 on the TorchScript path: ONNX's own `Attention`
needs opset 23, so the standard form is MatMul + Softmax):
    qh = Transpose(Reshape(q, [B, Sq, H, D]), [0, 2, 1, 3])                                 # [B, H, Sq, D]
    kt = Transpose(Reshape(k, [B, Skv, H, D]), [0, 2, 3, 1])                                # [B, H, D, Skv]
    vh = Transpose(Reshape(v, [B, Skv, H, D]), [0, 2, 1, 3])                                # [B, H, Skv, D]
    y = Reshape(Transpose(MatMul(Softmax(Mul(MatMul(qh, kt), scale), axis=-1), vh), [0, 2, 1, 3]), [B, Sq, H*D])
(each shape read from its tensor by Shape ops, so a batch of no rows reshapes too)
With a key padding mask m (int32 [B, Skv], 0: a padded key; the node's 5th input) the scaled scores get
(m - 1) x 10000 added, [B, 1, 1, Skv]: what ONNX Runtime adds (its mask_filter_value, -10000, on masked keys).
The scores [B, H, Sq, Skv] exist as a tensor: with the segment attention's query chunks
(`segment_attention.CHUNK_ROWS["standard"]`) Sq is bounded, so their size is H x chunk x segment length, never N x N.

Refused (node left as it is, reason returned): a bias, past or any input past key_padding_mask, a mask that is
not 2-D [B, Skv], an attribute other than num_heads and scale, a num_heads that is not positive, no scale and no static width.
Nodes inside Loop / If / Scan bodies are lowered too (new nodes named `<name>/...`).
"""

from __future__ import annotations

import onnx_ir as ir

from quantize.passes import _rules

DOMAIN = "com.microsoft"
KNOWN = {"num_heads", "scale"}
#: ONNX Runtime's default mask_filter_value, negated: what a masked key's score gets added.
MASK_FILTER = 10000.0


def refusal(node: ir.Node) -> str | None:
    """Why this MultiHeadAttention cannot be lowered (None: it can)."""
    inputs = list(node.inputs)
    if len(inputs) < 3 or any(v is None for v in inputs[:3]):
        return "has no q, k or v"
    if len(inputs) > 5 or (len(inputs) > 3 and inputs[3] is not None):
        return "takes a bias or past"
    mask = _mask(node)
    if len(inputs) == 5 and (mask is None or (mask.shape is not None and mask.shape.rank() != 2)):
        return "its key padding mask is not 2-D [batch, keys]"
    if any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
        return "its present outputs are used"
    unknown = sorted(set(node.attributes) - KNOWN)
    if unknown:
        return f"unsupported attribute(s) {', '.join(unknown)}"
    if node.attributes.get_int("num_heads", 0) <= 0:
        return "num_heads is not positive"
    if "scale" not in node.attributes and _width(node) is None:
        return "no scale attribute and no static width to derive 1/sqrt(head dim) from"
    return None


def _mask(node: ir.Node) -> ir.Value | None:
    """The key padding mask input (int32 [B, Skv]), or None."""
    return node.inputs[4] if len(node.inputs) == 5 else None


def _width(node: ir.Node) -> int | None:
    shape = node.inputs[0].shape
    last = shape[-1] if shape is not None and shape.rank() else None
    return last if isinstance(last, int) else None


def _constant(name: str, value) -> ir.Node:
    return ir.Node("", "Constant", [], [ir.AttrTensor("value", ir.tensor(value, name=name))], name=name,
                   outputs=[ir.Value(name=name)])


def lower(graph: ir.Graph, node: ir.Node, base: str) -> None:
    """Replace the MultiHeadAttention `node` (refusal(node) is None) by standard ops in `graph`."""
    import numpy as np

    heads = node.attributes.get_int("num_heads")
    scale = node.attributes.get_float("scale", 0.0) or (_width(node) // heads) ** -0.5
    nodes: list[ir.Node] = []

    def add(op: str, inputs: list[ir.Value], name: str, **attrs) -> ir.Value:
        made = ir.Node("", op, inputs, [ir.convenience.convert_attribute(k, v) for k, v in attrs.items()],
                       name=f"{base}/{name}", outputs=[ir.Value(name=f"{base}/{name}")])
        nodes.append(made)
        return made.outputs[0]

    # Shapes from the tensors, not 0 / -1 in a constant: a batch of no rows (Qwen2.5-VL's full windows where a frame
    # has none) cannot infer a -1. [B, S, C] -> [B, S, H, C / H]; the output [B, Sq, Cv].
    head_count = _constant(f"{base}/heads", np.array([heads], np.int64))
    factor = _constant(f"{base}/scale", np.array(scale, np.float32))
    nodes += [head_count, factor]
    q, k, v = node.inputs[:3]

    def heads_of(x: ir.Value, name: str) -> ir.Value:
        lead, width = add("Shape", [x], f"{name}_bs", start=0, end=2), add("Shape", [x], f"{name}_c", start=2, end=3)
        shape = add("Concat", [lead, head_count.outputs[0], add("Div", [width, head_count.outputs[0]], f"{name}_d")],
                    f"{name}_heads_shape", axis=0)
        return add("Reshape", [x, shape], f"{name}_heads")

    qh = add("Transpose", [heads_of(q, "q")], "q_bhsd", perm=[0, 2, 1, 3])
    kt = add("Transpose", [heads_of(k, "k")], "k_bhds", perm=[0, 2, 3, 1])
    vh = add("Transpose", [heads_of(v, "v")], "v_bhsd", perm=[0, 2, 1, 3])
    merged = add("Concat", [add("Shape", [q], "out_bs", start=0, end=2), add("Shape", [v], "out_c", start=2, end=3)],
                 "merged_shape", axis=0)
    scores = add("Mul", [add("MatMul", [qh, kt], "scores"), factor.outputs[0]], "scaled")
    mask = _mask(node)
    if mask is not None:  # (mask - 1) x MASK_FILTER: 0 on real keys, -10000 on padded ones, [B, 1, 1, Skv]
        filler = _constant(f"{base}/mask_filter", np.array(MASK_FILTER, np.float32))
        axes = _constant(f"{base}/mask_axes", np.array([1, 2], np.int64))
        one = _constant(f"{base}/one", np.array(1.0, np.float32))
        nodes += [filler, axes, one]
        keep = add("Cast", [mask], "mask_float", to=ir.DataType.FLOAT)
        bias = add("Mul", [add("Sub", [keep, one.outputs[0]], "mask_minus_one"), filler.outputs[0]], "mask_bias")
        scores = add("Add", [scores, add("Unsqueeze", [bias, axes.outputs[0]], "mask_bhqk")], "masked")
    attended = add("MatMul", [add("Softmax", [scores], "probs", axis=-1), vh], "attended")
    out = add("Reshape", [add("Transpose", [attended], "bshd", perm=[0, 2, 1, 3]), merged], "out")
    _rules.replace_node(graph, node, nodes, out)


def apply(model: ir.Model, refused: dict[str, str] | None = None) -> int:
    """Lower every com.microsoft MultiHeadAttention that can be, in the main graph and its subgraphs; return how
    many. `refused`, when given, receives {node name: reason} for each left as it is. The com.microsoft import
    is dropped when no node of that domain is left."""
    targets = [n for n in ir.traversal.RecursiveGraphIterator(model.graph)
               if n.op_type == "MultiHeadAttention" and n.domain == DOMAIN]
    count = _rules.replace_each(targets, "MultiHeadAttention", refusal,
                                lambda node, base: lower(node.graph, node, base), refused)
    if not any(n.domain == DOMAIN for n in ir.traversal.RecursiveGraphIterator(model.graph)):
        model.opset_imports.pop(DOMAIN, None)
    return count
