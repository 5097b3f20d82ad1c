"""Batch constants: a batch baked into a shape input, rewritten to follow the input's batch at run time.

A trace at batch b writes b into shape inputs: SCRFD's top-down `Resize` takes constant sizes
`[1, 16, 40, 40]`, so at batch 8 it resizes the batch axis down to sample 0 and the following `Add`
broadcasts that sample into every other one. `debatch` finds such entries by running the model
(without shape claims) at batch b and 2b and reading the real shapes:

- a tensor *carries the batch* on axis a when its dim there is b·m at batch b and 2b·m at 2b;
- rule 1 (the node keeps the batch of its data input X): an entry of `Resize` sizes, `Expand`
  shape or `Slice` ends that equals X's dim on an axis where X carries the batch, while the output
  does not carry it there, is baked: it becomes `N·m` (N = axis 0 of the batch input, read at run
  time); a `Reshape` shape whose entry 0 equals X's batch-carrying dim 0 becomes `0` ("copy dim 0");
- rule 2 (a tensor made from constants meets a batch-carrying one): `ConstantOfShape` shape,
  `Expand` shape or `Tile` repeats whose output has dim 0 = b·m without carrying the batch, used by a
  `Concat` on another axis (or broadcast against a batch-carrying tensor when b·m > 1), gets `N·m`
  on axis 0.

A rewrite can uncover the next bake, so the runs repeat until nothing new is found. When the run
at 2b fails (a Concat or broadcast that the bake breaks), the tensors above the failing node are
run alone and that node is examined too. Replacements are emitted like `debake`'s (`surgery.grid.Emitter`,
`surgery.debake.computed_shape`): `N` is `Gather(Shape(input), [0])`.
"""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from surgery.debake import computed_shape
from surgery.findings import Entry, Finding, const_ints, node_name
from surgery.grid import Emitter, Mono
from surgery.probe import neutral
from surgery.run import random_array, try_run
from vlm_vision_onnx.core.errors import CheckFailed

#: Op -> index of the shape input rule 1 examines (the data input is input 0).
KEEPS_BATCH = {"Resize": 3, "Reshape": 1, "Expand": 1, "Slice": 2}
#: Op -> index of the shape input rule 2 examines (ops that make a tensor from a constant shape).
MAKES_TENSOR = {"ConstantOfShape": 0, "Expand": 1, "Tile": 1}
#: Ops that broadcast their inputs against each other.
BROADCASTING = {"Add", "Sub", "Mul", "Div", "Pow", "Where", "Max", "Min", "Mean", "Sum", "Equal", "Less", "Greater",
                "And", "Or", "Xor", "PRelu", "BitShift", "Mod", "LessOrEqual", "GreaterOrEqual"}
MAX_ROUNDS = 8

Shapes = dict[str, tuple[int, ...]]


def batch_twice(feeds: dict[str, np.ndarray], seed: int = 7) -> dict[str, np.ndarray]:
    """Feeds at batch 2b: `feeds` (batch b on axis 0) followed by b more random samples."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, value in feeds.items():
        extra = random_array(_onnx_type(value.dtype), value.shape, rng)
        out[name] = np.concatenate([value, extra], axis=0)
    return out


def _onnx_type(dtype: np.dtype) -> int:
    return int(ir.DataType.from_numpy(dtype).value)


def carried(shape_b: tuple[int, ...] | None, shape_2b: tuple[int, ...] | None, b: int) -> dict[int, int]:
    """Axes on which a tensor carries the batch: {axis: m} where the dim is b·m at b and 2b·m at 2b."""
    if shape_b is None or shape_2b is None or len(shape_b) != len(shape_2b):
        return {}
    return {a: d // b for a, (d, e) in enumerate(zip(shape_b, shape_2b)) if d > 0 and d % b == 0 and e == 2 * d}


def _shapes(model: ir.Model, feeds: dict[str, np.ndarray], names: list[str]) -> tuple[Shapes | None, str | None]:
    """Real shapes of `names` (intermediates) and of the inputs, from a run of a claim-free copy whose
    only outputs are `names` (nodes nothing asks for are not run)."""
    copy = neutral(model, names)
    wanted = set(names)
    keep = [v for v in copy.graph.outputs if v.name in wanted]
    copy.graph.outputs.clear()
    copy.graph.outputs.extend(keep)
    RemoveUnusedNodesPass()(copy)
    if not keep:
        return {k: tuple(v.shape) for k, v in feeds.items()}, None
    outputs, error = try_run(copy, feeds)
    if outputs is None:
        return None, error
    shapes = {k: tuple(v.shape) for k, v in outputs.items()}
    shapes.update({k: tuple(v.shape) for k, v in feeds.items()})
    return shapes, None


def _failing_node(graph: ir.Graph, error: str) -> ir.Node | None:
    """The node an ORT error line (`surgery.run.one_line`) names, if it names one of `graph`'s nodes."""
    match = re.match(r"^(\S+) node '([^']*)'", error or "")
    if not match:
        return None
    return next((n for n in graph if n.name == match.group(2) and n.op_type == match.group(1)), None)


