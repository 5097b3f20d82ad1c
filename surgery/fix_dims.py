"""fix-dims: repair dim_param conflicts and stale shape claims without changing what the model computes.

Only declarations change, never nodes or weights:
- input dims whose symbol conflicts get one symbol per (axis, real size) group: the leading axis
  becomes `batch`, others `<symbol or 'dim'>_<axis>` (the `?` on images' batch and on three FPN
  scales' heights no longer claims they are equal);
- output dims keep a static size only if every probed size confirms it (SCRFD's `[12800, 1]` holds
  at 640×640 only) and a symbol only if it never conflicts; the rest are cleared;
- value_info is dropped and re-inferred by ONNX shape inference from the repaired inputs.
"""

from __future__ import annotations

import logging
import re

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass

from surgery.probe import conflicts, declared, drop_shape_claims, observe, stale
from surgery.run import compare_outputs, try_run
from vlm_vision_onnx.core.errors import CheckFailed

_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def infer(model: ir.Model) -> None:
    """ONNX shape inference in place (data propagation on); the model is left as is if it gives up."""
    logger = logging.getLogger("onnx_ir.passes.common.shape_inference")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        ShapeInferencePass(strict_mode=False, data_prop=True)(model)
    finally:
        logger.setLevel(level)


def _new_symbol(symbol: str, axis: int, index: int, groups: int, taken: set[str]) -> str:
    base = symbol if _IDENTIFIER.match(symbol) else "dim"
    name = "batch" if axis == 0 and base == "dim" else f"{base}_{axis}"
    if groups > 1:
        name += f"_{index}"
    while name in taken:
        name += "_"
    taken.add(name)
    return name


def rename_input_symbols(model: ir.Model, real: dict, bad: set[str]) -> dict[str, str]:
    """Give each (axis, real size) group of a conflicting input symbol its own name, in place."""
    taken = {d.value for v in model.graph.inputs for d in (v.shape or []) if not isinstance(d, int)}
    renamed: dict[str, str] = {}
    groups: dict[tuple[str, int, int], str] = {}
    for value in model.graph.inputs:
        if value.shape is None:
            continue
        dims = []
        for axis, dim in enumerate(value.shape):
            symbol = None if isinstance(dim, int) else dim.value
            if symbol is None or symbol not in bad:
                dims.append(dim)
                continue
            size = real[value.name][0][axis]
            key = (symbol, axis, size)
            if key not in groups:
                same_axis = {k for k in groups if k[0] == symbol and k[1] == axis}
                groups[key] = _new_symbol(symbol, axis, len(same_axis), len(same_axis) + 1, taken)
            renamed[f"{value.name} axis {axis}"] = f"{symbol} -> {groups[key]}"
            dims.append(groups[key])
        value.shape = ir.Shape(dims)
    return renamed


def redeclare(model: ir.Model, real: dict, conflict_list: list[dict], more: list[dict] = ()) -> dict:
    """Rewrite the declarations of `model` in place from a probe run (`real`, input symbols are
    renamed from it) and the runs at other sizes (`more`: a static output dim must hold in all)."""
    bad = {c["symbol"] for c in conflict_list}
    renamed = rename_input_symbols(model, real, bad)
    keep = {}
    cleared = []
    for value in model.graph.outputs:
        if value.shape is None:
            continue
        shape = real.get(value.name, (None,))[0]
        others = [r[value.name][0] for r in more if value.name in r]
        dims = []
        for axis, dim in enumerate(value.shape):
            symbol = None if isinstance(dim, int) else dim.value
            ok_static = isinstance(dim, int) and all(
                s is not None and axis < len(s) and s[axis] == dim for s in [shape, *others])
            ok_symbol = symbol is not None and symbol not in bad
            dims.append(dim if ok_static or ok_symbol else None)
            if dims[-1] is None:
                cleared.append(f"{value.name} axis {axis}")
        keep[value.name] = dims if shape is None or len(shape) == len(dims) else None
    value_info = sum(1 for n in model.graph for v in n.outputs if v.shape is not None and not v.is_graph_output())
    drop_shape_claims(model, keep)
    infer(model)
    return {"renamed_input_dims": renamed, "cleared_output_dims": cleared, "value_info_dropped": value_info}


def fix_dims(model: ir.Model, feeds: dict[str, np.ndarray], more: list[dict[str, np.ndarray]] = ()
             ) -> tuple[ir.Model, dict]:
    """Repair shape claims of `model` from probe runs at `feeds` and at the other sizes `more`.

    Returns:
        (new model, report): report lists the conflicts and stale claims found (at any size) and the changes.

    Raises:
        CheckFailed: the model fails at a probe even with every shape claim removed.
    """
    decl = declared(model)
    reals = []
    for where in [feeds, *more]:
        real, _, error = observe(model, where)
        if real is None:
            raise CheckFailed(f"the model fails at {_where(where)} even without shape claims, so it cannot be "
                              f"repaired there: {error}")
        reals.append(real)
    found_conflicts = _union([conflicts(decl, r) for r in reals], "symbol")
    found_stale = _union([stale(decl, r) for r in reals], "tensor")
    new = model.clone()
    changes = redeclare(new, reals[0], found_conflicts, reals[1:])
    return new, {"conflicts": found_conflicts, "stale": found_stale, **changes}


def _union(lists: list[list[dict]], key: str) -> list[dict]:
    """Items of every list, the first one per `key`."""
    seen: dict[str, dict] = {}
    for items in lists:
        for item in items:
            seen.setdefault(item[key], item)
    return list(seen.values())


def _where(feeds: dict[str, np.ndarray]) -> str:
    return " ".join(f"{k}={'x'.join(map(str, v.shape))}" for k, v in feeds.items())


def check_claims(model: ir.Model, feeds: dict[str, np.ndarray]) -> list[str]:
    """Problems left in `model`'s claims at `feeds` (conflicts, stale), one line each; [] when clean."""
    real, _, error = observe(model, feeds)
    if real is None:
        return [f"fails: {error}"]
    decl = declared(model)
    lines = [f"symbol '{c['symbol']}' still conflicts" for c in conflicts(decl, real)]
    lines += [f"'{s['tensor']}' declares {s['declared']}, really {s['real']}" for s in stale(decl, real)]
    return lines


def verify(fixed: ir.Model, original: ir.Model, feeds: dict[str, np.ndarray],
           more: list[dict[str, np.ndarray]] = ()) -> tuple[bool, list[str]]:
    """At `feeds` and at each of `more`: `fixed` runs as written, its claims are true, its outputs
    equal the original's (run without shape claims, since the original may not run as written)."""
    ok, lines = True, []
    for at in [feeds, *more]:
        where = _where(at)
        got, error = try_run(fixed, at)
        if got is None:
            ok = False
            lines.append(f"at {where}: fails: {error}")
            continue
        wrong = check_claims(fixed, at)
        if wrong:
            ok = False
            lines.append(f"at {where}: claims still wrong: {'; '.join(wrong)}")
            continue
        same, texts = compare_outputs(got, observe(original, at)[1])
        ok &= same
        lines.append(f"at {where}: runs, claims true, same outputs as IN: " + "; ".join(texts))
    return ok, lines
