"""Which nodes of an encoder run in float16 in its fp16 variant, and why the others stay float32.

Candidates are the compute nodes of the data path: every node that touches float tensors and reads the
pixels (the family's first input, `pixel_values`), directly or through other nodes, Loop bodies included.
Data-movement and sequence ops are not candidates: they follow their inputs (`quantize.passes.float16`).
What is not in the data path (rotary angles and position-embedding taps: functions of `grid_thw` alone,
where float16 would round the angles of far positions) stays float32 and reaches float16 nodes through
one Cast. Among the candidates, kept float32 with a reason each:

- structural: normalisations (LayerNormalization, SkipLayerNormalization, ...: their input is the residual
  stream, which carries the outlier channels, and their sums of squares overflow float16 first), softmax,
  and the residual stream itself where it is a plain Add that a LayerNormalization reads
  (`quantize.outliers.residual_contributions`): the stream, and with it the outlier channels, stays float32;
- measured: a node one of whose float tensors reaches max |x| > 65504 / headroom in an fp32 run at the
  calibration layouts, of the model and of its outlier-stress copy (`magnitudes`, through `core.taps`):
  that close to float16's largest finite value, another image overflows;
- asked: `--exclude PATTERN` (re.search on the node name, as int8 and int4 take it).
A tensor made inside a Loop body cannot be tapped; a data-movement node's output counts as its input's
magnitude, and a candidate with a tensor of unknown magnitude is listed in `unmeasured`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx_ir as ir

from quantize import options, outliers
from quantize.passes import float16
from quantize.passes.float16 import CONTAINERS, MOVERS, SEQUENCE_OPS
from vlm_vision_onnx.core import taps
from vlm_vision_onnx.core.errors import UsageError

#: float16's largest finite value.
FP16_MAX = 65504.0
#: A tensor whose max |x| at the calibration layouts exceeds FP16_MAX / DEFAULT_HEADROOM stays float32.
DEFAULT_HEADROOM = 8.0
NORMS = frozenset({"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                   "SkipSimplifiedLayerNormalization", "RMSNormalization", "GroupNormalization",
                   "InstanceNormalization", "BatchNormalization"})
SOFTMAX = frozenset({"Softmax", "LogSoftmax"})
STRUCTURAL = {
    "norm": "normalisation: it reads the residual stream (outlier channels; its sums of squares overflow float16)",
    "softmax": "softmax: exp overflows float16",
    "residual": "the residual stream (an Add a LayerNormalization reads): outlier channels stay float32",
}


def label(node: ir.Node) -> str:
    return node.name or f"<unnamed {node.op_type}>"


#: Ops that read only their input's shape or type, not its values: they do not extend the data path.
SHAPE_READERS = frozenset({"Shape", "Size"})


def data_path(model: ir.Model, input_name: str) -> set[ir.Node]:
    """Every node (subgraphs included) that reads the values of graph input `input_name`, directly or through
    others (`Shape(pixel_values)` reads only its shape: the grid math built on it is not in the data path)."""
    start = next((v for v in model.graph.inputs if v.name == input_name), None)
    if start is None:
        raise UsageError(f"the model has no input {input_name!r}; its inputs are "
                         f"{[v.name for v in model.graph.inputs]}")
    values: set[ir.Value] = {start}
    nodes: set[ir.Node] = set()

    def walk(graph: ir.Graph) -> bool:
        found = False
        for node in graph:
            inner = False
            for sub in _subgraphs(node):
                if node.op_type == "Loop":  # carried inputs of the body follow the Loop's
                    values.update(b for b, v in zip(sub.inputs[2:], node.inputs[2:]) if v in values)
                inner |= walk(sub)
            if inner or (node.op_type not in SHAPE_READERS and any(v in values for v in node.inputs)):
                nodes.add(node)
                values.update(node.outputs)
                found = True
        return found

    walk(model.graph)
    return nodes


def _subgraphs(node: ir.Node) -> list[ir.Graph]:
    graphs = []
    for attr in node.attributes.values():
        if attr.type == ir.AttributeType.GRAPH:
            graphs.append(attr.as_graph())
        elif attr.type == ir.AttributeType.GRAPHS:
            graphs.extend(attr.as_graphs())
    return graphs


def candidates(model: ir.Model, data: set[ir.Node]) -> list[ir.Node]:
    """The data path's compute nodes on float tensors, in graph order (subgraphs at their node)."""
    return [n for n in ir.traversal.RecursiveGraphIterator(model.graph)
            if n in data and n.op_type not in MOVERS | SEQUENCE_OPS | CONTAINERS and float16.float_node(n)]


