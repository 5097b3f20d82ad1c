"""The export grid and the quantities derived from it, as monomials that can be emitted as ONNX.

A traced export bakes numbers taken from its example input. For a Qwen3-VL vision encoder the
example is a grid: one (t, h, w) row per image, in patches, with a spatial merge size m (2). The
numbers it can bake are the *grid quantities* below; each is a monomial over run-time symbols

    N    = num_patches  = Σ t·h·w          Shape(pixel_values)[0]
    n    = num_images                      Shape(grid_thw)[0]
    F    = num_frames   = Σ t              ReduceSum(grid_thw[:, 0])
    t_i, h_i, w_i       (row i of grid_thw) Gather(Reshape(grid_thw, [-1]), [3·i + column])

with a rational coefficient (h/m is `h_0 · 1/2`). `Mono` multiplies and divides them exactly, so a
baked `[1, 11, 2, 15, 2, -1]` can be rewritten as `[N/(h·w), h/2, 2, w/2, 2, -1]`, and `emit`
turns a monomial into a Gather/Mul/Div subgraph that yields a 1-D int64 tensor of shape [1].
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import onnx_ir as ir

from vlm_vision_onnx.core.errors import UsageError

GLOBAL_SYMBOLS = ("N", "n", "F")


def _order(item: tuple[str, int]) -> tuple:
    """Symbols in reading order: N, n, F, then t_i, h_i, w_i by image."""
    sym = item[0]
    if sym in GLOBAL_SYMBOLS:
        return (0, GLOBAL_SYMBOLS.index(sym), 0)
    return (1, int(sym.split("_")[1]), "thw".index(sym[0]))


@dataclass(frozen=True)
class Mono:
    """coef · Π symbol^power; `powers` is a sorted tuple of (symbol, nonzero int power)."""

    coef: Fraction
    powers: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def of(symbol: str, coef: Fraction | int = 1) -> Mono:
        return Mono(Fraction(coef), ((symbol, 1),))

    @staticmethod
    def const(value: Fraction | int) -> Mono:
        return Mono(Fraction(value))

    def __mul__(self, other: Mono) -> Mono:
        powers = dict(self.powers)
        for sym, p in other.powers:
            powers[sym] = powers.get(sym, 0) + p
        return Mono(self.coef * other.coef, tuple(sorted(((s, p) for s, p in powers.items() if p), key=_order)))

    def __truediv__(self, other: Mono) -> Mono:
        return self * Mono(1 / other.coef, tuple((s, -p) for s, p in other.powers))

    @property
    def is_const(self) -> bool:
        return not self.powers

    def evaluate(self, values: dict[str, int]) -> Fraction:
        result = self.coef
        for sym, p in self.powers:
            result *= Fraction(values[sym]) ** p
        return result

    def __str__(self) -> str:
        num = [s if p == 1 else f"{s}^{p}" for s, p in self.powers if p > 0]
        den = [s if p == -1 else f"{s}^{-p}" for s, p in self.powers if p < 0]
        if self.coef.numerator != 1 or not num:
            num.insert(0, str(self.coef.numerator))
        den += [str(self.coef.denominator)] if self.coef.denominator != 1 else []
        text = "·".join(num)
        if not den:
            return text
        return f"{text}/{den[0]}" if len(den) == 1 else f"{text}/({'·'.join(den)})"


@dataclass(frozen=True)
class Quantity:
    """A named grid quantity: e.g. name 'h[0]/2', mono h_0/2, value 11 at the export grid."""

    name: str
    mono: Mono
    value: int
    scope: str  # "global" (depends only on totals) or "image" (depends on one row of the grid)
    axis: str = ""  # "h" or "w" for quantities that are about one spatial axis, for h/w disambiguation


@dataclass(frozen=True)
class Grid:
    """The export example's grid: rows (t, h, w) in patches, and the spatial merge size."""

    rows: tuple[tuple[int, int, int], ...]
    merge: int = 2
    symbols: dict[str, int] = field(init=False, compare=False, repr=False)

    def __post_init__(self):
        if not self.rows:
            raise UsageError("the export grid is empty; give at least one --grid T,H,W")
        if self.merge < 1:
            raise UsageError(f"the spatial merge size must be a positive integer, got {self.merge} (--merge)")
        for t, h, w in self.rows:
            if min(t, h, w) <= 0 or h % self.merge or w % self.merge:
                raise UsageError(
                    f"grid row {t},{h},{w}: t, h, w must be positive and h, w multiples of the merge size "
                    f"{self.merge}"
                )
        symbols = {"N": self.num_patches, "n": len(self.rows), "F": sum(r[0] for r in self.rows)}
        for i, (t, h, w) in enumerate(self.rows):
            symbols.update({f"t_{i}": t, f"h_{i}": h, f"w_{i}": w})
        object.__setattr__(self, "symbols", symbols)

    @property
    def num_patches(self) -> int:
        return sum(t * h * w for t, h, w in self.rows)

    @property
    def num_tokens(self) -> int:
        return self.num_patches // (self.merge * self.merge)

    @property
    def uniform(self) -> bool:
        """All images have the same (t, h, w): per-image sizes then describe every image."""
        return len(set(self.rows)) == 1

    def quantities(self) -> list[Quantity]:
        """Every grid quantity, globals first, then per image in the order used to break ties."""
        m, mm = self.merge, self.merge * self.merge
        out = [
            Quantity("num_patches", Mono.of("N"), self.num_patches, "global"),
            Quantity("num_tokens", Mono.of("N", Fraction(1, mm)), self.num_tokens, "global"),
            Quantity("num_images", Mono.of("n"), len(self.rows), "global"),
            Quantity("num_frames", Mono.of("F"), self.symbols["F"], "global"),
        ]
        # With a uniform grid every row is the same, so row 0 stands for "each image".
        rows = [0] if self.uniform else range(len(self.rows))
        for i in rows:
            t, h, w = (Mono.of(f"{c}_{i}") for c in "thw")
            inv_m, inv_mm = Mono.const(Fraction(1, m)), Mono.const(Fraction(1, mm))
            per_image = [
                (f"h[{i}]/{m}", h * inv_m, "h"),
                (f"w[{i}]/{m}", w * inv_m, "w"),
                (f"h[{i}]", h, "h"),
                (f"w[{i}]", w, "w"),
                (f"t[{i}]", t, ""),
                (f"h[{i}]·w[{i}]/{mm}", h * w * inv_mm, ""),
                (f"h[{i}]·w[{i}]", h * w, ""),
                (f"t[{i}]·h[{i}]·w[{i}]/{mm}", t * h * w * inv_mm, ""),
                (f"t[{i}]·h[{i}]·w[{i}]", t * h * w, ""),
            ]
            for name, mono, axis in per_image:
                out.append(Quantity(name, mono, int(mono.evaluate(self.symbols)), "image", axis))
        return out

    def evaluate(self, mono: Mono) -> Fraction:
        return mono.evaluate(self.symbols)

    def other(self) -> Grid:
        """A second grid for verification: same image count, each image m rows taller, 2m columns wider."""
        m = self.merge
        return Grid(tuple((t, h + m, w + 2 * m) for t, h, w in self.rows), m)

    def to_json(self) -> list[list[int]]:
        return [list(r) for r in self.rows]


