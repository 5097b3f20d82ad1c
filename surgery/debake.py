"""debake: rewrite grid-baked shape constants as subgraphs of grid_thw / Shape(pixel_values).

`surgery.grid_scan.find` says which entries of which shape inputs come from the export grid
and what they are at run time; `debake` builds each as Gather/Mul/Div/Concat nodes of the inputs
(`surgery.grid.Emitter`) and wires them in place of the constant. `verify` runs the result: at the
export grid it must match the original, at another grid its output sizes must follow the grid.
"""

from __future__ import annotations

import contextlib
import json

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from surgery.findings import Finding, node_name
from surgery.grid import Emitter, Grid, grid_feeds
from surgery.grid_classify import expected_dims
from surgery.grid_scan import architecture_values, collisions, find
from surgery.run import (
    ORT_ERRORS,
    compare_outputs,
    fmt_dims,
    input_specs,
    one_line,
    open_session,
    random_array,
)
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.progress import step


def debake(model: ir.Model, grid: Grid, patches_input: str = "pixel_values",
           grid_input: str = "grid_thw") -> tuple[ir.Model, dict]:
    """Rewrite every fixable grid-baked shape constant as a subgraph of the inputs.

    Args:
        model: the exported model (not modified).
        grid: the export example's grid.
        patches_input / grid_input: the inputs holding patches [N, C] and the grid [n, 3].

    Returns:
        (new model, report) where report has `findings` (all, as dicts), `fixed` and `unfixable`
        counts. With nothing to fix the returned model is `model` itself.
    """
    findings = find(model, grid)
    fixable = [f for f in findings if f.fixable]
    report = {
        "grid": grid.to_json(), "merge": grid.merge, "collisions": collisions(model, grid),
        "findings": [f.to_json() for f in findings],
        "fixed": len(fixable), "unfixable": len(findings) - len(fixable),
    }
    if not fixable:
        return model, report
    new = model.clone()
    graph = new.graph
    emitter = Emitter(graph, patches_input, grid_input, new.opset_imports.get("", 1))
    nodes_by_name = {node_name(n): n for n in graph}
    for finding in fixable:
        node = nodes_by_name[finding.node]
        original = ir.convenience.get_const_tensor(node.inputs[finding.input])
        node.replace_input_with(finding.input, computed_shape(emitter, finding, original))
    graph.insert_before(graph.node(0), emitter.nodes)
    RemoveUnusedNodesPass()(new)
    record_grid(new, grid)
    return new, report


def record_grid(model: ir.Model, grid: Grid) -> bool:
    """Write `grid` into `model`'s metadata (export_grid_thw, spatial_merge_size), as the export stage
    does, so `audit OUT` and `doctor OUT` find it without --grid; returns whether anything changed."""
    want = {"export_grid_thw": json.dumps(grid.to_json()), "spatial_merge_size": str(grid.merge)}
    props = model.metadata_props
    if all(props.get(k) == v for k, v in want.items()):
        return False
    props.update(want)
    return True


def computed_shape(emitter: Emitter, finding: Finding, original) -> ir.Value:
    """The replacement for one shape constant: Concat of constant runs and computed entries."""
    by_index = {e.index: e for e in finding.entries}
    pieces, run = [], []
    for j, v in enumerate(finding.values):
        if j in by_index:
            if run:
                pieces.append(emitter.const(run))
                run = []
            pieces.append(emitter.mono(by_index[j].mono))
        else:
            run.append(v)
    if run:
        pieces.append(emitter.const(run))
    value = pieces[0] if len(pieces) == 1 else emitter.op("Concat", pieces, axis=0)
    if original.dtype != ir.DataType.INT64:
        value = emitter.op("Cast", [value], to=original.dtype)
    if len(original.shape) == 0:
        value = emitter.op("Reshape", [value, emitter.const(np.zeros((0,), np.int64))])
    return value


def grid_inputs(model: ir.Model, patches_input: str, grid_input: str) -> int:
    """Channels C of the patch input [N, C].

    Raises:
        UsageError: the patch or grid input is missing, or C is not static.
    """
    specs = {name: dims for name, _, dims in input_specs(model)}
    for name, option in ((patches_input, "--patches-input"), (grid_input, "--grid-input")):
        if name not in specs:
            raise UsageError(f"the model has no input '{name}' (inputs: {', '.join(specs)}); name it with {option}")
    dims = specs[patches_input]
    if len(dims) != 2 or not isinstance(dims[1], int):
        raise UsageError(f"input '{patches_input}' must be [num_patches, C] with a static C, not {fmt_dims(dims)}")
    return dims[1]


