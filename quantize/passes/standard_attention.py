"""com.microsoft MultiHeadAttention without mask, bias or past -> standard ONNX ops (`--ops standard`).

Runtimes without Microsoft's contrib ops (the ONNX reference evaluator, OpenVINO's ONNX frontend for this op,
TensorRT, CoreML, many NPUs) cannot run MultiHeadAttention. The segment attention of the Qwen exports
(builders/qwen_vl/segment_attention.py) uses exactly this form: one unmasked MultiHeadAttention per Loop step.

Target (q [B, Sq, H*D], k and v [B, Skv, H*D]; num_heads = H; scale, default 1/sqrt(D)):
    y = MultiHeadAttention(q, k, v, num_heads=H[, scale])                                   # [B, Sq, H*D]
Replacement, opset 13+ ops only (the export's opset is 17-20 on the TorchScript path: ONNX's own `Attention`
needs opset 23, so the standard form is MatMul + Softmax):
    qh = Transpose(Reshape(q, [0, 0, H, -1]), [0, 2, 1, 3])                                 # [B, H, Sq, D]
    kt = Transpose(Reshape(k, [0, 0, H, -1]), [0, 2, 3, 1])                                 # [B, H, D, Skv]
    vh = Transpose(Reshape(v, [0, 0, H, -1]), [0, 2, 1, 3])                                 # [B, H, Skv, D]
    y = Reshape(Transpose(MatMul(Softmax(Mul(MatMul(qh, kt), scale), axis=-1), vh), [0, 2, 1, 3]), [0, 0, -1])
The scores [B, H, Sq, Skv] exist as a tensor: with the segment attention's query chunks
(`segment_attention.CHUNK_ROWS["standard"]`) Sq is bounded, so their size is H x chunk x segment length, never N x N.

Refused (node left as it is, reason returned): any input past v (key_padding_mask, bias, past, ...), an
attribute other than num_heads and scale, a num_heads that is not positive, no scale and no static width.
Nodes inside Loop / If / Scan bodies are lowered too (new nodes named `<name>/...`).
"""

from __future__ import annotations

import onnx_ir as ir

from quantize.passes import _rules

DOMAIN = "com.microsoft"
KNOWN = {"num_heads", "scale"}


def refusal(node: ir.Node) -> str | None:
    """Why this MultiHeadAttention cannot be lowered (None: it can)."""
    if len(node.inputs) != 3 or any(v is None for v in node.inputs):
        return "takes inputs past q, k, v (mask, bias or past)"
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

    split = _constant(f"{base}/heads_shape", np.array([0, 0, heads, -1], np.int64))
    merged = _constant(f"{base}/merged_shape", np.array([0, 0, -1], np.int64))
    factor = _constant(f"{base}/scale", np.array(scale, np.float32))
    nodes += [split, merged, factor]
    q, k, v = node.inputs
    qh = add("Transpose", [add("Reshape", [q, split.outputs[0]], "q_heads")], "q_bhsd", perm=[0, 2, 1, 3])
    kt = add("Transpose", [add("Reshape", [k, split.outputs[0]], "k_heads")], "k_bhds", perm=[0, 2, 3, 1])
    vh = add("Transpose", [add("Reshape", [v, split.outputs[0]], "v_heads")], "v_bhsd", perm=[0, 2, 1, 3])
    scores = add("Mul", [add("MatMul", [qh, kt], "scores"), factor.outputs[0]], "scaled")
    attended = add("MatMul", [add("Softmax", [scores], "probs", axis=-1), vh], "attended")
    out = add("Reshape", [add("Transpose", [attended], "bshd", perm=[0, 2, 1, 3]), merged.outputs[0]], "out")
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
