"""com.microsoft Attention (q/k/v projection inside the op) -> three MatMuls + com.microsoft MultiHeadAttention.

ORT's transformer optimizer fuses Phi-4-multimodal's vision attention into Attention, whose packed q/k/v weight
(input 1) the quantizers cannot see: they take MatMuls with a constant 2-D weight only. This pass gives the
projections back as MatMuls so that INT4 / INT8 quantize them too.

Target (x [B, S, D_in]; W [D_in, Dq + Dk + Dv] and bias [Dq + Dk + Dv] constants; mask int32, optional):
    y = Attention(x, W, bias, mask_index[, , attention_bias], num_heads=N[, scale][, mask_filter_value]
                  [, unidirectional][, qkv_hidden_sizes=[Dq, Dk, Dv]])                    # [B, S, Dv]
Replacement (W split by columns into Wq [D_in, Dq], Wk [D_in, Dk], Wv [D_in, Dv]):
    y = MultiHeadAttention(MatMul(x, Wq), MatMul(x, Wk), MatMul(x, Wv), bias, key_padding_mask=mask_index
                           [, attention_bias], same attributes)
MultiHeadAttention adds the bias itself (the q, k, v slices at offsets 0, Dq, 2 Dq), as Attention does.

Why this form: ORT's CPU MultiHeadAttention refuses packed QKV ("Packed QKV of shape (B, L, N, 3, H) not
implemented for CPU", onnxruntime/contrib_ops/cpu/bert/multihead_attention.cc), so q, k and v go in as three
[B, S, D] inputs; three MatMuls rather than one MatMul + Split: no copy, and each projection is its own
quantizable (and excludable) node, as in the original model. With a mask or bias, both ops run the same CPU
attention code (AttentionCPUBase::ApplyAttention, same mask handling); without, MultiHeadAttention runs MLAS
flash attention (less memory at large patch counts).

The mask (ORT contrib-op spec, both ops): Attention's mask_index of shape (batch, total_sequence_length) or
(batch, sequence_length, total_sequence_length), 1 = attend and 0 = masked (the masked scores get
mask_filter_value), is MultiHeadAttention's key_padding_mask of the same shapes and meaning: it goes across
unchanged. Phi-4 feeds the first ([B, S] from image_attention_mask, mask_filter_value = float32 lowest).
Refused (node left as is, reason reported): 1-D mask_index (a (batch) length and a (2 * batch) end/start index
cannot be told apart from the graph, and MultiHeadAttention has no (2 * batch) form), 4-D (Megatron) or
unknown-rank masks, past / present / past_sequence_length, do_rotary, past_present_share_buffer,
rotary_embedding_dim, Dq != Dk, a weight or bias that is not a constant, attributes this pass does not know.

A plain onnx-ir pass, not an onnxscript rule set like its siblings: each Attention is either unfused or refused
with a reason the caller reports (the rewriter only logs failed checks), and the new nodes need names.
New nodes are named after the Attention (`<name>/MatMul_q`, `/MatMul_k`, `/MatMul_v`, `/MultiHeadAttention`),
so quantizer exclusions by name (re.search on `<name>`) still find them.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from quantize.passes import _rules

DOMAIN = "com.microsoft"
#: Attention attributes carried over to MultiHeadAttention unchanged (same meaning in both ops).
COPIED = ("num_heads", "scale", "mask_filter_value", "unidirectional")
#: Attention attributes that are fine at these values (their defaults: the feature is off).
OFF = {"do_rotary": 0, "past_present_share_buffer": 0, "rotary_embedding_dim": 0}
#: Attention inputs: 0 input, 1 weights, 2 bias, 3 mask_index, 4 past, 5 attention_bias, 6 past_sequence_length.
PAST, ATTENTION_BIAS, PAST_SEQUENCE_LENGTH = 4, 5, 6


def _input(node: ir.Node, index: int) -> ir.Value | None:
    return node.inputs[index] if len(node.inputs) > index else None


def _sizes(node: ir.Node, weight: np.ndarray) -> list[int] | str:
    """[Dq, Dk, Dv] from qkv_hidden_sizes (else three equal thirds of W's columns), or the reason it cannot be."""
    columns = weight.shape[1]
    attr = node.attributes.get("qkv_hidden_sizes")
    sizes = list(attr.as_ints()) if attr is not None else ([columns // 3] * 3 if columns % 3 == 0 else [])
    if len(sizes) != 3 or sum(sizes) != columns or min(sizes) <= 0:
        return f"qkv_hidden_sizes {sizes} does not split the {columns} weight columns"
    if sizes[0] != sizes[1]:
        return f"q and k widths differ ({sizes[0]} != {sizes[1]}): MultiHeadAttention needs them equal"
    heads = node.attributes.get_int("num_heads", 0)
    if heads <= 0 or sizes[0] % heads or sizes[2] % heads:
        return f"num_heads {heads} does not divide the q/k/v widths {sizes}"
    return sizes


def refusal(node: ir.Node) -> str | None:
    """Why this com.microsoft Attention cannot be unfused (None: it can)."""
    unknown = sorted(set(node.attributes) - set(COPIED) - set(OFF) - {"qkv_hidden_sizes"})
    if unknown:
        return f"unsupported attribute(s) {', '.join(unknown)}"
    on = [k for k, off in OFF.items() if node.attributes.get_int(k, off) != off]
    if on:
        return f"unsupported attribute(s) {', '.join(f'{k}={node.attributes.get_int(k)}' for k in on)}"
    if any(_input(node, i) is not None for i in (PAST, PAST_SEQUENCE_LENGTH)) or len(node.inputs) > 7:
        return "takes a past state (past / past_sequence_length)"
    if any(o.uses() or o.is_graph_output() for o in node.outputs[1:]):
        return "its present output is used"
    weight = _rules.const(_input(node, 1))
    if weight is None or weight.ndim != 2:
        return "weights (input 1) are not a constant 2-D tensor"
    bias_value = _input(node, 2)
    bias = _rules.const(bias_value)
    if bias_value is not None and (bias is None or bias.shape != (weight.shape[1],)):
        return f"bias (input 2) is not a constant of shape [{weight.shape[1]}]"
    sizes = _sizes(node, weight)
    if isinstance(sizes, str):
        return sizes
    mask = _input(node, 3)
    if mask is not None:
        rank = mask.shape.rank() if mask.shape is not None else None
        if rank not in (2, 3):
            return (f"mask_index of rank {rank}: only (batch, total_sequence_length) and (batch, sequence_length, "
                    "total_sequence_length) masks map onto MultiHeadAttention's key_padding_mask")
    return None


def _weight(graph: ir.Graph, name: str, array: np.ndarray) -> ir.Value:
    """A new initializer `name` (made unique in `graph`) holding `array`."""
    while name in graph.initializers:
        name += "_"
    value = ir.Value(name=name, shape=ir.Shape(array.shape), type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                     const_value=ir.tensor(np.ascontiguousarray(array), name=name))
    graph.register_initializer(value)
    return value


def unfuse(graph: ir.Graph, node: ir.Node, base: str) -> None:
    """Replace the Attention `node` (refusal(node) is None) by MatMul q/k/v + MultiHeadAttention in `graph`,
    the new nodes named `base`/...."""
    x, weights = node.inputs[0], node.inputs[1]
    weight = _rules.const(weights)
    sizes = _sizes(node, weight)
    ends = np.cumsum([0] + sizes)
    matmuls = []
    for part, start, end in zip("qkv", ends[:-1], ends[1:]):
        w = _weight(graph, f"{weights.name}_{part}", weight[:, start:end])
        matmuls.append(ir.Node("", "MatMul", [x, w], name=f"{base}/MatMul_{part}",
                               outputs=[ir.Value(name=f"{base}/{part}")]))
    attributes = [ir.Attr(k, node.attributes[k].type, node.attributes[k].value) for k in COPIED if k in node.attributes]
    mha_inputs = [m.outputs[0] for m in matmuls] + [_input(node, 2), _input(node, 3), _input(node, ATTENTION_BIAS)]
    while mha_inputs[-1] is None:
        mha_inputs.pop()
    mha = ir.Node(DOMAIN, "MultiHeadAttention", mha_inputs, attributes, name=f"{base}/MultiHeadAttention",
                  num_outputs=1)
    _rules.replace_node(graph, node, [*matmuls, mha], mha.outputs[0])
    if not weights.uses() and not weights.is_graph_output() and weights.name in graph.initializers:
        del graph.initializers[weights.name]  # the packed weight, now split


def apply(model: ir.Model, refused: dict[str, str] | None = None) -> int:
    """Unfuse every com.microsoft Attention of the main graph that can be; return how many.

    `refused`, when given, receives {node name: reason} for each Attention left as it is."""
    graph = model.graph
    targets = [n for n in graph if n.op_type == "Attention" and n.domain == DOMAIN]
    return _rules.replace_each(targets, "Attention", refusal, lambda node, base: unfuse(graph, node, base), refused)
