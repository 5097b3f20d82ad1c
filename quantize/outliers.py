"""Outlier-stress weights: a few channels of the residual stream scaled up 20-100x, edited in the ONNX graph.

Trained ViTs carry a few hidden channels whose activations in the residual stream are 20-100x larger
than the rest ("massive activations"); after LayerNorm those channels stay outliers in the inputs of
the qkv, MLP-up and merger MatMuls. Dynamic INT8 quantizes each activation tensor with one scale, so
such a channel costs every other channel its resolution. Random weights have no outliers, so an
accuracy check on them says nothing about this failure.

`stress(model)` makes a checkpoint that has them, torch-free, from any encoder graph: every weight that
writes into the residual stream gets its output channels `channels` multiplied by `factors`. Writers
are found from the graph: the contributions summed by each SkipLayerNormalization (inputs 0 and 1, and
its bias) or by an Add whose output a LayerNormalization reads, traced back through bias Adds and
Reshapes to a MatMul (columns scaled), Gemm (transB: rows) or Conv (output channels) with constant
weights; a Transpose that moves the channel axis last is followed to a Conv only (SigLIP's patch
embedding). Since the stream is the sum of its writers, channel c of the stream becomes factors[c] times
what it was, at every layer (the position-embedding table, read through an interpolation, is left as
it is: its part of channel c keeps its scale, which changes nothing about the outlier). The edited
model is a different model; it is compared only with its own fp32 self.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from vlm_vision_onnx.core.errors import UsageError

#: How many residual channels become outliers, and their scale factors (20x .. 100x, geometric).
NUM_CHANNELS = 4
FACTOR_RANGE = (20.0, 100.0)
SEED = 0
PASS_THROUGH = ("Reshape", "Identity", "Squeeze", "Unsqueeze", "Flatten")

#: Normalisations whose input is the residual stream when an Add feeds them (RMSNorm fused by ORT's optimizer is
#: SimplifiedLayerNormalization, input 0 and scale 1, as LayerNormalization's input 0 and gamma 1).
NORMS = frozenset({"LayerNormalization", "SimplifiedLayerNormalization"})


def choose_channels(hidden: int, count: int = NUM_CHANNELS, seed: int = SEED) -> tuple[list[int], list[float]]:
    """`count` distinct channels in [0, hidden) (seeded) and their factors, geometric over FACTOR_RANGE."""
    count = min(count, hidden)
    channels = sorted(int(c) for c in np.random.default_rng(seed).choice(hidden, size=count, replace=False))
    factors = [round(float(f), 2) for f in np.geomspace(*FACTOR_RANGE, num=count)]
    return channels, factors


def residual_contributions(model: ir.Model) -> tuple[list[ir.Value], list[ir.Value]]:
    """(tensors summed into the residual stream, the stream's sums themselves).

    SkipLayerNormalization(input, skip, gamma, beta, bias) -> (..., input + skip + bias): input and skip
    are contributions, output 3 a sum. Add(a, b) whose output a LayerNormalization (or an RMSNorm, ORT's
    SimplifiedLayerNormalization: Qwen2.5-VL) reads: a sum of a, b.
    """
    sums: list[ir.Value] = []
    parts: list[ir.Value] = []
    for node in model.graph:
        if node.op_type == "SkipLayerNormalization":
            parts += [v for v in node.inputs[:2] if v is not None]
            if len(node.outputs) > 3:
                sums.append(node.outputs[3])
        elif (node.op_type == "Add" and all(v is not None and v.const_value is None for v in node.inputs)
              and any(use.node.op_type in NORMS for use in node.outputs[0].uses())):
            parts += list(node.inputs)
            sums.append(node.outputs[0])
    return parts, sums


def _scaled(node: ir.Node, position: int, index: tuple, scale: np.ndarray, model: ir.Model) -> None:
    """Give `node` at input `position` a copy of its constant with array[index] *= scale.

    In place when the node is the constant's only user; else (random init shares equal tensors, such as
    zero biases) the node gets its own copy and the other users keep the original.
    """
    value = node.inputs[position]
    array = value.const_value.numpy().copy()
    array[index] = array[index] * scale.astype(array.dtype)
    if len(value.uses()) == 1 and value.name in model.graph.initializers:
        value.const_value = ir.tensor(array, name=value.name)
        return
    name = f"{value.name}.outlier_stress.{node.name}"
    copy = ir.Value(name=name, shape=value.shape, type=value.type, const_value=ir.tensor(array, name=name))
    model.graph.register_initializer(copy)
    node.replace_input_with(position, copy)


def _writer(value: ir.Value, sums: set[int], hidden: int) -> list[tuple[ir.Node, str]]:
    """The weight-bearing nodes that produce `value` (through bias Adds and reshapes): [(node, kind)]."""
    node = value.producer()
    if node is None or id(value) in sums:
        return []
    if node.op_type in PASS_THROUGH:
        return _writer(node.inputs[0], sums, hidden)
    if node.op_type == "Gather" and node.attributes.get_int("axis", 0) == 0 and node.inputs[0].const_value is None:
        # rows reordered, channels kept (Qwen2.5-VL's window order of the patch embedding)
        return _writer(node.inputs[0], sums, hidden)
    if node.op_type == "Transpose":  # [B, C, L] -> [B, L, C] after a Conv (SigLIP's patch embedding)
        perm = node.attributes.get("perm")
        if perm is not None and list(perm.as_ints())[-1] == 1:
            return [(n, kind) for n, kind in _writer(node.inputs[0], sums, hidden) if kind == "Conv"]
        return []
    if node.op_type == "Add":
        const = [v for v in node.inputs if v.const_value is not None]
        other = [v for v in node.inputs if v.const_value is None]
        if len(const) == 1 and len(other) == 1:
            return [(node, "bias")] + _writer(other[0], sums, hidden)
        return []
    if node.op_type in ("MatMul", "Gemm", "Conv") and node.domain == "" and node.inputs[1].const_value is not None:
        return [(node, node.op_type)]
    return []


def _is_patch_embedding(node: ir.Node, kind: str) -> bool:
    """A Conv writer, or a MatMul writer that reads a model input (the patch Conv as a MatMul:
    quantize/passes/patch_matmul.py)."""
    return kind == "Conv" or (kind == "MatMul" and node.inputs[0] is not None and node.inputs[0].is_graph_input())


#: Which writers of the stream get the factors. "every" (the check's copy): every weight and bias, so each
#: block's input-dependent update of the outlier channels is scaled too. "embedding": the patch embedding
#: (weights and bias) and the SkipLayerNormalization bias terms only: the outliers are made once and pushed
#: by constants, so no block amplifies an error of its input into them (`bench.stress_ceiling` compares them).
WRITERS = ("every", "embedding")


def stress(model: ir.Model, channels: list[int] | None = None, factors: list[float] | None = None,
           writers: str = "every") -> dict:
    """Scale residual channels `channels` by `factors` in the writers of the stream (WRITERS), in place.

    Returns {channels, factors, hidden, writers: [{node, op, weight}], not_traced: [tensor names]}.
    UsageError when no residual stream is found (no SkipLayerNormalization, no Add -> LayerNormalization).
    """
    if writers not in WRITERS:
        raise ValueError(f"writers must be one of {WRITERS}, got {writers!r}")
    parts, sum_values = residual_contributions(model)
    if not parts:
        raise UsageError("the model has no residual stream this check recognises (no SkipLayerNormalization and "
                         "no Add feeding a LayerNormalization or SimplifiedLayerNormalization)")
    hidden = _hidden_size(model)
    if channels is None:
        channels, factors = choose_channels(hidden)
    scale = np.asarray(factors, dtype=np.float64)
    sums = {id(v) for v in sum_values}
    written, not_traced, seen = [], [], set()
    for value in parts:
        found = _writer(value, sums, hidden)
        if not found and id(value) not in sums:
            not_traced.append(value.name)
        if writers == "embedding" and not any(_is_patch_embedding(node, kind) for node, kind in found):
            continue
        for node, kind in found:
            if id(node) in seen:
                continue
            seen.add(id(node))
            if kind == "bias":
                position = next(i for i, v in enumerate(node.inputs) if v.const_value is not None)
                if node.inputs[position].const_value.shape[-1] == hidden:
                    _scaled(node, position, (..., channels), scale, model)
                continue
            weight = node.inputs[1].name
            if kind == "MatMul":
                _scaled(node, 1, (..., channels), scale, model)
            elif kind == "Gemm":
                trans_b = node.attributes.get("transB")
                _scaled(node, 1, (channels, ...) if trans_b and trans_b.as_int() else (..., channels), scale, model)
            else:  # Conv: weight [C_out, C_in, ...], bias [C_out]
                rank = len(node.inputs[1].const_value.shape)
                _scaled(node, 1, (channels, ...), scale.reshape(-1, *[1] * (rank - 1)), model)
            if len(node.inputs) > 2 and node.inputs[2] is not None and node.inputs[2].const_value is not None:
                _scaled(node, 2, (..., channels), scale, model)
            written.append({"node": node.name, "op": node.op_type, "weight": weight})
    for node in model.graph:  # SkipLayerNormalization's own bias adds into the stream too
        if node.op_type == "SkipLayerNormalization" and len(node.inputs) > 4 and node.inputs[4] is not None \
                and node.inputs[4].const_value is not None:
            _scaled(node, 4, (..., channels), scale, model)
    if not written:
        raise UsageError("no weight writing into the residual stream was found (nothing to scale for the "
                         "outlier-stress check)")
    return {"channels": list(channels), "factors": list(factors), "hidden": hidden, "writers": written,
            "not_traced": sorted(set(not_traced))}


def _hidden_size(model: ir.Model) -> int:
    """Width of the residual stream: the metadata's hidden_size, else the gamma length of the first norm."""
    props = dict(model.metadata_props)
    if "hidden_size" in props:
        return int(props["hidden_size"])
    for node in model.graph:
        if node.op_type == "SkipLayerNormalization" or node.op_type in NORMS:
            gamma = node.inputs[2 if node.op_type == "SkipLayerNormalization" else 1]
            if gamma is not None and gamma.const_value is not None:
                return int(gamma.const_value.shape[-1])
    raise UsageError("cannot tell the residual stream's width (no hidden_size metadata, no LayerNorm gamma)")
