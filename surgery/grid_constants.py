"""Find grid constants: numbers a traced export took from its example grid (for debake, audit, doctor).

A traced export writes numbers from its example as constants: a Reshape to [1, 11, 2, 15, 2, -1]
for one 22×30-patch image, a Split into [256, 240] patches, a Range to 165 tokens. `find` lists
them, each entry with what it is at run time (a `Mono` over grid_thw and Shape(pixel_values));
`surgery.debake` rewrites the fixable ones. Constants no rewrite can fix (a constant-folded table
with a grid-sized dim, sizes in attributes of old opsets, subgraphs) are unfixable findings.

How a constant is classified (the heuristic; the classification must not flag our own exports,
whose shapes hold architecture numbers such as 1024, 1536, 16 heads, 64, -1, 0, 2 and 4):

1. Only the shape inputs of Reshape, Expand, Tile, ConstantOfShape, Split (sizes), Slice
   (starts, ends) and Range (start, limit, delta) are candidates, and only when constant.
2. An entry *matches* a grid quantity when its value equals it at the export grid
   (`Grid.quantities`: num_patches, num_tokens, num_images, num_frames, and per image t, h, w,
   h/m, w/m, h·w, h·w/m², t·h·w, t·h·w/m²).
3. A match is *strong* (flagged on its own) when the value is above m² (so 0, -1, 1, 2, 4 never
   are), is not a weight dimension (a dim of a MatMul/Gemm/Conv/Gather/norm weight: hidden sizes,
   kernel sizes), and either it is a global quantity (num_patches, num_tokens, ...) or the export
   grid is uniform (all images equal, so per-image sizes are well defined). With a mixed-size
   export grid (our exports: [[1,16,16],[1,12,20]]) per-image sizes such as 16 or 64 collide with
   head counts and widths, so they are never flagged on value alone. When a global quantity equals
   a weight dim the report says so (`collisions`): such an export grid hides baked constants.
4. Veto: a Reshape whose -1 provably absorbs every dynamic dim (the product of its positive
   entries equals the product of the input's static dims, by ONNX shape inference) is not baked,
   whatever its numbers: `[-1, 16, 64]` on an `[N, 1024]` input.
5. Weak entries join a flagged tensor by position: in the contiguous run of entries around the
   strong ones whose product is num_patches or num_tokens, the first weak entry whose value equals
   the missing factor becomes that factor (the leading 1 of [1, 11, 2, 15, 2, -1] becomes
   N/(h·w), the number of images·frames); other weak entries (the merge size 2) stay constants.
6. Split sizes that are exactly the per-image (or per-frame) patch or token counts of the export
   grid become those counts read from grid_thw rows (the number of outputs stays fixed: the model
   still takes that many images).
7. When a value matches both an h-quantity and a w-quantity (square export grid), the first such
   entry in a tensor is taken as h and the second as w (row-major layouts), and the finding says
   it is ambiguous.
8. Any other constant (not a weight) with a dim equal to num_patches or num_tokens (or, for a
   uniform grid, a strong per-image size), or a small int constant holding num_patches or
   num_tokens, is a constant-folded grid tensor: unfixable here, it has to be re-exported.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass

from surgery.grid import Grid, Mono, Quantity

SHAPE_INPUTS = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,),
    "Split": (1,), "Slice": (1, 2), "Range": (0, 1, 2),
}
#: Inputs that hold learned weights, by op type: their dims are architecture numbers.
WEIGHT_INPUTS = {
    "MatMul": (0, 1), "Gemm": (0, 1, 2), "Conv": (1, 2), "ConvTranspose": (1, 2), "Gather": (0,),
    "LayerNormalization": (1, 2), "BatchNormalization": (1, 2, 3, 4), "InstanceNormalization": (1, 2),
    "GroupNormalization": (1, 2), "RMSNormalization": (1,), "Einsum": (0, 1, 2),
}
_PRODUCT_OPS = {"Reshape", "Expand", "Tile", "ConstantOfShape"}


@dataclass
class Entry:
    """One flagged entry of a shape constant: position, value, and what it becomes."""

    index: int
    value: int
    quantity: str
    expr: str
    mono: Mono | None = field(default=None, repr=False)


@dataclass
class Finding:
    """A grid-baked constant (or a constant-folded grid tensor when `kind` is 'folded')."""

    kind: str  # "shape" (a shape input of `op`), "attribute", "subgraph" or "folded" (a constant tensor)
    node: str
    op: str
    input: int
    tensor: str
    values: list[int]
    entries: list[Entry]
    fixable: bool
    message: str
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        data = asdict(self)
        for entry in data["entries"]:
            entry.pop("mono", None)
        if self.fixable:
            data["replacement"] = self.replacement()
        return data

    def replacement(self) -> str:
        """The new shape tensor, entries written as run-time expressions: '[N/(h_0·w_0), h_0/2, 2, ...]'."""
        by_index = {e.index: e.expr for e in self.entries}
        return "[" + ", ".join(by_index.get(j, str(v)) for j, v in enumerate(self.values)) + "]"


def architecture_values(graph: ir.Graph) -> set[int]:
    """Every dim of every constant weight (see WEIGHT_INPUTS): numbers the architecture fixes."""
    values = set()
    for node in graph:
        for idx in WEIGHT_INPUTS.get(node.op_type, ()):
            if idx < len(node.inputs) and node.inputs[idx] is not None:
                tensor = ir.convenience.get_const_tensor(node.inputs[idx])
                if tensor is not None:
                    values.update(int(d) for d in tensor.shape.numpy())
    return values


def inferred_shapes(model: ir.Model) -> dict[str, list[int | None] | None]:
    """ONNX shape inference on a copy: value name -> dims (int when static, None when not)."""
    copy = model.clone()
    ShapeInferencePass(strict_mode=False)(copy)
    shapes = {}
    for value in ir.convenience.create_value_mapping(copy.graph).values():
        if value.shape is None:
            shapes[value.name] = None
        else:
            shapes[value.name] = [d if isinstance(d, int) else None for d in value.shape]
    return shapes


def const_ints(tensor) -> list[int] | None:
    array = tensor.numpy()
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
            return None
    elif array.dtype.kind not in "iu":
        return None
    return [int(v) for v in array.reshape(-1)]


def _absorbed_by_minus_one(values: list[int], in_dims: list[int | None] | None) -> bool:
    """Reshape veto: the -1 takes every dynamic input dim, the other entries are static dims."""
    if in_dims is None or -1 not in values or all(d is not None for d in in_dims):
        return False
    static_in = [d for j, d in enumerate(in_dims) if d is not None and not (j < len(values) and values[j] == 0)]
    fixed_out = [v for v in values if v > 0]
    return math.prod(fixed_out) == math.prod(static_in)


class _Classifier:
    """Holds the export grid, its quantities and the architecture values while scanning a graph."""

    def __init__(self, grid: Grid, arch: set[int]):
        self.grid, self.arch = grid, arch
        self.quantities = grid.quantities()
        self.limit = grid.merge * grid.merge
        self.totals = {grid.num_patches: Mono.of("N"), grid.num_tokens: self.quantities[1].mono}

    def strong(self, q: Quantity) -> bool:
        if q.value <= self.limit or q.value in self.arch:
            return False
        return q.scope == "global" or self.grid.uniform

    def strong_matches(self, value: int) -> list[Quantity]:
        return [q for q in self.quantities if q.value == value and self.strong(q)]

    def entries(self, values: list[int]) -> tuple[list[Entry], bool]:
        """Strong entries of a shape constant, with h/w order for square grids (rule 7)."""
        entries, used_axes, ambiguous = [], set(), False
        for j, v in enumerate(values):
            matches = self.strong_matches(v) if v > 0 else []
            if not matches:
                continue
            choice = matches[0]
            twins = [q for q in matches if q.axis and q.axis != choice.axis and q.mono != choice.mono]
            if choice.axis and twins:
                ambiguous = True
                if choice.axis in used_axes:
                    choice = twins[0]
            used_axes.add(choice.axis)
            entries.append(Entry(j, v, choice.name, str(choice.mono), choice.mono))
        return entries, ambiguous

    def complete_run(self, values: list[int], entries: list[Entry]) -> tuple[list[Entry], str | None]:
        """Rule 5: give the missing factor of the grid-sized run to its first weak entry."""
        strong_at = {e.index: e for e in entries}
        best = None
        for a in range(len(values)):
            for b in range(a, len(values)):
                window = values[a : b + 1]
                if any(v <= 0 for v in window):
                    break
                inside = [j for j in strong_at if a <= j <= b]
                if inside and math.prod(window) in self.totals:
                    key = (len(inside), b - a)
                    if best is None or key > best[0]:
                        best = (key, a, b)
        if best is None:
            return entries, None
        _, a, b = best
        target = self.totals[math.prod(values[a : b + 1])]
        window = Mono.const(1)
        for k in range(a, b + 1):
            window = window * (strong_at[k].mono if k in strong_at else Mono.const(values[k]))
        if window == target:
            return entries, None
        for j in range(a, b + 1):
            if j in strong_at:
                continue
            others = Mono.const(1)
            for k in range(a, b + 1):
                if k != j:
                    others = others * (strong_at[k].mono if k in strong_at else Mono.const(values[k]))
            missing = target / others
            if missing.is_const:
                return entries, None
            if self.grid.evaluate(missing) == values[j]:
                name = f"{target_name(target)} ÷ the other entries {a}..{b}"
                new = Entry(j, values[j], name, str(missing), missing)
                return sorted(entries + [new], key=lambda e: e.index), None
        return entries, (
            f"entries {a}..{b} multiply to {target_name(target)} only at the export grid's image count; "
            "kept as is"
        )

    def split_entries(self, values: list[int]) -> list[Entry] | None:
        """Rule 6: Split sizes equal to per-image / per-frame patch or token counts."""
        mm = Mono.const(self.limit)
        schemes = {}
        for unit, scale in (("patches", Mono.const(1)), ("tokens", Mono.const(1) / mm)):
            per_image, per_frame = [], []
            for i, (t, _, _) in enumerate(self.grid.rows):
                thw = Mono.of(f"t_{i}") * Mono.of(f"h_{i}") * Mono.of(f"w_{i}") * scale
                hw = Mono.of(f"h_{i}") * Mono.of(f"w_{i}") * scale
                per_image.append((f"{unit} of image {i}", thw))
                per_frame += [(f"{unit} per frame of image {i}", hw)] * t
            schemes[f"image {unit}"] = per_image
            schemes[f"frame {unit}"] = per_frame
        for scheme in schemes.values():
            if len(scheme) == len(values) and [self.grid.evaluate(m) for _, m in scheme] == values:
                if len(values) == 1:
                    total = self.totals[values[0]]
                    return [Entry(0, values[0], target_name(total), str(total), total)]
                return [Entry(j, v, name, str(m), m) for j, ((name, m), v) in enumerate(zip(scheme, values))]
        return None


def expected_dims(dims: list[int], grid: Grid, other: Grid, arch: set[int]) -> list[int]:
    """Output dims at `other`, given the dims at `grid`: grid-sized dims follow, the rest stay."""
    classifier = _Classifier(grid, arch)
    out = []
    for d in dims:
        matches = classifier.strong_matches(d)
        out.append(int(other.evaluate(matches[0].mono)) if matches else d)
    return out


def target_name(mono: Mono) -> str:
    return "num_patches" if mono == Mono.of("N") else "num_tokens"


def find(model: ir.Model, grid: Grid) -> list[Finding]:
    """Every grid-baked constant of the main graph (see the module docstring for the rules)."""
    graph = model.graph
    opset = model.opset_imports.get("", 1)
    classifier = _Classifier(grid, architecture_values(graph))
    shapes = inferred_shapes(model)
    findings: list[Finding] = []
    shape_role: set[str] = set()
    for node in graph:
        for idx in SHAPE_INPUTS.get(node.op_type, ()):
            if idx >= len(node.inputs) or node.inputs[idx] is None:
                continue
            tensor = ir.convenience.get_const_tensor(node.inputs[idx])
            if tensor is None:
                continue
            shape_role.add(node.inputs[idx].name)
            values = const_ints(tensor)
            if values is not None:
                finding = _classify(node, idx, values, classifier, shapes)
                if finding:
                    findings.append(finding)
        findings += _attribute_sizes(node, opset, classifier)
        if any(attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for attr in node.attributes.values()):
            findings += _subgraph_findings(node, classifier)
    findings += _folded(graph, classifier, shape_role)
    return findings


def collisions(model: ir.Model, grid: Grid) -> list[str]:
    """Global grid quantities equal to a weight dim: constants of that value cannot be classified."""
    arch = architecture_values(model.graph)
    return [f"{q.name} = {q.value} is also a weight dim; constants of that value are not checked (export at "
            "a grid whose sizes differ from weight dims)"
            for q in grid.quantities() if q.scope == "global" and q.value > grid.merge ** 2 and q.value in arch]


def node_name(node: ir.Node) -> str:
    """A node's name, or op->first output when it has none."""
    return node.name or f"{node.op_type}->{node.outputs[0].name}"


