"""The shape doctor: find what makes a model fail or lie about its shapes, one line per problem.

Checks, all by running the model at the probe shapes (see `surgery.probe`):
- fails-in-ort: the model as written fails in ONNX Runtime at the probe;
- dim-param-conflict: one `dim_param` names tensors of different real sizes (ORT then re-uses a
  buffer of the wrong size: "Shape mismatch attempting to re-use buffer");
- stale-shape: a declared dim, rank or type (value_info, input, output) contradicts a run; claims
  are checked at every size doctor runs (the probe, a second size with every non-batch symbolic
  dim changed, e.g. 640 -> 320, and the one-symbol-at-a-time runs below), and the line says at
  which sizes the claim holds and at which it fails;
- static-symbol: an input dim declared symbolic (`s77`) that the model does not follow: it fails,
  or its outputs keep the old size, when that dim alone changes;
- batch-constant: the batch baked into a shape input (SCRFD's Resize sizes `[1, 16, 40, 40]`),
  found as set-batch finds them (`surgery.batch_constants`); a problem when the batch is declared
  dynamic (the outputs are silently wrong at any other batch), a note when it is static;
- fails-at-other-grid / grid-constant: for models with an export grid (`surgery.debake`);
and notes (not problems): ops and outputs whose size is data-dependent (NonZero...) or inferable.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from surgery import dataflow
from surgery.batch_constants import debatch
from surgery.grid import Grid
from surgery.grid_scan import find
from surgery.probe import (
    GENERATED_SYMBOL,
    conflicts,
    declared,
    describe_conflict,
    observe,
    probe_feeds,
    stale,
)
from surgery.probe_sizes import other_sizes
from surgery.run import random_array, try_run
from vlm_vision_onnx.core.errors import CheckFailed
from vlm_vision_onnx.core.progress import step

#: At most this many input symbols get their own extra probe run.
MAX_SYMBOL_PROBES = 8


def _shapes(feeds: dict[str, np.ndarray]) -> str:
    return " ".join(f"{k}={'x'.join(map(str, v.shape))}" for k, v in feeds.items())


def diagnose(model: ir.Model, probe_shapes: dict[str, tuple[int, ...]], grid: Grid | None = None) -> dict:
    """Every problem of `model` at the probe shapes (and the other sizes it runs), plus notes.

    Args:
        model: the model to examine (not modified).
        probe_shapes: input name -> shape to run at (others: static dims, leading symbol = 1).
        grid: export grid for models with grid_thw (from metadata); adds the grid checks.

    Returns:
        {"probe": {name: shape}, "sizes_run": [probe text, ...], "problems": [{"kind", "message", ...}],
         "notes": [...], "sizes": dataflow.classify(model)}
    """
    feeds = probe_feeds(model, probe_shapes, grid)
    problems: list[dict] = []
    notes: list[dict] = []
    with step("running the model as written"):
        _, error = try_run(model, feeds)
    if error:
        problems.append({"kind": "fails-in-ort", "message": f"fails in ONNX Runtime at {_shapes(feeds)}: {error}"})
    decl = declared(model)
    with step(f"running it without shape claims, {len(decl)} declared tensors as outputs"):
        real, _, neutral_error = observe(model, feeds)
    conflicting: set[str] = set()
    runs: list[tuple[str, dict]] = []
    if real is None:
        problems.append({"kind": "fails-without-shape-claims", "message":
                         f"fails at {_shapes(feeds)} even with every shape claim removed: {neutral_error}"})
    else:
        runs.append((_shapes(feeds), real))
        for conflict in conflicts(decl, real):
            conflicting.add(conflict["symbol"])
            problems.append({"kind": "dim-param-conflict", **conflict, "message":
                             f"{describe_conflict(conflict)}; ORT plans memory as if they were equal; "
                             "fix: python -m surgery fix-dims IN OUT"})
        if grid is None:
            problems += _second_size(model, feeds, decl, runs, notes)
        problems += _symbol_checks(model, feeds, decl, conflicting, grid, notes, runs)
        problems += _claims(decl, runs)
        if grid is None:
            problems += _batch_constants(model, feeds, notes)
    if grid is not None:
        problems += _grid_checks(model, grid)
    sizes = dataflow.classify(model)
    notes += _size_notes(sizes)
    return {"probe": {k: list(v.shape) for k, v in feeds.items()}, "sizes_run": [label for label, _ in runs],
            "problems": problems, "notes": notes, "sizes": sizes}


def _second_size(model, feeds, decl, runs, notes) -> list[dict]:
    """Run at a second size (every non-batch symbolic dim changed); its real shapes join `runs`."""
    alt = other_sizes(model, feeds)
    if alt is None:
        return []
    label = _shapes(alt)
    with step(f"running it without shape claims at {label}"):
        real, _, error = observe(model, alt)
    if real is None:
        notes.append({"kind": "second-size", "message": f"the model does not run at {label} even without shape "
                      f"claims ({error}); its claims are checked at {_shapes(feeds)} only"})
        return []
    runs.append((label, real))
    _, written_error = try_run(model, alt)
    if written_error:
        return [{"kind": "fails-in-ort", "message": f"fails in ONNX Runtime at {label} (it runs there without "
                 f"its shape claims): {written_error}"}]
    return []


def _batch_constants(model: ir.Model, feeds: dict[str, np.ndarray], notes: list[dict]) -> list[dict]:
    """batch-constant: shape constants that hold the probe's batch (runs at b and 2b, see set-batch)."""
    inputs = model.graph.inputs
    if not inputs or any(v.shape is None or len(v.shape) == 0 for v in inputs) or \
            len({feeds[v.name].shape[0] for v in inputs}) != 1:
        return []
    batch = feeds[inputs[0].name].shape[0]
    try:
        with step(f"looking for the batch {batch} in shape constants (runs at {batch} and {2 * batch})"):
            findings, _ = debatch(model.clone(), feeds, inputs[0].name)
    except CheckFailed:
        return []
    if not findings:
        return []
    listing = _listing([f"{f.op} '{f.node}' {f.values}" for f in findings], 3)
    found = f"{len(findings)} shape constant(s) hold the batch {batch}: {listing}"
    declared_as = inputs[0].shape[0]
    if isinstance(declared_as, int):
        notes.append({"kind": "batch-constant", "message": f"{found}; right at this batch only; "
                      "python -m surgery set-batch IN OUT --batch N rewrites them"})
        return []
    return [{"kind": "batch-constant", "message": f"{found}; the batch is declared dynamic ('{declared_as.value}') but "
             f"the model is right at {batch} only; fix: python -m surgery set-batch IN OUT --batch dynamic"
             + (f" {_probe_options(feeds)}" if batch != 1 else "")}]