def _upstream(node: ir.Node) -> set[str]:
    """Names of every value `node` depends on (its inputs and their ancestors)."""
    seen: set[str] = set()
    stack = [v for v in node.inputs if v is not None]
    while stack:
        value = stack.pop()
        if value.name in seen:
            continue
        seen.add(value.name)
        producer = value.producer()
        if producer is not None:
            stack.extend(v for v in producer.inputs if v is not None)
    return seen


def _watched(graph: ir.Graph) -> list[str]:
    """The tensors whose shapes the rules read."""
    names: list[str] = []
    for node in graph:
        if node.op_type in KEEPS_BATCH and _const(node, KEEPS_BATCH[node.op_type]) is not None:
            names += [node.inputs[0].name, node.outputs[0].name]
        if node.op_type in MAKES_TENSOR and _const(node, MAKES_TENSOR[node.op_type]) is not None:
            names += [v.name for v in (*node.inputs[:1], node.outputs[0]) if v is not None]
            for user in node.outputs[0].consumers():
                names += [v.name for v in user.inputs if v is not None]
    inputs = {v.name for v in graph.inputs}
    return [n for n in dict.fromkeys(names) if n not in inputs]


def _const(node: ir.Node, index: int) -> list[int] | None:
    if index >= len(node.inputs) or node.inputs[index] is None:
        return None
    tensor = ir.convenience.get_const_tensor(node.inputs[index])
    return None if tensor is None else const_ints(tensor)


def _entry(index: int, value: int, m: Fraction | int, where: str) -> Entry:
    """Entry `index` becomes N·m; m = 0 means Reshape's 0 ("copy the input's dim"), which is the batch."""
    if not m:
        return Entry(index, value, "the batch" + where + ", copied", "0", Mono.const(0))
    mono = Mono.of("N", Fraction(m))
    return Entry(index, value, ("the batch" if m == 1 else f"{m}·batch") + where, str(mono), mono)


def _finding(node: ir.Node, index: int, values: list[int], entries: list[Entry], rule: str) -> Finding:
    described = ", ".join(f"[{e.index}] {e.value} = {e.quantity}" for e in entries)
    name = node.inputs[index].name
    return Finding("shape", node_name(node), node.op_type, index, name, values, entries, True,
                   f"{node.op_type} '{node_name(node)}' input {index} '{name}' = {values}: {described}", [rule])


def _keeps_batch(node: ir.Node, shapes_b: Shapes, shapes_2b: Shapes, b: int) -> Finding | None:
    """Rule 1: an entry that copies the batch-carrying dim of the data input as a constant."""
    index = KEEPS_BATCH[node.op_type]
    values = _const(node, index)
    x, y = node.inputs[0], node.outputs[0]
    if values is None or x is None or x.name not in shapes_b:
        return None
    dims = shapes_b[x.name]
    axes = carried(dims, shapes_2b.get(x.name), b)
    out_axes = carried(shapes_b.get(y.name), shapes_2b.get(y.name), b)
    where = f" (axis {{}} of '{x.name}')"
    entries: list[Entry] = []
    if node.op_type == "Reshape":
        if 0 in axes and values and values[0] == dims[0] and values[0] != 0:
            zero_ok = node.attributes.get_int("allowzero", 0) == 0
            entries.append(_entry(0, values[0], 0 if zero_ok else axes[0], where.format(0)))
    elif node.op_type in ("Resize", "Expand"):
        offset = len(values) - len(dims)
        for a, m in axes.items():
            o = a + offset  # Expand aligns its shape to the right; Resize sizes has one entry per axis
            harmless = node.op_type == "Expand" and dims[a] == 1  # a 1 in Expand's shape keeps X's dim
            if 0 <= o < len(values) and values[o] == dims[a] and o not in out_axes and not harmless:
                entries.append(_entry(o, values[o], m, where.format(a)))
    else:  # Slice ends
        starts = _const(node, 1)
        axes_in = _const(node, 3) if len(node.inputs) > 3 and node.inputs[3] is not None else list(range(len(values)))
        steps = _const(node, 4) if len(node.inputs) > 4 and node.inputs[4] is not None else [1] * len(values)
        if starts is None or axes_in is None or steps is None:
            return None
        for j, end in enumerate(values):
            a = axes_in[j] % len(dims)
            if a in axes and a not in out_axes and starts[j] == 0 and steps[j] == 1 and end == dims[a]:
                entries.append(_entry(j, end, axes[a], where.format(a)))
    if not entries:
        return None
    return _finding(node, index, values, entries, f"{node.op_type} keeps the batch of '{x.name}'")