def _classify(node, idx, values, classifier: _Classifier, shapes) -> Finding | None:
    op, name = node.op_type, node.inputs[idx].name
    notes: list[str] = []
    entries = classifier.split_entries(values) if op == "Split" else None
    if entries is not None and len(entries) > 1:
        notes.append(f"Split keeps {len(entries)} outputs: the model still takes exactly that many images/frames")
    if entries is None:
        entries, ambiguous = classifier.entries(values)
        if not entries:
            return None
        if op == "Reshape" and _absorbed_by_minus_one(values, shapes.get(node.inputs[0].name)):
            return None
        if ambiguous:
            notes.append("square export grid: h and w have the same value; taken in row-major order (h first)")
        if op in _PRODUCT_OPS:
            entries, note = classifier.complete_run(values, entries)
            if note:
                notes.append(note)
    described = ", ".join(f"[{e.index}] {e.value} = {e.quantity}" for e in entries)
    return Finding("shape", node_name(node), op, idx, name, values, entries, True,
                   f"{op} '{node_name(node)}' input {idx} '{name}' = {values}: {described}", notes)


def _attribute_sizes(node: ir.Node, opset: int, classifier: _Classifier) -> list[Finding]:
    """Sizes held in attributes (Split/Slice of old opsets) cannot be computed: unfixable."""
    out = []
    for attr_name in ("split", "starts", "ends", "shape"):
        attr = node.attributes.get(attr_name)
        if attr is None or attr.type != ir.AttributeType.INTS:
            continue
        values = list(attr.as_ints())
        entries, _ = classifier.entries(values)
        if entries:
            described = ", ".join(f"[{e.index}] {e.value} = {e.quantity}" for e in entries)
            out.append(Finding("attribute", node_name(node), node.op_type, -1, attr_name, values, entries, False,
                               f"{node.op_type} '{node_name(node)}' attribute {attr_name}={values}: {described}; "
                               f"an attribute cannot be computed at run time (opset {opset}); re-export at opset >= 13"))
    return out


