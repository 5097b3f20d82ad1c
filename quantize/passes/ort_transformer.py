"""ONNX Runtime's transformer optimizer (python fusions only, opt_level 0: the saved graph stays
portable across ORT versions and execution providers).

model_type 'vit' with the attention mask kept as a mask (AttentionMaskFormat.AttentionMask): on this
encoder it fuses Gelu / FastGelu / BiasGelu and LayerNormalization; its Attention and
SkipLayerNormalization fusions find nothing (packed qkv, 2D RoPE, custom mask, rank-2 activations),
which the project's own passes then handle.

Large weights ORT's fusions do not read are held out while its optimizer runs: it gets data-less stand-ins
(`_hold_out_weights`) and the real tensors are put back into its result. In a graph with subgraphs (Qwen3-VL's
per-frame attention Loop in every block) that is every initializer of HOLD_OUT_BYTES or more: ORT's symbolic
shape inference copies every initializer of the main graph into each Loop body it infers, which with 24
Loops at 2B dims exhausts memory. In a graph without subgraphs (Phi-4-multimodal) the Attention fusion
reads the q, k, v weights and biases (it concatenates them) and the BiasGelu fusion reads the biases, so
only the MatMul weights outside attention are held out (o, fc1, fc2, the projector; `_held_names`): at
published dims that is 3/4 of the encoder's bytes that ORT's optimizer never copies.

ORT's optimizer looks one level into subgraphs when it drops unread nodes and initializers (`prune_graph`,
`update_graph`): a main-graph value read only two levels down (the segment attention's Loop inside its If
branch reads constants the export lifted to the main graph) would be dropped and the result invalid. Such values
are read by an Identity that is a graph output while the optimizer runs (`_deep_reads`; an initializer as a graph
output would stop its symbolic shape inference from sorting the graph), both removed after.
"""

import logging

import onnx_ir as ir
from onnxruntime.transformers.fusion_options import AttentionMaskFormat, FusionOptions
from onnxruntime.transformers.optimizer import optimize_model

from vlm_vision_onnx.core import onnx_io

MODEL_TYPE = "vit"
HOLD_OUT_BYTES = 1 << 16  # weights this large or larger never reach ORT's optimizer
SHAPE_OPS = frozenset({"Shape", "Size"})
KEPT = ".kept_for_ort"  # name suffix of the Identity nodes that keep deep-read values alive (`apply`)


def apply(model: ir.Model, num_heads: int, hidden_size: int) -> tuple[ir.Model, dict[str, int]]:
    """Return (optimized model, {fused op type: count} as ORT reports them, zero counts dropped)."""
    options = FusionOptions(MODEL_TYPE)
    options.attention_mask_format = AttentionMaskFormat.AttentionMask
    held = _hold_out_weights(model)
    outputs = list(model.graph.outputs)
    keepers = [ir.node("Identity", [value], name=f"{value.name}{KEPT}", outputs=[ir.Value(name=f"{value.name}{KEPT}")])
               for value in _deep_reads(model)]
    for keeper in keepers:
        model.graph.append(keeper)
        model.graph.outputs.append(keeper.outputs[0])
    try:
        proto = onnx_io.to_proto(model)
    finally:
        _put_back(model, held)
        model.graph.outputs[:] = outputs
        for keeper in keepers:
            model.graph.remove(keeper, safe=True)
    logging.getLogger("onnxruntime.transformers").setLevel(logging.ERROR)
    optimized = optimize_model(proto, model_type=MODEL_TYPE, num_heads=num_heads, hidden_size=hidden_size,
                               optimization_options=options, opt_level=0, only_onnxruntime=False)
    del proto
    stats = {k: v for k, v in optimized.get_fused_operator_statistics().items() if v}
    result = ir.serde.deserialize_model(optimized.model)
    _put_back(result, held)
    kept = {value.name for value in outputs}
    result.graph.outputs[:] = [value for value in result.graph.outputs if value.name in kept]
    for node in [n for n in result.graph if n.name.endswith(KEPT)]:
        result.graph.remove(node, safe=True)
    return result, stats


