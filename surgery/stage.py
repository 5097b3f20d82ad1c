"""`python -m surgery stage IN OUT`: the surgery stage of `make export` — the checks the model's family
declares (`Family.surgery_checks`), then OUT checked against IN at every validation layout.

Checks:
- debake (Qwen3-VL): grid-baked shape constants -> subgraphs of grid_thw (`surgery.debake`), verified at
  the export grid and another one; unfixable constants fail the stage;
- audit (Qwen3-VL): no grid-specific constant remains in OUT (`surgery.audit`);
- claims (every family): at every validation layout the declared dims of the inputs and outputs hold
  (static dims equal, one symbol one size: `surgery.probe.stale` / `conflicts`).
Then, when a check rewrote the graph, OUT runs against IN at every layout (IN's tolerance).

Layouts are those of IN's own report (`families.validation`), else the family's defaults. OUT is a folder
(model.onnx + report.json) or a `.onnx` file with report.json beside it; the report is self-contained:
family, I/O contract, tolerance, the checks, and `validation.cases` with each case's layout and results.
Exit 0 all checks pass, 1 a check fails (nothing written), 2 bad input.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_ir as ir

from surgery import audit as audit_mod
from surgery import debake as debake_mod
from surgery.grid import resolve_grid
from surgery.probe import conflicts, declared, describe_conflict, stale
from surgery.run import fmt_dims
from vlm_vision_onnx.core import onnx_io, parity, stage_outputs
from vlm_vision_onnx.core import report as reports
from vlm_vision_onnx.core.errors import CheckFailed
from vlm_vision_onnx.core.parity import DEFAULT_TOLERANCE
from vlm_vision_onnx.core.progress import say, step
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.core.staging import StagedFile
from vlm_vision_onnx.families import Family, check_graph_inputs, of_model, validation


def io_claims(model: ir.Model, layouts: list[dict], inputs: list[dict], outputs: list[list[np.ndarray]]) -> list[str]:
    """One line per declared input/output dim that a layout contradicts ([] when every claim holds)."""
    decl = {k: d for k, d in declared(model).items() if d.role in ("input", "output")}
    names = [v.name for v in model.graph.outputs]
    problems = []
    for layout, feed, produced in zip(layouts, inputs, outputs):
        real = {k: (tuple(v.shape), v.dtype) for k, v in feed.items()}
        real.update({k: (tuple(v.shape), v.dtype) for k, v in zip(names, produced)})
        problems += [f"{layout['case']}: {s['role']} '{s['tensor']}' declares {s['declared']} but is {s['real']} "
                     f"({s['why']})" for s in stale(decl, real)]
        problems += [f"{layout['case']}: {describe_conflict(c)}" for c in conflicts(decl, real)]
    return problems


def _debake(model: ir.Model, source: Path, staged: Path) -> tuple[ir.Model, dict]:
    """Debake against the export grid of the metadata; write the result to `staged` and verify it."""
    grid = resolve_grid(model, None, None)
    debake_mod.grid_inputs(model, "pixel_values", "grid_thw")
    with step("debake: looking for grid constants"):
        new, found = debake_mod.debake(model, grid)
    for f in found["findings"]:
        say(f"  {'fixed' if f['fixable'] else 'unfixable'}: {f['message']}")
    if found["unfixable"]:
        raise CheckFailed(f"debake: {found['unfixable']} grid constant(s) cannot be computed from grid_thw "
                          "(re-export them computed from grid_thw); nothing written")
    debake_mod.record_grid(new, grid)
    with step("write"):
        onnx_io.save(new, staged, external=onnx_io.has_external_data(source) or None)
    verification = debake_mod.verify(source, staged, model, grid, bool(found["fixed"]), 0)
    if not verification["ok"]:
        raise CheckFailed("debake: " + "; ".join(line for line in verification["lines"] if "FAILED" in line))
    record = {"check": "debake", "grid": grid.to_json(), "fixed": found["fixed"],
              "findings": [f["message"] for f in found["findings"]], "verification": verification["lines"]}
    return new, record


def _audit(model: ir.Model) -> dict:
    found = audit_mod.audit(model, resolve_grid(model, None, None))
    if not found["clean"]:
        raise CheckFailed(f"audit: {len(found['findings'])} grid-specific constant(s) remain: "
                          f"{found['findings'][0]['message']}")
    return {"check": "audit", "clean": True, "collisions": found["collisions"]}


def run(source: Path, staged: StagedFile) -> dict:
    """IN -> OUT (`staged`: the model and its self-contained report); returns the report. CheckFailed
    (nothing written) when a check fails."""
    timings: dict[str, float] = {}
    graph = onnx_io.read_proto(source)  # metadata and inputs, no weights
    metadata = {p.key: p.value for p in graph.metadata_props}
    family: Family = of_model(metadata, source)
    check_graph_inputs(family, graph.graph, source)
    del graph
    layouts = validation.layouts_for(source, metadata, family)
    inputs = validation.layout_inputs(family, layouts, metadata)
    tolerance = float(reports.read_beside(source).get("tolerance", DEFAULT_TOLERANCE))
    say(f"surgery stage of a {family.name} model: checks {', '.join(family.surgery_checks)}; "
        f"{len(layouts)} validation layouts")
    checks = []
    with staged as stage:
        model = onnx_io.load(source)
        changed = False
        if "debake" in family.surgery_checks:
            model, record = _debake(model, source, stage.model_path)
            changed = bool(record["fixed"])
            checks.append(record)
        else:
            with step("copy IN"):
                onnx_io.copy_model(source, stage.dir, stage.model_path.name)
        if "audit" in family.surgery_checks:
            checks.append(_audit(model))
        with step(f"run OUT at {len(layouts)} layouts", timings):
            produced = parity.run_all(open_session(stage.model_path), inputs)
        if "claims" in family.surgery_checks:
            problems = io_claims(model, layouts, inputs, produced)
            if problems:
                raise CheckFailed(f"claims: {len(problems)} declared dim(s) contradicted, first: {problems[0]}")
            io_dims = {d.name: fmt_dims(d.dims or ()) for d in declared(model).values() if d.role != "value_info"}
            checks.append({"check": "claims", "holds": True, "declared": io_dims})
            say(f"  claims: every declared input/output dim holds at {len(layouts)} layouts")
        output_names = [v.name for v in model.graph.outputs]
        del model
        if changed:
            with step(f"run IN at {len(layouts)} layouts (the reference)", timings):
                reference = parity.run_all(open_session(source), inputs)
            cases = parity.check_outputs(output_names, layouts, produced, reference, tolerance)
            reference_name = "input model in ONNX Runtime"
        else:  # nothing to compare: record what OUT produced at each layout
            cases = [parity.case_record(lay["case"], {n: {"shape": list(o.shape)} for n, o in zip(output_names, out)},
                                        **{k: v for k, v in lay.items() if k != "case"})
                     for lay, out in zip(layouts, produced)]
            reference_name = "none: OUT is IN's graph unchanged (output shapes recorded)"
        report = {
            "command": "stage", "input": str(source), "model": metadata.get("model"), "family": family.name,
            "weights": metadata.get("weights"),
            "io": {"inputs": list(family.input_names), "outputs": family.output_names(metadata), "dims": family.dims},
            "tolerance": tolerance, "checks": checks,
            "validation": {"reference": reference_name, "passed": all(c["ok"] for c in cases), "cases": cases},
            "files": onnx_io.file_sizes(stage.model_path), **reports.footer(timings),
        }
        if not report["validation"]["passed"]:
            failed = [c["case"] for c in cases if not c["ok"]]
            raise CheckFailed(f"OUT differs from IN beyond tolerance at {', '.join(failed)}; nothing written")
        stage_outputs.write(stage.dir, stage.model_path, inputs, produced)  # the optimize stage's reference
        stage.commit({"stage": "surgery", **report})
    say(f"wrote {staged.out} (report: {staged.report_path})")
    return report