def _probe_options(feeds: dict[str, np.ndarray]) -> str:
    return " ".join(f"--probe {k}={'x'.join(map(str, v.shape))}" for k, v in feeds.items())


def _claims(decl, runs: list[tuple[str, dict]]) -> list[dict]:
    """stale-shape: each declaration false at some run, with the sizes where it holds and fails."""
    failing: dict[str, list[tuple[str, dict]]] = {}
    for label, real in runs:
        for item in stale(decl, real):
            failing.setdefault(item["tensor"], []).append((label, item))
    problems = []
    for tensor, fails in failing.items():
        first = fails[0][1]
        bad = {label for label, _ in fails}
        holds = [label for label, real in runs if tensor in real and label not in bad]
        where = "; ".join(f"{label} (the tensor is {item['real']}: {item['why']})" for label, item in fails)
        held = f"holds at {', '.join(holds)}; " if holds else ""
        problems.append({"kind": "stale-shape", **first, "holds_at": holds, "fails_at": [label for label, _ in fails],
                         "message": f"{first['role']} '{tensor}' declares {first['declared']}: {held}fails at {where}; "
                                    "fix: python -m surgery fix-dims IN OUT"})
    return problems


def _listing(names: list[str], limit: int = 4) -> str:
    return ", ".join(names[:limit]) + (f", +{len(names) - limit} more" if len(names) > limit else "")


def _size_notes(sizes: dict) -> list[dict]:
    """Notes from `dataflow.classify`: data-dependent ops, grouped by cause; outputs; inferable ops."""
    notes = []
    by_cause: dict[str, list[str]] = {}
    for item in sizes["nodes"]["data-dependent"]:
        by_cause.setdefault(", ".join(item["because"]), []).append(item["node"])
    for cause, nodes in by_cause.items():
        if cause == "its output size depends on the data":
            message = f"{_listing(nodes)}: output size depends on the data; known only at run time"
        else:
            message = f"{len(nodes)} op(s) take their sizes from {cause}: {_listing(nodes)}; known only at run time"
        notes.append({"kind": "data-dependent", "message": message + " (freeze cannot make it static)"})
    for name, item in sizes["outputs"].items():
        if item["kind"] == "data-dependent":
            notes.append({"kind": "data-dependent-output", "message":
                          f"output '{name}': size known only at run time ({', '.join(item['because'])})"})
    inferable = [i["node"] for i in sizes["nodes"]["inferable"]]
    if inferable:
        notes.append({"kind": "inferable", "message":
                      f"{len(inferable)} op(s) size their output from input shapes (inferable): {_listing(inferable)}"})
    return notes


