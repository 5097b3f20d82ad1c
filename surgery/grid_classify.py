"""The grid classifier: which entries of a constant are numbers taken from the export grid.

`Classifier` holds the export grid, its quantities and the architecture values (the dims of the
model's weights); it decides, for the values of one constant read flat (a 1-D shape tensor `[k]`),
which entries are grid quantities and what each is at run time (a `Mono` over grid_thw and
Shape(pixel_values)). `classify_shape_input` turns one shape input into a `Finding`;
`surgery.grid_scan` walks the graph and applies it, `expected_dims` tells `debake.verify` which
output dims must follow the grid.

How a constant is classified (the heuristic; the classification must not flag our own exports,
whose shapes hold architecture numbers such as 1024, 1536, 16 heads, 64, -1, 0, 2 and 4):

1. Only the shape inputs of Reshape, Expand, Tile, ConstantOfShape, Split (sizes), Slice
   (starts, ends) and Range (start, limit, delta) are candidates, and only when constant
   (`surgery.grid_scan.SHAPE_INPUTS`).
2. An entry *matches* a grid quantity when its value equals it at the export grid
   (`Grid.quantities`: num_patches, num_tokens, num_images, num_frames, and per image t, h, w,
   h/m, w/m, h·w, h·w/m², t·h·w, t·h·w/m²).
3. A match is *strong* (flagged on its own) when the value is above m² (so 0, -1, 1, 2, 4 never
   are), is not a weight dimension (a dim of a MatMul/Gemm/Conv/Gather/norm weight: hidden sizes,
   kernel sizes), and either it is a global quantity (num_patches, num_tokens, ...) or the export
   grid is uniform (all images equal, so per-image sizes are well defined). With a mixed-size
   export grid (our exports: [[1,16,16],[1,12,20]]) per-image sizes such as 16 or 64 collide with
   head counts and widths, so they are never flagged on value alone. When a global quantity equals
   a weight dim the report says so (`surgery.grid_scan.collisions`): such an export grid hides
   baked constants.
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
   num_tokens, is a constant-folded grid tensor: unfixable here, it has to be re-exported
   (`surgery.grid_scan`).
"""
from __future__ import annotations

import math

import onnx_ir as ir

from surgery.findings import Entry, Finding, node_name
from surgery.grid import Grid, Mono, Quantity

#: Ops whose shape input sets the output's element count (its product), so rule 5 applies.
_PRODUCT_OPS = {"Reshape", "Expand", "Tile", "ConstantOfShape"}


def _absorbed_by_minus_one(values: list[int], in_dims: list[int | None] | None) -> bool:
    """Reshape veto (rule 4): the -1 takes every dynamic input dim, the other entries are static dims.

    `values` is the Reshape's shape input `[k]`; `in_dims` the data input's dims by shape inference
    (int when static, None when not; None when the rank is unknown).
    """
    if in_dims is None or -1 not in values or all(d is not None for d in in_dims):
        return False
    static_in = [d for j, d in enumerate(in_dims) if d is not None and not (j < len(values) and values[j] == 0)]
    fixed_out = [v for v in values if v > 0]
    return math.prod(fixed_out) == math.prod(static_in)


class Classifier:
    """Holds the export grid, its quantities and the architecture values while scanning a graph.

    `arch` is the set of every dim of the model's weights (`surgery.grid_scan.architecture_values`).
    The methods take the values of one constant read flat: `values` is a shape tensor `[k]`.
    """

    def __init__(self, grid: Grid, arch: set[int]):
        self.grid, self.arch = grid, arch
        self.quantities = grid.quantities()
        self.limit = grid.merge * grid.merge
        self.totals = {grid.num_patches: Mono.of("N"), grid.num_tokens: self.quantities[1].mono}

    def strong(self, q: Quantity) -> bool:
        """Rule 3: whether a match on `q` flags an entry on its own."""
        if q.value <= self.limit or q.value in self.arch:
            return False
        return q.scope == "global" or self.grid.uniform

    def strong_matches(self, value: int) -> list[Quantity]:
        """The grid quantities equal to `value` that flag it (rules 2 and 3), in `Grid.quantities` order."""
        return [q for q in self.quantities if q.value == value and self.strong(q)]

    def entries(self, values: list[int]) -> tuple[list[Entry], bool]:
        """Strong entries of a shape constant `[k]`, with h/w order for square grids (rule 7).

        Returns (entries by increasing index, whether an h/w choice was ambiguous).
        """
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
        """Rule 5: give the missing factor of the grid-sized run to its first weak entry.

        `values` is a shape tensor `[k]` (Reshape/Expand/Tile/ConstantOfShape), `entries` its strong
        entries. Returns (entries, a note when the run only multiplies to the total at the export grid).
        """
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
        """Rule 6: Split sizes `[num_outputs]` equal to per-image / per-frame patch or token counts.

        Returns one entry per size (or the total when there is one output), None when no scheme fits.
        """
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
    """Output dims at `other`, given the dims at `grid`: grid-sized dims follow, the rest stay.

    `dims` is one output's shape at `grid` (any rank); the result has the same rank.
    """
    classifier = Classifier(grid, arch)
    out = []
    for d in dims:
        matches = classifier.strong_matches(d)
        out.append(int(other.evaluate(matches[0].mono)) if matches else d)
    return out


def target_name(mono: Mono) -> str:
    """'num_patches' for N, else 'num_tokens' (the two totals a grid-sized run multiplies to)."""
    return "num_patches" if mono == Mono.of("N") else "num_tokens"


def classify_shape_input(node: ir.Node, idx: int, values: list[int], classifier: Classifier,
                         shapes: dict[str, list[int | None] | None]) -> Finding | None:
    """The finding for constant shape input `idx` of `node` (rules 2-7), or None when nothing is baked.

    `values` is that input read flat (`[k]`); `shapes` maps value names to dims by shape inference
    (`surgery.grid_scan.inferred_shapes`), read for the Reshape veto.
    """
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
