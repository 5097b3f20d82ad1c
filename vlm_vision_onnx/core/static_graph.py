"""Whether an ONNX graph is static, as an NPU compiler needs it (torch-free).

Static means: after ONNX shape inference (with data propagation) every tensor of the graph — inputs, outputs,
initializers and every node output — has a known rank and a number for every dim (no `dim_param`, no unknown
dim), and no node is a control-flow, sequence or data-dependent-shape op (`DYNAMIC_OPS`). `problems` lists what
breaks the rule; `python -m builders.vision --static` refuses to write a graph with any, and
`python -m runtime npu-check` names the first.
"""

from __future__ import annotations

import onnx

#: Ops an NPU compiler cannot take: control flow, sequences, and ops whose output shape depends on data.
DYNAMIC_OPS = frozenset({
    "Loop", "Scan", "If", "NonZero", "Compress", "CumSum", "Range", "Unique", "TopK", "NonMaxSuppression",
    "SequenceAt", "SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength",
    "SequenceMap", "ConcatFromSequence", "SplitToSequence", "StringSplit", "RegexFullMatch",
})

QDQ = ("QuantizeLinear", "DequantizeLinear")


def _dims_problem(name: str, value_type: onnx.TypeProto) -> str | None:
    if not value_type.HasField("tensor_type"):
        return f"{name} is not a tensor ({value_type.WhichOneof('value')})"
    tensor = value_type.tensor_type
    if not tensor.HasField("shape"):
        return f"{name} has no inferred shape"
    for axis, dim in enumerate(tensor.shape.dim):
        if dim.HasField("dim_param"):
            return f"{name} axis {axis} is symbolic ({dim.dim_param})"
        if not dim.HasField("dim_value"):
            return f"{name} axis {axis} is unknown"
    return None


#: Initializers past this many bytes enter shape inference by their dims and type only (a 2B tower's weights would
#: otherwise be copied, and past protobuf's 2 GiB not serialise at all).
LIGHT_BYTES = 1 << 16


def _light(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of `model` whose large initializers carry no data (dims and type are all shape inference reads of
    them; the small ones, such as Reshape's shapes, keep their values for data propagation)."""
    copy = onnx.ModelProto()
    graph = model.graph
    kept = list(graph.initializer)
    graph.ClearField("initializer")
    try:
        copy.CopyFrom(model)
    finally:
        graph.initializer.extend(kept)
    for tensor in kept:
        if tensor.ByteSize() > LIGHT_BYTES:
            copy.graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
        else:
            copy.graph.initializer.append(tensor)
    return copy


def _standard_qdq(model: onnx.ModelProto) -> onnx.ModelProto:
    """For shape inference only: a copy whose com.microsoft QuantizeLinear / DequantizeLinear (what ONNX Runtime's
    quantizer writes for 16-bit types below opset 21; ONNX has no shape inference for them) are the standard ops at
    opset 21, which take 16-bit types. Ops from opset 18 to 21 differ in the types they take, not in their shapes."""
    contrib = [n for n in model.graph.node if n.domain == "com.microsoft" and n.op_type in QDQ]
    if not contrib:
        return model
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        if node.domain == "com.microsoft" and node.op_type in QDQ:
            node.domain = ""
    for entry in copy.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = max(entry.version, 21)
    return copy


def problems(model: onnx.ModelProto, limit: int = 20) -> list[str]:
    """What keeps `model` from being static (at most `limit` lines; [] when it is static).

    `model` may be the graph alone (external data not loaded): shape inference reads initializer dims only."""
    found: list[str] = []
    for node in model.graph.node:
        if node.op_type in DYNAMIC_OPS or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
                                              for a in node.attribute):
            found.append(f"node {node.name or '(unnamed)'} is {node.op_type}: a control-flow or data-dependent op")
    try:
        inferred = onnx.shape_inference.infer_shapes(_standard_qdq(_light(model)), strict_mode=True, data_prop=True)
    except Exception as err:  # noqa: BLE001 -- an op shape inference cannot take is a finding, not a crash
        return (found + [f"ONNX shape inference failed: {str(err).splitlines()[0]}"])[:limit]
    graph = inferred.graph
    typed = {v.name: v.type for v in list(graph.input) + list(graph.value_info) + list(graph.output)}
    for value in list(graph.input) + list(graph.output):
        problem = _dims_problem(f"{'input' if value in graph.input else 'output'} {value.name}", value.type)
        if problem:
            found.append(problem)
    for node in graph.node:
        for output in node.output:
            if not output:
                continue
            if output not in typed:
                found.append(f"{output} (output of {node.op_type} {node.name}) has no inferred shape")
                continue
            problem = _dims_problem(f"{output} (output of {node.op_type} {node.name})", typed[output])
            if problem:
                found.append(problem)
    return found[:limit]