def _subgraph_findings(node: ir.Node, classifier: _Classifier) -> list[Finding]:
    """Grid numbers inside If/Loop/Scan bodies are reported, not rewritten."""
    out = []
    for attr in node.attributes.values():
        graphs = [attr.as_graph()] if attr.type == ir.AttributeType.GRAPH else (
            list(attr.as_graphs()) if attr.type == ir.AttributeType.GRAPHS else [])
        for sub in graphs:
            for inner in sub:
                for idx in SHAPE_INPUTS.get(inner.op_type, ()):
                    if idx < len(inner.inputs) and inner.inputs[idx] is not None:
                        tensor = ir.convenience.get_const_tensor(inner.inputs[idx])
                        values = const_ints(tensor) if tensor is not None else None
                        entries = classifier.entries(values)[0] if values else []
                        if entries:
                            out.append(Finding(
                                "subgraph", node_name(inner), inner.op_type, idx, inner.inputs[idx].name, values,
                                entries, False,
                                f"{inner.op_type} '{node_name(inner)}' inside {node.op_type} '{node_name(node)}' "
                                f"= {values} holds grid sizes; subgraphs are not rewritten"))
    return out


def _folded(graph: ir.Graph, classifier: _Classifier, shape_role: set[str]) -> list[Finding]:
    """Rule 8: constants (not weights, not shape inputs) whose dims or small contents are grid sizes."""
    weights = set()
    for node in graph:
        for idx in WEIGHT_INPUTS.get(node.op_type, ()):
            if idx < len(node.inputs) and node.inputs[idx] is not None:
                weights.add(node.inputs[idx].name)
    constants = [v for v in graph.initializers.values()]
    constants += [n.outputs[0] for n in graph if n.op_type == "Constant" and n.domain == ""]
    totals = {v: k for k, v in (("num_patches", classifier.grid.num_patches),
                                ("num_tokens", classifier.grid.num_tokens)) if v not in classifier.arch}
    out = []
    for value in constants:
        if value.name in weights or (value.name in shape_role and
                                     all(_is_shape_use(node, idx) for node, idx in value.uses())):
            continue
        tensor = ir.convenience.get_const_tensor(value)
        if tensor is None:
            continue
        dims = [int(d) for d in tensor.shape.numpy()]
        reasons = []
        for axis, d in enumerate(dims):
            if d in totals and d > classifier.limit:
                reasons.append(f"dim {axis} = {d} = {totals[d]}")
            elif classifier.grid.uniform and (matches := classifier.strong_matches(d)):
                reasons.append(f"dim {axis} = {d} = {matches[0].name}")
        if tensor.dtype.is_integer() and tensor.size <= 64 and not reasons:
            held = sorted({v for v in (const_ints(tensor) or []) if v in totals and v > classifier.limit})
            reasons += [f"holds {v} = {totals[v]}" for v in held]
        if reasons:
            out.append(Finding(
                "folded", value.name, "constant", -1, value.name, dims, [], False,
                f"constant '{value.name}' {dims}: {', '.join(reasons)}; it was constant-folded at the export "
                "grid and cannot be rewritten here: re-export with this tensor computed from grid_thw"))
    return out


def _is_shape_use(node: ir.Node, idx: int) -> bool:
    return idx in SHAPE_INPUTS.get(node.op_type, ())