def _symbol_checks(model, feeds, decl, conflicting, grid, notes, runs) -> list[dict]:
    """static-symbol: change one input symbol at a time (halve it, or double 1 and odd sizes); each
    run's real shapes join `runs` (where the claims are checked)."""
    grid_inputs = {"pixel_values", "grid_thw"} if grid is not None else set()
    symbols: dict[str, list[tuple[str, int]]] = {}
    for value in model.graph.inputs:
        for axis, dim in enumerate(decl[value.name].dims or ()):
            if isinstance(dim, str) and dim not in conflicting and value.name not in grid_inputs:
                symbols.setdefault(dim, []).append((value.name, axis))
    problems = []
    rng = np.random.default_rng(1)
    for symbol, where in list(symbols.items())[:MAX_SYMBOL_PROBES]:
        name0, axis0 = where[0]
        size = feeds[name0].shape[axis0]
        other = size // 2 if size % 2 == 0 and size >= 2 else size * 2
        alt = dict(feeds)
        for name in {n for n, _ in where}:
            shape = list(feeds[name].shape)
            for n, a in where:
                if n == name:
                    shape[a] = other
            spec = next(v for v in model.graph.inputs if v.name == name)
            alt[name] = random_array(int(spec.dtype.value), tuple(shape), rng)
        with step(f"running at {symbol}={other}"):
            real, _, error = observe(model, alt)
        places = ", ".join(f"{n} axis {a}" for n, a in where)
        freeze_hint = " ".join(f"--shape {k}={'x'.join(map(str, v.shape))}" for k, v in feeds.items())
        if real is None:
            problems.append({"kind": "static-symbol", "symbol": symbol, "message":
                             f"symbol '{symbol}' ({places}) is declared dynamic but the model fails at "
                             f"{symbol}={other} (it runs at {size}): {error}; if it is meant to be static: "
                             f"python -m surgery freeze IN OUT {freeze_hint}"})
            continue
        if _shapes(alt) not in {label for label, _ in runs}:
            runs.append((_shapes(alt), real))
        bad = [c for c in conflicts(decl, real) if c["symbol"] == symbol]
        if bad:
            problems.append({"kind": "static-symbol", "symbol": symbol, "message":
                             f"symbol '{symbol}' ({places}) is declared dynamic but at {symbol}={other} "
                             f"{describe_conflict(bad[0]).split(': ', 1)[1]}; outputs keep the probe's size; "
                             f"if it is meant to be static: python -m surgery freeze IN OUT {freeze_hint}"})
        elif GENERATED_SYMBOL.match(symbol):
            notes.append({"kind": "generated-symbol", "message":
                          f"symbol '{symbol}' ({places}) has an exporter-generated name; the model runs at "
                          f"{size} and {other}; if it is meant to be static, freeze it"})
    return problems


def _grid_checks(model: ir.Model, grid: Grid) -> list[dict]:
    """Baked grid constants (debake's finder) and a run at another grid."""
    problems = []
    for finding in find(model, grid):
        problems.append({"kind": "grid-constant", "message": finding.message +
                         ("; fix: python -m surgery debake IN OUT" if finding.fixable else "")})
    other = grid.other()
    feeds = probe_feeds(model, {}, other)
    with step(f"running at another grid {other.to_json()}"):
        _, error = try_run(model, feeds)
    if error:
        problems.append({"kind": "fails-at-other-grid", "message":
                         f"runs at the export grid {grid.to_json()} but fails at {other.to_json()}: {error}"})
    return problems


def render(report: dict, path: str) -> list[str]:
    """Human-readable lines for a `diagnose` report."""
    lines = [f"doctor: {path} at " + " ".join(f"{k}={'x'.join(map(str, v))}" for k, v in report["probe"].items())]
    if report.get("probe_guess"):
        lines.append(f"  probe    {report['probe_guess']}")
    if len(report.get("sizes_run", [])) > 1:
        lines.append(f"  claims checked at {len(report['sizes_run'])} sizes: {' | '.join(report['sizes_run'])}")
    problems, notes = report["problems"], report["notes"]
    for p in problems:
        lines.append(f"  problem  {p['kind']}: {p['message']}")
    for n in notes:
        lines.append(f"  note     {n['kind']}: {n['message']}")
    lines.append(f"{len(problems)} problem(s), {len(notes)} note(s)" if problems else
                 f"clean: no problem found ({len(notes)} note(s))")
    return lines

