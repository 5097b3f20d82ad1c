"""fp32 -> fp16 for a chosen set of nodes: their weights and activations in float16, one Cast per crossing.

`convert(model, half)` runs every node of `half` (compute nodes; `quantize.fp16_plan` chooses them) in
float16 and leaves every other node in float32. Values keep one element type each, their producer's:

- a node of `half`: each float32 tensor input becomes float16 (an initializer through an fp16 copy, which
  replaces it when no float32 user is left; anything else through one Cast per value, shared by all its
  float16 users and placed right after the value's producer, so a value read in a Loop body is cast once,
  outside); its float outputs become float16, and a `Cast(to=float)` among them casts to float16;
- a data-movement node (`MOVERS`: Reshape, Transpose, Slice, Concat, Gather, ...) runs in float16 when every
  non-constant float input it reads is float16 already, else in float32: moving values never adds a Cast;
- every other node stays float32: a float16 input reaches it through one shared Cast to float32 (exact).
  Sequence ops stay float32 (a Loop's carried sequence keeps its type), so do inputs whose type is the
  op's own business (`OWN_TYPE`: Cast's input, Shape's, Resize's scales, ...) and the normalisations'
  statistics outputs (`FLOAT_OUTPUTS`);
- graph inputs and outputs keep their types (a main-graph output computed in float16 gets a final Cast
  under its own name), and so do every subgraph's (a Loop's carried values never change type).

Unlike onnxruntime.transformers.float16 (ORT 1.31), which writes one `<value>_cast_to_fp32_node` per
float32 consumer of a value (two nodes of the same name when two blocked nodes share an initializer, and
ORT refuses the model), one Cast per (value, type) exists by construction. The pass needs every value's
element type: `quantize.passes.elem_types.infer` first.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx_ir as ir

from quantize.passes import elem_types

FLOAT, HALF = ir.DataType.FLOAT, ir.DataType.FLOAT16
#: Ops that only move, select or copy values: they follow their inputs' precision.
MOVERS = frozenset({"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Flatten", "Identity", "Slice", "Split",
                    "Concat", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad", "Where",
                    "DepthToSpace", "SpaceToDepth"})
#: Sequence ops: float32, so that sequences (a Loop's carried values) keep their element type.
SEQUENCE_OPS = frozenset({"SequenceEmpty", "SequenceInsert", "SequenceErase", "SequenceAt", "SequenceConstruct",
                          "SequenceLength", "ConcatFromSequence", "SplitToSequence"})
#: {op: input positions whose type is the op's own business}: never cast ("*": every input).
OWN_TYPE: dict[str, tuple[int, ...] | str] = {"Cast": "*", "Shape": "*", "Size": "*", "CastLike": (0,),
                                              "Resize": (2,), "Upsample": (1,)}
#: {op: output positions that stay float32 whatever the node's precision} (ONNX / ORT type constraint `U`:
#: the mean and inverse standard deviation of the normalisations).
FLOAT_OUTPUTS: dict[str, tuple[int, ...]] = {"LayerNormalization": (1, 2), "SkipLayerNormalization": (1, 2),
                                             "SimplifiedLayerNormalization": (1,),
                                             "SkipSimplifiedLayerNormalization": (1, 2)}
CONTAINERS = frozenset({"Loop", "If", "Scan"})


@dataclass
class Converted:
    """What `convert` did: node counts, Casts inserted, weights turned float16 (and kept float32 too)."""

    half_nodes: int = 0
    half_movers: int = 0
    casts: dict[str, int] = field(default_factory=lambda: {"to_fp16": 0, "to_fp32": 0})
    half_weights: int = 0
    shared_weights: list[str] = field(default_factory=list)  # weights both an fp16 and an fp32 node read


def is_float(value: ir.Value | None, dtype: ir.DataType | None = None) -> bool:
    """A float16/float32 tensor (of `dtype` when given)."""
    found = elem_types.elem_type(value)
    return found in (FLOAT, HALF) if dtype is None else found == dtype


def own_type(node: ir.Node, index: int) -> bool:
    positions = OWN_TYPE.get(node.op_type, ())
    return positions == "*" or index in positions


def is_constant(value: ir.Value) -> bool:
    return value.is_initializer() or (value.producer() is not None and value.producer().op_type == "Constant")


def float_node(node: ir.Node) -> bool:
    """Whether the node reads (outside its own-type inputs) or writes a float tensor."""
    return (any(is_float(v) for i, v in enumerate(node.inputs) if not own_type(node, i))
            or any(is_float(v) for v in node.outputs))


class _Converter:
    def __init__(self, model: ir.Model, half: set[ir.Node]):
        self.model, self.half = model, half
        self.casts: dict[tuple[int, ir.DataType], ir.Value] = {}
        self.weights: dict[int, tuple[ir.Value, ir.Value]] = {}  # id(fp32 initializer) -> (it, its fp16 copy)
        self.done = Converted()

    def cast(self, value: ir.Value, dtype: ir.DataType) -> ir.Value:
        """`value` as `dtype`: an fp16 initializer copy, or the one Cast of `value` to `dtype`."""
        if dtype == HALF and value.is_initializer():
            return self.half_weight(value)
        key = (id(value), dtype)
        if key not in self.casts:
            suffix = "fp16" if dtype == HALF else "fp32"
            node = ir.Node("", "Cast", [value], [ir.AttrInt64("to", dtype)], name=f"{value.name}/to_{suffix}",
                           num_outputs=1)
            out = node.outputs[0]
            out.name, out.type, out.shape = f"{value.name}/{suffix}", ir.TensorType(dtype), value.shape
            producer = value.producer()
            if producer is not None:
                producer.graph.insert_after(producer, node)
            else:  # a graph input
                graph = value.graph
                graph.insert_before(next(iter(graph)), node)
            self.casts[key] = out
            self.done.casts[f"to_{suffix}"] += 1
        return self.casts[key]

    def half_weight(self, value: ir.Value) -> ir.Value:
        if id(value) not in self.weights:
            array = value.const_value.numpy()
            name = f"{value.name}/fp16"
            copy = ir.Value(name=name, shape=value.shape, type=ir.TensorType(HALF),
                            const_value=ir.tensor(array.astype(np.float16), name=name))
            value.graph.register_initializer(copy)
            self.weights[id(value)] = (value, copy)
        return self.weights[id(value)][1]

    def mode(self, node: ir.Node) -> ir.DataType | None:
        """HALF or FLOAT for a float node, None for one that touches no float tensor."""
        if not float_node(node) or node.op_type in CONTAINERS:
            return None
        if node in self.half:
            return HALF
        if node.op_type in MOVERS:
            moved = [v for i, v in enumerate(node.inputs)
                     if not own_type(node, i) and is_float(v) and not is_constant(v)]
            if moved and all(is_float(v, HALF) for v in moved):
                return HALF
        return FLOAT

    def graph(self, graph: ir.Graph) -> None:
        outputs = [(v, elem_types.elem_type(v)) for v in graph.outputs]
        for node in list(graph):
            for attr in node.attributes.values():
                if attr.type == ir.AttributeType.GRAPH:
                    self.graph(attr.as_graph())
                elif attr.type == ir.AttributeType.GRAPHS:
                    for sub in attr.as_graphs():
                        self.graph(sub)
            self.node(node)
        for i, (value, dtype) in enumerate(outputs):  # every graph keeps its output types
            if dtype == FLOAT and is_float(value, HALF):
                self.keep_output(graph, i, value)

    def node(self, node: ir.Node) -> None:
        dtype = self.mode(node)
        if dtype is None:
            return
        for i, value in enumerate(node.inputs):
            if own_type(node, i) or not is_float(value) or is_float(value, dtype):
                continue
            node.replace_input_with(i, self.cast(value, dtype))
        if dtype == FLOAT:
            return
        if node in self.half:
            self.done.half_nodes += 1
        else:
            self.done.half_movers += 1
        if node.op_type == "Cast" and node.attributes.get_int("to") == FLOAT:
            node.attributes["to"] = ir.AttrInt64("to", HALF)
        for i, value in enumerate(node.outputs):
            if is_float(value, FLOAT) and i not in FLOAT_OUTPUTS.get(node.op_type, ()):
                value.type = ir.TensorType(HALF)

    def keep_output(self, graph: ir.Graph, index: int, value: ir.Value) -> None:
        """Graph output `index` (now float16) back to float32 through a Cast that takes over its name."""
        name = value.name
        value.name = f"{name}/fp16"
        node = ir.Node("", "Cast", [value], [ir.AttrInt64("to", FLOAT)], name=f"{name}/to_fp32", num_outputs=1)
        out = node.outputs[0]
        out.type, out.shape = ir.TensorType(FLOAT), value.shape
        graph.insert_after(value.producer(), node)
        graph.outputs[index] = out
        out.name = name
        self.done.casts["to_fp32"] += 1

    def finish(self) -> Converted:
        """Drop the float32 weights no node reads any more; their fp16 copies take their names."""
        for value, copy in self.weights.values():
            graph = value.graph
            if value.uses() or value.is_graph_output():
                self.done.shared_weights.append(value.name)
                continue
            name = value.name
            del graph.initializers[name]
            del graph.initializers[copy.name]
            copy.name = name
            copy.const_value.name = name
            graph.register_initializer(copy)
            self.done.half_weights += 1
        return self.done


def convert(model: ir.Model, half: set[ir.Node]) -> Converted:
    """Run the nodes of `half` in float16 (see the module docstring), in place; the model's element types
    must be known (`elem_types.infer`)."""
    converter = _Converter(model, half)
    converter.graph(model.graph)
    return converter.finish()
