"""Command line: python -m surgery {stage,debake,audit,doctor,set-batch,freeze,fix-dims} ...

Exit status: 0 done (or clean), 1 problems found / could not fix / verification failed,
2 bad input (one line on stderr saying what is wrong and how to fix it).
Commands that write a model stage it in a temporary folder beside OUT, verify it by running it
with ONNX Runtime, then move it into place with `report.json`; nothing is written on failure.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from surgery import audit as audit_mod
from surgery import debake as debake_mod
from surgery import doctor as doctor_mod
from surgery import fix_dims as fix_dims_mod
from surgery import freeze as freeze_mod
from surgery import set_batch as set_batch_mod
from surgery import stage as stage_mod
from surgery.grid import resolve_grid
from surgery.probe import declared, neutral, probe_feeds
from surgery.probe_sizes import guess_shapes, other_sizes
from surgery.run import fmt_dims, parse_named_shapes, try_run
from vlm_vision_onnx.core.errors import Parser, UsageError, main_wrapper, subject
from vlm_vision_onnx.core.onnx_io import copy_model, has_external_data, load, model_path, save
from vlm_vision_onnx.core.progress import say, step
from vlm_vision_onnx.core.staging import (
    StagedFile,
    add_clobber_argument,
    check_file_output,
    check_folder_output,
)


def _grid_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--grid", action="append", metavar="T,H,W",
                        help="export grid row, once per image (default: the model's export_grid_thw metadata)")
    parser.add_argument("--merge", type=int, default=None, help="spatial merge size (default: metadata, else 2)")
    parser.add_argument("--patches-input", default="pixel_values", help="input holding patches [N, C]")
    parser.add_argument("--grid-input", default="grid_thw", help="input holding the grid [n, 3]")


def _out_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output", metavar="OUT",
                        help="output folder (model.onnx + report.json), or a .onnx file name (report.json beside it)")
    parser.add_argument("--report", default=None, help="report path (default: report.json beside the model)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing OUT that another stage of this tool wrote (only its listed files)")
    add_clobber_argument(parser)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="python -m surgery", description="Shape surgery for ONNX models, every fix verified by running it.",
        epilog="exit status: 0 done/clean, 1 problems found or not verified, 2 bad input. See the README, section 'Shape surgery'.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    p = sub.add_parser("debake", help="replace grid-baked shape constants by subgraphs of grid_thw")
    p.add_argument("input", metavar="IN")
    _out_options(p)
    _grid_options(p)
    p = sub.add_parser("stage", help="the surgery stage of `make export`: the checks the model's family declares, "
                                     "OUT checked against IN at every validation layout")
    p.add_argument("input", metavar="IN")
    _out_options(p)
    p = sub.add_parser("audit", help="fail (exit 1) when a grid-specific constant remains")
    p.add_argument("input", metavar="IN")
    _grid_options(p)
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p = sub.add_parser("doctor", help="list shape problems, found by running the model")
    p.add_argument("input", metavar="IN")
    p.add_argument("--probe", action="append", metavar="NAME=SHAPE", help="input shape to run at, e.g. x=1x3x640x640")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p = sub.add_parser("set-batch", help="change the batch (axis 0 of every input), verified per sample")
    p.add_argument("input", metavar="IN")
    _out_options(p)
    p.add_argument("--batch", required=True, help="new batch size, or 'dynamic'")
    p.add_argument("--probe", action="append", metavar="NAME=SHAPE", help="sizes of other symbolic input dims")
    p.add_argument("--contiguous", action="store_true",
                   help="give outputs whose samples interleave (SCRFD 0.5 GF heads) each sample's rows in one block")
    p = sub.add_parser("freeze", help="make every dim static at the given input shapes, verified")
    p.add_argument("input", metavar="IN")
    _out_options(p)
    p.add_argument("--shape", action="append", metavar="NAME=SHAPE", help="static input shape, e.g. x=4x3x640x640")
    p = sub.add_parser("fix-dims", help="repair dim_param conflicts and stale value_info, verified")
    p.add_argument("input", metavar="IN")
    _out_options(p)
    p.add_argument("--probe", action="append", metavar="NAME=SHAPE", help="input shape to run at")
    return parser


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        args = build_parser().parse_args(argv)
        start = time.perf_counter()
        subject(args.input)
        args.input = str(model_path(args.input))  # a model file, or a stage folder holding model.onnx
        if getattr(args, "output", None) is not None:
            _check_out(args)  # before any work: a bad OUT is found in a second, not after the run
        code = COMMANDS[args.command](args)
        say(f"{args.command} done in {time.perf_counter() - start:.1f} s (exit {code})")
        return code

    return main_wrapper(body)


def _io_line(model) -> str:
    """'images [batch,3,64,64]; score_2 [batch,4,1024]': what the model now declares for its inputs and outputs."""
    decl = declared(model)
    return "; ".join(f"{d.name} {fmt_dims(d.dims or ())}" for d in decl.values() if d.role != "value_info")


STAGE = "surgery"


def _check_out(args) -> Path:
    """Check OUT (and --report) as `_staged` will use them; returns the model file path."""
    out = Path(args.output)
    if out.suffix != ".onnx":
        check_folder_output(out, STAGE, [args.input], args.force)
        out = out / "model.onnx"
    check_file_output(out, STAGE, [args.input], args.force, args.report)
    return out


def _staged(args) -> StagedFile:
    """The staged output of a writing command: OUT.onnx (a file, report beside it) or OUT/ (a stage
    folder holding model.onnx and report.json), checked before any work (see core.staging)."""
    return StagedFile(_check_out(args), STAGE, [args.input], args.force, args.report,
                      keep_log=Path(args.output).suffix != ".onnx")


def _finish(stage: StagedFile, args, report: dict) -> None:
    """Write the report, move the staged model into place, say where."""
    report = {"stage": STAGE, **report}
    stage.commit(report)
    print(f"wrote {stage.out} (report: {stage.report_path})")


def _write_verified(args, new, report: dict, verify) -> int:
    """Stage `new`, run `verify(saved model) -> (ok, lines)` on the saved copy, and only when it holds
    move it into place with the report; exit status 0 written, 1 not verified (nothing written)."""
    with _staged(args) as stage:
        save(new, stage.model_path, external=has_external_data(args.input) or None)
        ok, lines = verify(load(stage.model_path))
        for line in lines:
            print(f"  {'verified' if ok else 'check'}: {line}")
        if not ok:
            print("verification FAILED: nothing written")
            return 1
        report.update({"input": args.input, "output": args.output, "verification": lines})
        _finish(stage, args, report)
    return 0


# --- debake / audit ----------------------------------------------------------------------------


def cmd_debake(args) -> int:
    with step(f"loading {args.input}"):
        model = load(args.input)
    grid = resolve_grid(model, args.grid, args.merge)
    debake_mod.grid_inputs(model, args.patches_input, args.grid_input)
    source = "--grid" if args.grid else "metadata"
    with step("looking for grid constants"):
        new, report = debake_mod.debake(model, grid, args.patches_input, args.grid_input)
    findings = report["findings"]
    print(f"debake: export grid {grid.to_json()} (merge {grid.merge}, from {source}): "
          f"{len(findings)} grid constant(s), {report['fixed']} fixed, {report['unfixable']} unfixable")
    for f in findings:
        if f["fixable"]:
            print(f"  fixed       {f['message']} -> {f['replacement']}")
        else:
            print(f"  unfixable   {f['message']}")
        for note in f["notes"]:
            print(f"              note: {note}")
    if not findings:
        print("  nothing to fix: every size is computed at run time")
    for line in report["collisions"]:
        print(f"  warning: {line}")
    external = has_external_data(args.input)
    # with nothing to fix `new` is `model`: it is still written (not copied) when it lacked the grid's metadata
    write = bool(report["fixed"]) or debake_mod.record_grid(new, grid)
    with _staged(args) as stage:
        if write:
            with step(f"writing {'with external data ' if external else ''}to a temporary folder"):
                save(new, stage.model_path, external=external or None)
        else:
            with step("copying IN"):
                copy_model(args.input, stage.dir, stage.model_path.name)
        verification = debake_mod.verify(args.input, stage.model_path, model, grid, bool(report["fixed"]),
                                         report["unfixable"], args.patches_input, args.grid_input)
        report.update({"command": "debake", "input": args.input, "output": args.output, "grid_source": source,
                       "verification": verification})
        for line in verification["lines"]:
            print(f"  {line}")
        if not verification["ok"]:
            print("verification FAILED: nothing written")
            return 1
        _finish(stage, args, report)
    if report["unfixable"]:
        print(f"{report['unfixable']} constant(s) could not be fixed: re-export them computed from grid_thw")
        return 1
    return 0


def cmd_stage(args) -> int:
    stage_mod.run(Path(args.input), _staged(args))
    return 0


def cmd_audit(args) -> int:
    model = load(args.input)
    grid = resolve_grid(model, args.grid, args.merge)
    report = audit_mod.audit(model, grid)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"audit: {args.input} against export grid {grid.to_json()} (merge {grid.merge})")
        for f in report["findings"]:
            print(f"  remains  {f['message']}")
        for line in report["collisions"]:
            print(f"  warning  {line}")
        print("clean: no grid-specific constant" if report["clean"] else
              f"FAILED: {len(report['findings'])} grid-specific constant(s) remain")
    return 0 if report["clean"] else 1


# --- doctor / fix-dims / set-batch / freeze --------------------------------------------------------


def _probe_shapes(args, model) -> tuple[dict[str, tuple[int, ...]], str | None]:
    """--probe shapes, plus a guessed size for image inputs with symbolic sides (and the line saying so)."""
    return guess_shapes(model, parse_named_shapes(args.probe, model, "--probe"))


def cmd_doctor(args) -> int:
    model = load(args.input)
    grid = None
    if "export_grid_thw" in model.metadata_props:
        grid = resolve_grid(model, None, None)
    shapes, guess = _probe_shapes(args, model) if grid is None else (parse_named_shapes(args.probe, model, "--probe"), None)
    report = doctor_mod.diagnose(model, shapes, grid)
    if guess:
        report["probe_guess"] = guess
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print("\n".join(doctor_mod.render(report, args.input)))
    return 1 if report["problems"] else 0


def cmd_fix_dims(args) -> int:
    model = load(args.input)
    shapes, guess = _probe_shapes(args, model)
    if guess:
        print(f"probe: {guess}")
    feeds = probe_feeds(model, shapes)
    second = other_sizes(model, feeds)
    more = [second] if second is not None else []
    if second is not None and (error := try_run(neutral(model), second)[1]) is not None:
        where = " ".join(f"{k}={'x'.join(map(str, v.shape))}" for k, v in second.items())
        print(f"  note: not checked at {where}: the model fails there even without shape claims ({error})")
        more = []
    new, report = fix_dims_mod.fix_dims(model, feeds, more)
    print(f"fix-dims: {len(report['conflicts'])} conflicting symbol(s), {len(report['stale'])} stale claim(s), "
          f"{report['value_info_dropped']} value_info entries dropped and re-inferred")
    for where, change in report["renamed_input_dims"].items():
        print(f"  renamed  {where}: {change}")
    for where in report["cleared_output_dims"]:
        print(f"  cleared  {where}")
    print(f"  now declares: {_io_line(new)}")
    report.update({"command": "fix-dims", "probe": {k: list(v.shape) for k, v in feeds.items()},
                   "probed_sizes": [{k: list(v.shape) for k, v in f.items()} for f in [feeds, *more]]})
    if guess:
        report["probe_guess"] = guess
    return _write_verified(args, new, report, lambda saved: fix_dims_mod.verify(saved, model, feeds, more))


def cmd_set_batch(args) -> int:
    if args.batch == "dynamic":
        batch = None
    else:
        try:
            batch = int(args.batch)
        except ValueError:
            raise UsageError(f"--batch {args.batch!r} is neither a positive integer nor 'dynamic'") from None
        if batch <= 0:
            raise UsageError(f"--batch {batch}: the batch must be a positive integer (or 'dynamic')")
    model = load(args.input)
    shapes, guess = _probe_shapes(args, model)
    if guess:
        print(f"probe: {guess}")
    chunk = set_batch_mod.probe_batch_of(model, shapes)
    if batch is not None and batch % chunk:
        raise UsageError(f"--batch {batch} is not a multiple of the old batch {chunk}, so samples cannot be checked "
                       "against the original; pick a multiple")
    with step("rewriting batch constants and finding each output's batch layout"):
        new, report = set_batch_mod.set_batch(model, batch, shapes, args.contiguous)
    layouts = report.pop("layouts")
    print(f"set-batch: batch {report['old_batch']} -> {report['new_batch']} (probe batch {report['probe_batch']})")
    for finding in report["constants"]:
        print(f"  batch    {finding['message']} -> {finding['replacement']}")
    for line in report.get("transposes", []):
        print(f"  contiguous  {line}")
    for line in report.get("left_interleaved", []):
        print(f"  interleaved {line}")
    for where, change in report["renamed_input_dims"].items():
        print(f"  renamed  {where}: {change}")
    for name, layout in layouts.items():
        print(f"  layout   {name}: {layout.describe(chunk)}")
    print(f"  now declares: {_io_line(new)}")
    report["layouts"] = {k: {**v.to_json(), "layout": v.describe(chunk)} for k, v in layouts.items()}
    if guess:
        report["probe_guess"] = guess
    sizes = [batch] if batch is not None else [chunk, 3 * chunk]
    with _staged(args) as stage:
        save(new, stage.model_path, external=has_external_data(args.input) or None)
        saved = load(stage.model_path)
        ok, lines = True, []
        for size in sizes:
            with step(f"verifying at batch {size}"):
                good, more = set_batch_mod.verify(saved, model, report["probe"], size, chunk, layouts)
            ok &= good
            lines += more
        for line in lines:
            print(f"  {'verified' if ok else 'check'}: {line}")
        if not ok:
            print("verification FAILED: nothing written")
            return 1
        report.update({"command": "set-batch", "input": args.input, "output": args.output, "verification": lines})
        _finish(stage, args, report)
    return 0


def cmd_freeze(args) -> int:
    model = load(args.input)
    shapes = parse_named_shapes(args.shape, model, "--shape")
    feeds = probe_feeds(model, shapes)
    new, report = freeze_mod.freeze(model, shapes, feeds)
    print("freeze: " + ", ".join(f"{k} {v}" for k, v in report["inputs"].items()) +
          f"; shape ops {report['shape_ops']['before']} -> {report['shape_ops']['after']}, "
          f"nodes {report['nodes']['before']} -> {report['nodes']['after']}")
    if report["filled_from_probe"]:
        print(f"  {len(report['filled_from_probe'])} shape(s) inference could not derive, declared from the run")
    report["command"] = "freeze"
    return _write_verified(args, new, report, lambda saved: freeze_mod.verify(saved, model, feeds))


COMMANDS = {
    "stage": cmd_stage, "debake": cmd_debake, "audit": cmd_audit, "doctor": cmd_doctor,
    "set-batch": cmd_set_batch, "freeze": cmd_freeze, "fix-dims": cmd_fix_dims,
}