def grid_from_metadata(model: ir.Model) -> Grid | None:
    """The grid the export stage recorded in metadata_props (`export_grid_thw`, `spatial_merge_size`)."""
    props = model.metadata_props
    if "export_grid_thw" not in props:
        return None
    try:
        rows = tuple(tuple(int(v) for v in row) for row in json.loads(props["export_grid_thw"]))
        merge = int(props.get("spatial_merge_size", "2"))
    except (ValueError, TypeError) as exc:
        raise UsageError(f"metadata export_grid_thw={props['export_grid_thw']!r} is not a JSON list of [t,h,w]") from exc
    if any(len(r) != 3 for r in rows):
        raise UsageError(f"metadata export_grid_thw={props['export_grid_thw']!r}: each row must be [t,h,w]")
    return Grid(rows, merge)


def parse_grid(items: list[str], merge: int) -> Grid:
    """['1,22,30', ...] (one per image) -> Grid."""
    rows = []
    for item in items:
        try:
            t, h, w = (int(v) for v in item.split(","))
        except ValueError:
            raise UsageError(f"--grid '{item}' is not T,H,W (three integers, in patches), e.g. --grid 1,22,30") from None
        rows.append((t, h, w))
    return Grid(tuple(rows), merge)


def resolve_grid(model: ir.Model, items: list[str] | None, merge: int | None) -> Grid:
    """`--grid` when given, else the model's metadata; UsageError when neither says the grid."""
    if merge is not None and merge < 1:
        raise UsageError(f"--merge must be a positive integer, got {merge}")
    if items:
        if merge is None:
            merge = int(model.metadata_props.get("spatial_merge_size", "2"))
        return parse_grid(items, merge)
    grid = grid_from_metadata(model)
    if grid is None:
        raise UsageError(
            "the model has no export_grid_thw metadata; say the export example's grid with "
            "--grid T,H,W (once per image), e.g. --grid 1,22,30"
        )
    return grid