def _feeds(model: ir.Model, grid: Grid, channels: int, patches_input: str, grid_input: str) -> dict:
    """Random patches and the grid's rows; other inputs (must be static) random."""
    feeds = grid_feeds(grid, channels, patches_input, grid_input)
    rng = np.random.default_rng(0)
    for name, elem_type, dims in input_specs(model):
        if name not in feeds:
            if not all(isinstance(d, int) for d in dims):
                raise UsageError(f"extra input '{name}' {dims} has non-static dims; debake can only run models whose "
                               "other inputs are static")
            feeds[name] = random_array(elem_type, tuple(dims), rng)
    return feeds


def verify(src, out, model: ir.Model, grid: Grid, changed: bool, unfixable: int,
           patches_input: str = "pixel_values", grid_input: str = "grid_thw") -> dict:
    """Run `out` at the export grid (against `src` when `changed`) and at `grid.other()`.

    At the other grid the outputs' grid-sized dims must follow the grid (others stay); when
    unfixable constants remain a failure there is expected and not held against `out`.

    Args:
        src / out: paths of the original and the debaked model; model: the original, loaded.

    Returns:
        {"ok": bool, "lines": [one line per check, starting 'verified:', 'FAILED:' or 'not verified:']}
    """
    try:
        return _verify(src, out, model, grid, changed, unfixable, patches_input, grid_input)
    except ORT_ERRORS as exc:
        return {"ok": False, "lines": [f"FAILED: ONNX Runtime fails: {one_line(exc)}"]}


def _verify(src, out, model, grid, changed, unfixable, patches_input, grid_input) -> dict:
    channels = grid_inputs(model, patches_input, grid_input)
    other = grid.other()
    result = {"ok": True, "lines": []}
    arch = architecture_values(model.graph)
    with contextlib.ExitStack() as stack:
        with step("loading OUT in ONNX Runtime"):
            session = stack.enter_context(open_session(out))
        names = [o.name for o in session.get_outputs()]
        feeds = _feeds(model, grid, channels, patches_input, grid_input)
        with step(f"running OUT at the export grid {grid.to_json()}"):
            got = dict(zip(names, session.run(names, feeds)))
        if changed:
            with step(f"loading IN in ONNX Runtime and running it at the export grid {grid.to_json()}"), \
                    open_session(src) as original:
                ref = dict(zip(names, original.run(names, feeds)))
            ok, lines = compare_outputs(got, ref)
            result["ok"] &= ok
            label = "verified" if ok else "FAILED"
            result["lines"].append(f"{label}: export grid {grid.to_json()} vs IN: " + "; ".join(lines))
        else:
            result["lines"].append(f"verified: export grid {grid.to_json()}: runs, outputs "
                                   + ", ".join(f"{k} {list(v.shape)}" for k, v in got.items()))
        feeds_other = _feeds(model, other, channels, patches_input, grid_input)
        try:
            with step(f"running OUT at another grid {other.to_json()}"):
                got_other = dict(zip(names, session.run(names, feeds_other)))
        except ORT_ERRORS as exc:
            if unfixable:
                result["lines"].append(f"not verified: grid {other.to_json()}: fails, as expected with {unfixable} "
                                       f"unfixable constant(s): {one_line(exc)}")
            else:
                result["ok"] = False
                result["lines"].append(f"FAILED: grid {other.to_json()}: {one_line(exc)}; the model has grid "
                                       "sizes the rules did not recognise")
            return result
    wrong = []
    for name, value in got_other.items():
        want = expected_dims(list(got[name].shape), grid, other, arch)
        if list(value.shape) != want or not np.all(np.isfinite(value)):
            wrong.append(f"{name} {list(value.shape)} (expected {want})")
    if wrong and not unfixable:
        result["ok"] = False
    if wrong:
        label = "not verified" if unfixable else "FAILED"
        result["lines"].append(f"{label}: grid {other.to_json()}: runs, sizes do NOT follow the grid: "
                               + ", ".join(wrong))
    else:
        result["lines"].append(f"verified: grid {other.to_json()}: runs, output sizes follow the grid: "
                               + ", ".join(f"{k} {list(v.shape)}" for k, v in got_other.items()))
    return result
