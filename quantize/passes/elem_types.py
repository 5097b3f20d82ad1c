"""Element types of every value of a graph: the graph's own type information, else inferred by op rules.

The exporters and ONNX Runtime's optimizer leave many intermediate values without a type (`value.type is
None`), and ONNX's shape inference stops at every com.microsoft node (it has no schemas for them). A
precision pass needs one fact per value: which element type it holds. `infer(model)` fills in the
missing ones, graph by graph in node order (subgraphs at their node), from the op's rule:

- `Cast` -> its `to`; `CastLike` -> input 1; `Shape`, `Size`, `NonZero`, `ArgMax`, `ArgMin` -> int64;
  comparisons and logic (`Equal`, `Less`, `Not`, `And`, ...) -> bool; `Constant` -> its value's;
  `ConstantOfShape` -> its value's (float32 by default); `Where` -> input 1; `TopK` -> input 0, int64;
- sequences: `SequenceEmpty` -> Sequence(dtype, float32 by default); `SequenceInsert` -> input 0;
  `ConcatFromSequence`, `SequenceAt` -> input 0's element type;
- `Loop` -> its body's outputs (after the condition); `If` -> its then-branch's outputs;
- every other op -> the type of its first typed input (arithmetic, data movement, normalisations,
  com.microsoft attention, rotary and GELU ops all return their input's type), except the ops in
  `UNKNOWN`, whose outputs are left untyped.

A value whose type is still unknown stays None (`elem_type` gives None): a pass treats it as not a float tensor,
and ONNX Runtime's type check of the result says so if it was one.
"""

from __future__ import annotations

import onnx_ir as ir

INT64_OPS = frozenset({"Shape", "Size", "NonZero", "ArgMax", "ArgMin"})
BOOL_OPS = frozenset({"Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "Not", "And", "Or", "Xor",
                      "IsNaN", "IsInf"})
#: Ops whose output type is not their first input's and that have no rule here: left untyped.
UNKNOWN = frozenset({"DequantizeLinear", "QuantizeLinear", "DynamicQuantizeLinear", "OneHot", "RandomNormal",
                     "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli",
                     "EyeLike", "StringNormalizer", "TfIdfVectorizer", "MatMulInteger", "ConvInteger",
                     "QLinearMatMul", "QLinearConv", "DynamicQuantizeMatMul", "MatMulIntegerToFloat",
                     "GatherBlockQuantized", "SplitToSequence", "SequenceConstruct", "Optional", "OptionalGetElement"})


def tensor(dtype: ir.DataType) -> ir.TensorType:
    return ir.TensorType(dtype)


def elem_type(value: ir.Value | None) -> ir.DataType | None:
    """The element type of a tensor value (None when unknown or not a tensor)."""
    if value is None or value.type is None or not isinstance(value.type, ir.TensorType):
        return None
    return value.type.dtype


def _attr_dtype(node: ir.Node, name: str, default: ir.DataType | None) -> ir.DataType | None:
    attr = node.attributes.get(name)
    return ir.DataType(attr.as_int()) if attr is not None else default


def _const_type(node: ir.Node) -> ir.DataType | None:
    for name, attr in node.attributes.items():
        if name == "value":
            return attr.as_tensor().dtype
        if name in ("value_float", "value_floats"):
            return ir.DataType.FLOAT
        if name in ("value_int", "value_ints"):
            return ir.DataType.INT64
    return None


def _first_typed(node: ir.Node) -> ir.TypeProtocol | None:
    return next((v.type for v in node.inputs if v is not None and v.type is not None), None)


def output_types(node: ir.Node) -> list[ir.TypeProtocol | None]:
    """The types of `node`'s outputs by its op's rule (None where no rule applies or an input is untyped)."""
    op, n = node.op_type, len(node.outputs)
    inputs = node.inputs
    if op == "Cast":
        return [tensor(_attr_dtype(node, "to", None))]
    if op == "CastLike":
        return [inputs[1].type if inputs[1] is not None else None]
    if op in INT64_OPS:
        return [tensor(ir.DataType.INT64)] * n
    if op in BOOL_OPS:
        return [tensor(ir.DataType.BOOL)] * n
    if op == "Constant":
        dtype = _const_type(node)
        return [tensor(dtype) if dtype is not None else None]
    if op == "ConstantOfShape":
        attr = node.attributes.get("value")
        return [tensor(attr.as_tensor().dtype if attr is not None else ir.DataType.FLOAT)]
    if op == "Where":
        return [inputs[1].type if inputs[1] is not None else None]
    if op == "TopK":
        return [inputs[0].type, tensor(ir.DataType.INT64)]
    if op == "SequenceEmpty":
        return [ir.SequenceType(tensor(_attr_dtype(node, "dtype", ir.DataType.FLOAT)))]
    if op in ("SequenceInsert", "SequenceErase"):
        return [inputs[0].type]
    if op in ("ConcatFromSequence", "SequenceAt"):
        seq = inputs[0].type
        return [seq.elem_type if isinstance(seq, ir.SequenceType) else None]
    if op == "Loop":
        return [v.type for v in node.attributes["body"].as_graph().outputs[1:]]
    if op == "If":
        return [v.type for v in node.attributes["then_branch"].as_graph().outputs]
    if op in UNKNOWN:
        return [None] * n
    return [_first_typed(node)] * n


def infer(model: ir.Model) -> int:
    """Fill in the type of every untyped value the rules can tell, in place; return how many were filled."""
    return _infer_graph(model.graph)


def _infer_graph(graph: ir.Graph) -> int:
    filled = 0
    for node in graph:
        if node.op_type == "Loop":
            filled += _type_loop_inputs(node)
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                filled += _infer_graph(attr.as_graph())
            elif attr.type == ir.AttributeType.GRAPHS:
                filled += sum(_infer_graph(g) for g in attr.as_graphs())
        for value, found in zip(node.outputs, output_types(node)):
            if value.type is None and found is not None:
                value.type = found
                filled += 1
    return filled


def _type_loop_inputs(node: ir.Node) -> int:
    """A Loop body's inputs: iteration number int64, condition bool, then the carried values' types."""
    body = node.attributes["body"].as_graph()
    known = [tensor(ir.DataType.INT64), tensor(ir.DataType.BOOL)] + [v.type if v is not None else None
                                                                     for v in node.inputs[2:]]
    filled = 0
    for value, found in zip(body.inputs, known):
        if value.type is None and found is not None:
            value.type = found
            filled += 1
    return filled