def _subgraphs(graph: ir.Graph):
    """The subgraphs of `graph`'s nodes (one level down)."""
    for node in graph:
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                yield attr.value
            elif attr.type == ir.AttributeType.GRAPHS:
                yield from attr.value


def _deep_reads(model: ir.Model) -> list[ir.Value]:
    """The main graph's values (inputs, initializers, node outputs) read by a node two or more subgraph levels
    down and neither by the main graph nor by its direct subgraphs."""
    main = model.graph
    own = {id(v) for v in (*main.inputs, *main.initializers.values())}
    own |= {id(v) for node in main for v in node.outputs}

    def read_in(graph: ir.Graph) -> dict[int, ir.Value]:
        found = {id(v): v for node in graph for v in node.inputs if v is not None and id(v) in own}
        for sub in _subgraphs(graph):
            found.update(read_in(sub))
        return found

    deep = {key: v for sub in _subgraphs(main) for inner in _subgraphs(sub) for key, v in read_in(inner).items()}
    shallow = {id(v) for graph in (main, *_subgraphs(main)) for node in graph for v in node.inputs if v is not None}
    shallow |= {id(v) for v in main.outputs}
    return [v for key, v in deep.items() if key not in shallow]


def _has_subgraphs(model: ir.Model) -> bool:
    return any(isinstance(attr.value, ir.Graph) or (isinstance(attr.value, list) and attr.value
                                                    and isinstance(attr.value[0], ir.Graph))
               for node in model.graph for attr in node.attributes.values())


def _held_names(model: ir.Model) -> set[str]:
    """The initializers of HOLD_OUT_BYTES or more that ORT's optimizer gets as data-less stand-ins: all of them
    in a graph with subgraphs; otherwise those read only as a MatMul's weight (input 1), except the q, k, v
    projections' weights that `_attention_projections` finds."""
    large = {name for name, value in model.graph.initializers.items()
             if value.const_value is not None and value.const_value.nbytes >= HOLD_OUT_BYTES}
    if _has_subgraphs(model):
        return large
    return {name for name in large - _attention_projections(model)
            if all(node.op_type == "MatMul" and index == 1
                   for node, index in model.graph.initializers[name].uses())}


def _attention_projections(model: ir.Model) -> set[str]:
    """Names of the initializers read by the q, k, v projections of every Softmax attention in the main graph:
    walking up from the Softmax (scores = q k^T) and from the probabilities' MatMul (its v), the initializer
    inputs of every node until and including the first MatMul with an initializer weight on each path (not
    through Shape/Size: a dynamic reshape's target shape is read from an earlier block's activation)."""
    found: set[str] = set()
    starts = []
    for node in model.graph:
        if node.op_type == "Softmax":
            starts.append(node)
            starts += [use for use, _ in node.outputs[0].uses() if use.op_type == "MatMul"]
    seen: set[int] = set()
    stack = [value for node in starts for value in node.inputs if value is not None]
    while stack:
        value = stack.pop()
        producer = value.producer()
        if producer is None or id(producer) in seen:
            continue
        seen.add(id(producer))
        if producer.op_type in SHAPE_OPS:
            continue  # reads only its input's shape: the path up it leads into earlier blocks
        initializers = [v.name for v in producer.inputs if v is not None and v.is_initializer()]
        found.update(initializers)
        if producer.op_type == "MatMul" and initializers:
            continue  # a projection: its input is the block's activation, not attention
        stack += [v for v in producer.inputs if v is not None and not v.is_initializer()]
    return found


def _hold_out_weights(model: ir.Model) -> dict[str, ir.TensorProtocol]:
    """Replace every initializer `_held_names` names by an external-data stand-in with no data behind it;
    return {name: the real tensor}."""
    held = {}
    for name in _held_names(model):
        value = model.graph.initializers[name]
        tensor = value.const_value
        held[name] = tensor
        value.const_value = ir.ExternalTensor(f"held-out/{name}", 0, tensor.nbytes, tensor.dtype,
                                              shape=tensor.shape, name=name)
    return held


def _put_back(model: ir.Model, held: dict[str, ir.TensorProtocol]) -> None:
    """Give the initializers named in `held` their real tensors again (the optimizer keeps their names)."""
    for name, value in model.graph.initializers.items():
        if name in held:
            value.const_value = held[name]