def float_tensors(node: ir.Node) -> list[ir.Value]:
    """The float tensors a node reads (outside its own-type inputs) and writes."""
    return [v for i, v in enumerate(node.inputs) if not float16.own_type(node, i) and float16.is_float(v)] + \
        [v for v in node.outputs if float16.is_float(v)]


def tap_names(model: ir.Model, nodes: list[ir.Node]) -> list[str]:
    """Names of the main-graph tensors of `nodes` worth tapping: computed ones (not constants, not inputs)."""
    main = set(model.graph)
    names = set()
    for node in nodes:
        for value in float_tensors(node):
            producer = value.producer()
            if producer is not None and producer in main and producer.op_type != "Constant":
                names.add(value.name)
    return sorted(names)


def magnitudes(model_file: Path, names: list[str], feeds: list[dict], threads: int) -> dict[str, float]:
    """{tensor name: max |x| over `feeds`} of main-graph tensors `names` (and of the feeds' float inputs),
    from one fp32 run of `model_file` per feed."""
    peaks: dict[str, float] = {}
    for feed in feeds:
        for name, array in feed.items():
            if np.issubdtype(array.dtype, np.floating):
                peaks[name] = max(peaks.get(name, 0.0), float(np.abs(array).max()) if array.size else 0.0)
    found = taps.tap(model_file, names, feeds, threads,
                     reduce=lambda a: np.float64(np.abs(a).max()) if a.size else np.float64(0.0))
    for name, values in found.items():
        peaks[name] = float(max(values)) if values else 0.0
    return peaks


def peak(value: ir.Value, measured: dict[str, float]) -> float | None:
    """max |x| of `value`: measured, a constant's own, a data-movement node's input's; None when unknown."""
    if value.name in measured:
        return measured[value.name]
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is not None:
        array = tensor.numpy()
        return float(np.abs(array).max()) if array.size else 0.0
    producer = value.producer()
    if producer is not None and producer.op_type in MOVERS:
        inputs = [peak(v, measured) for v in float_tensors(producer) if v not in producer.outputs]
        return max(inputs) if inputs and None not in inputs else None
    return None


@dataclass
class Plan:
    """`half`: the nodes that run in float16; `kept`: {node label: {op, reason}} of the candidates kept
    float32; `unmeasured`: candidates with a tensor of unknown magnitude; `not_data_path`: float nodes outside
    the data path (float32 as computed)."""

    half: set[ir.Node]
    kept: dict[str, dict] = field(default_factory=dict)
    unmeasured: list[str] = field(default_factory=list)
    candidates: int = 0
    not_data_path: int = 0


def structural(model: ir.Model, nodes: list[ir.Node]) -> dict[ir.Node, str]:
    """{node: reason} of the candidates kept float32 whatever their magnitudes."""
    _, sums = outliers.residual_contributions(model)
    residual = {v.producer() for v in sums if v.producer() is not None and v.producer().op_type == "Add"}
    reasons = {}
    for node in nodes:
        if node.op_type in NORMS:
            reasons[node] = STRUCTURAL["norm"]
        elif node.op_type in SOFTMAX:
            reasons[node] = STRUCTURAL["softmax"]
        elif node in residual:
            reasons[node] = STRUCTURAL["residual"]
    return reasons


def decide(model: ir.Model, data_input: str, measured: dict[str, dict[str, float]],
           headroom: float = DEFAULT_HEADROOM, exclude: list[str] | None = None) -> Plan:
    """The plan for `model` (its element types known: `passes.elem_types.infer`). `measured`: {source (the
    model, the outlier-stress copy): {tensor name: max |x|}} from `magnitudes`."""
    data = data_path(model, data_input)
    nodes = candidates(model, data)
    asked = set(options.excluded([(label(n), label(n)) for n in nodes], exclude or []))
    fixed = structural(model, nodes)
    limit = FP16_MAX / headroom
    plan = Plan(set(), candidates=len(nodes))
    plan.not_data_path = sum(1 for n in ir.traversal.RecursiveGraphIterator(model.graph)
                             if n not in data and float16.float_node(n) and n.op_type not in CONTAINERS)
    for node in nodes:
        reason = fixed.get(node)
        if reason is None and label(node) in asked:
            reason = "excluded (--exclude)"
        unknown = False
        for source, peaks in measured.items():
            if reason is not None:
                break
            for value in float_tensors(node):
                found = peak(value, peaks)
                if found is None:
                    unknown = True
                elif found > limit:
                    reason = (f"max |{value.name}| = {found:.4g} in the {source} at the calibration layouts, "
                              f"above {FP16_MAX:g} / headroom {headroom:g} = {limit:.4g}")
                    break
        if reason is not None:
            plan.kept[label(node)] = {"op": node.op_type, "reason": reason}
        else:
            plan.half.add(node)
            if unknown:
                plan.unmeasured.append(label(node))
    return plan