def grid_feeds(grid: Grid, channels: int, patches_input: str, grid_input: str, seed: int = 0) -> dict:
    """Random pixel values [N, channels] (float32) and grid_thw [n, 3] (int64) for `grid`."""
    rng = np.random.default_rng(seed)
    return {
        patches_input: rng.standard_normal((grid.num_patches, channels)).astype(np.float32),
        grid_input: np.array(grid.rows, dtype=np.int64),
    }


class Emitter:
    """Builds, once each, the nodes that compute symbols from the graph inputs at run time.

    Args:
        graph: the graph whose inputs are read.
        patches_input: name of the patch input (`pixel_values`, [N, C]).
        grid_input: name of the grid input (`grid_thw`, [n, 3] int64).
    """

    def __init__(self, graph: ir.Graph, patches_input: str, grid_input: str, opset: int):
        inputs = {v.name: v for v in graph.inputs}
        self.patches = inputs.get(patches_input)
        self.grid = inputs.get(grid_input)
        self.opset = opset
        self.nodes: list[ir.Node] = []
        self._cache: dict[object, ir.Value] = {}

    def op(self, op_type: str, inputs, **attrs) -> ir.Value:
        node = ir.node(op_type, inputs, attributes=attrs)
        self.nodes.append(node)
        return node.outputs[0]

    def const(self, values, dtype=np.int64) -> ir.Value:
        array = np.asarray(values, dtype=dtype)
        key = ("const", array.dtype.str, array.shape, array.tobytes())
        if key not in self._cache:
            self._cache[key] = self.op("Constant", [], value=ir.tensor(array))
        return self._cache[key]

    def symbol(self, sym: str) -> ir.Value:
        """1-D int64 [1] tensor holding `sym` at run time."""
        if sym in self._cache:
            return self._cache[sym]
        if sym == "N":
            if self.patches is None:
                raise UsageError("the model has no patch input to read num_patches from; pass --patches-input NAME")
            value = self.op("Gather", [self.op("Shape", [self.patches]), self.const([0])], axis=0)
        elif sym == "n":
            value = self.op("Gather", [self.op("Shape", [self._grid()]), self.const([0])], axis=0)
        elif sym == "F":
            times = self.op("Gather", [self._grid(), self.const([0])], axis=1)  # [n, 1]
            if self.opset >= 13:
                value = self.op("ReduceSum", [times, self.const([0, 1])], keepdims=0)
            else:
                value = self.op("ReduceSum", [times], axes=[0, 1], keepdims=0)
            value = self.op("Reshape", [value, self.const([1])])
        else:
            column, index = "thw".index(sym[0]), int(sym.split("_")[1])
            flat = self._cached("flat", lambda: self.op("Reshape", [self._grid(), self.const([-1])]))
            value = self.op("Gather", [flat, self.const([3 * index + column])], axis=0)
        self._cache[sym] = value
        return value

    def _cached(self, key, make):
        if key not in self._cache:
            self._cache[key] = make()
        return self._cache[key]

    def _grid(self) -> ir.Value:
        if self.grid is None:
            raise UsageError("the model has no grid input to read t, h, w from; pass --grid-input NAME")
        if self.grid.dtype == ir.DataType.INT64:
            return self.grid
        return self._cached("grid64", lambda: self.op("Cast", [self.grid], to=ir.DataType.INT64))

    def mono(self, mono: Mono) -> ir.Value:
        """1-D int64 [1] tensor holding `mono` at run time (numerator product, then one exact Div)."""
        key = ("mono", mono)
        if key in self._cache:
            return self._cache[key]
        num = [s for s, p in mono.powers for _ in range(p) if p > 0]
        den = [s for s, p in mono.powers for _ in range(-p) if p < 0]
        value = self._product(num, mono.coef.numerator)
        if den or mono.coef.denominator != 1:
            value = self.op("Div", [value, self._product(den, mono.coef.denominator)])
        self._cache[key] = value
        return value

    def _product(self, symbols: list[str], coef: int) -> ir.Value:
        if not symbols:
            return self.const([coef])
        value = self.symbol(symbols[0])
        for sym in symbols[1:]:
            value = self.op("Mul", [value, self.symbol(sym)])
        if coef != 1:
            value = self.op("Mul", [value, self.const([coef])])
        return value