def _meets_batch(node: ir.Node, shapes_b: Shapes, shapes_2b: Shapes, b: int) -> Finding | None:
    """Rule 2: a tensor made from a constant shape, sized to the batch, used with a batch-carrying one."""
    index = MAKES_TENSOR[node.op_type]
    values = _const(node, index)
    y = node.outputs[0]
    dims = shapes_b.get(y.name)
    if values is None or not dims or 0 in carried(dims, shapes_2b.get(y.name), b):
        return None
    for user in y.consumers():
        others = [v for v in user.inputs if v is not None and v is not y and v.name in shapes_b]
        for z in others:
            z_dims = shapes_b[z.name]
            m = carried(z_dims, shapes_2b.get(z.name), b).get(0)
            if m is None or len(z_dims) != len(dims) or z_dims[0] != dims[0]:
                continue
            concat_axis = user.attributes.get_int("axis", 0) % len(dims) if user.op_type == "Concat" else None
            if not (concat_axis not in (None, 0) or (user.op_type in BROADCASTING and dims[0] != 1)):
                continue
            where = f" (axis 0 of '{z.name}', used with it by {user.op_type} '{node_name(user)}')"
            if node.op_type == "Tile":
                x = node.inputs[0]
                const = ir.convenience.get_const_tensor(x)  # a weight is not among the run's outputs
                x_dims = shapes_b.get(x.name) or (tuple(const.shape.numpy()) if const is not None else ())
                x0 = x_dims[0] if x_dims else 1
                if values[0] * x0 != dims[0]:
                    return None
                entry = _entry(0, values[0], Fraction(m, x0), where)
            else:
                offset = len(values) - len(dims)
                if offset != 0 or values[0] != dims[0]:
                    return None
                entry = _entry(0, values[0], m, where)
            return _finding(node, index, values, [entry], f"{node.op_type} makes a tensor that must carry the batch")
    return None


def _rules(graph: ir.Graph, shapes_b: Shapes, shapes_2b: Shapes, b: int, done: set[tuple[str, int]]) -> list:
    found = []
    for node in graph:
        for table, rule in ((KEEPS_BATCH, _keeps_batch), (MAKES_TENSOR, _meets_batch)):
            if node.op_type in table and (node_name(node), table[node.op_type]) not in done:
                finding = rule(node, shapes_b, shapes_2b, b)
                if finding is not None:
                    found.append((node, finding))
                    break
    return found


def _replace(emitter: Emitter, node: ir.Node, finding: Finding) -> None:
    original = ir.convenience.get_const_tensor(node.inputs[finding.input])
    if all(e.mono.is_const for e in finding.entries):
        by_index = {e.index: int(e.mono.coef) for e in finding.entries}
        array = np.array([by_index.get(j, v) for j, v in enumerate(finding.values)], original.dtype.numpy())
        value = emitter.const(array.reshape(original.shape.numpy()), dtype=array.dtype)
    else:
        value = computed_shape(emitter, finding, original)
    node.replace_input_with(finding.input, value)


def debatch(model: ir.Model, feeds: dict[str, np.ndarray], batch_input: str) -> tuple[list[Finding], str | None]:
    """Rewrite, in place, every batch constant of `model` found by running it at `feeds` (batch b) and 2b.

    Args:
        model: modified in place: axis 0 of every input becomes the symbol `batch`, other claims stay
            (the caller re-declares shapes afterwards).
        feeds: inputs at the old batch b (axis 0 of every input).
        batch_input: the input whose axis 0 is read as N.

    Returns:
        (findings rewritten, error of the last run at 2b or None when it ran).

    Raises:
        CheckFailed: the model does not run at batch b even without shape claims.
    """
    b = next(iter(feeds.values())).shape[0]
    feeds_2b = batch_twice(feeds)
    graph = model.graph
    for value in graph.inputs:
        value.shape = ir.Shape(["batch", *list(value.shape)[1:]])
    emitter = Emitter(graph, batch_input, "", model.opset_imports.get("", 1))
    findings: list[Finding] = []
    done: set[tuple[str, int]] = set()
    error = None
    for _ in range(MAX_ROUNDS):
        names = _watched(graph)
        shapes_b, failure = _shapes(model, feeds, names)
        if shapes_b is None:
            raise CheckFailed(f"the model fails at its batch {b} even without shape claims: {failure}")
        shapes_2b, error = _shapes(model, feeds_2b, names)
        if shapes_2b is None:
            failing = _failing_node(graph, error)
            if failing is None:
                break
            upstream = _upstream(failing)
            shapes_2b, _ = _shapes(model, feeds_2b, [n for n in names if n in upstream])
            if shapes_2b is None:
                break
        found = _rules(graph, shapes_b, shapes_2b, b, done)
        if not found:
            break
        for node, finding in found:
            _replace(emitter, node, finding)
            done.add((finding.node, finding.input))
            findings.append(finding)
        new_nodes = [n for n in emitter.nodes if n.graph is None]
        if new_nodes:  # they may use nodes emitted in an earlier round: insert, then restore topological order
            graph.insert_before(graph.node(0), new_nodes)
            graph.sort()
        error = None
    RemoveUnusedNodesPass()(model)
    return findings, error
