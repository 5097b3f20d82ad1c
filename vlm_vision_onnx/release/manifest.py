"""`manifest.json` of a release package: what the package is, made from the stage reports and the files.

Nothing in it depends on when or where it was written (no paths of temp folders, no clock), so the
same build folders give the same bytes. Keys:

- `format`, `name`, `family`, `title`, `model` (the config name), `config` (the config file's name)
- `inputs`, `outputs`: [{name, dtype, dims}] with symbolic dims as strings; `symbols`: what they mean
- `opset`: {domain: version} of the fp32 model (`ai.onnx` for the default domain)
- `versions`: torch, transformers, onnx, onnxruntime, ... (from the stage reports; `by_stage` keeps each)
- `weights`: {source: random, seed} or {source: checkpoint, checkpoint, files: {name: {sha256, size}}}
- `export`: {path (torchscript | dynamo), opset, example (the traced pack), tolerance}
- `stages`: per stage its validation numbers (per case, worst over outputs: max_abs, max_rel,
  min_cosine of the flattened output, min_token_cosine of its rows, ok)
- `variants`: per variant its file, stage, size, quantization settings and accuracy against fp32 (fp16: emulated
  float16 storage, `accuracy_vs_fp32`, and on the CPU EP, `accuracy_vs_fp32_cpu_ep`; int8/int4: also on held-out
  real photos, `accuracy_vs_fp32.photos`, and the largest image those checks measured,
  `accuracy_vs_fp32.largest_image_pixels`; the nodes kept fp32, `precision`)
- `smoke`: per smoke size the inputs' shapes and the outputs' shapes of the fp32 model
- `static_buckets` (only when the build has `static-WxH/` folders; `runtime.buckets`): per bucket its size, layout
  (`runtime.buckets`: a Qwen grid_thw, Phi-4's image_size and num_crops), I/O, and per file (fp32, qdq, fp16) its files, size, stage and accuracy as its stage measured it (fp32: against
  the eager model, `accuracy_vs_eager`; qdq and fp16: against the bucket's fp32, `accuracy_vs_fp32`, on photos for
  qdq)
- `files`: {path: {sha256, size}} of every other file of the package (models, data, configs)
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from pathlib import Path

import onnx

from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.errors import UsageError, one_line
from vlm_vision_onnx.families import Family
from vlm_vision_onnx.release.stages import Stage, StaticBucket, Variant, bucket_head
from vlm_vision_onnx.runtime import buckets, path_choice
from vlm_vision_onnx.runtime.verify import FORMAT, io_records, opsets, sha256


def file_record(path: Path) -> dict:
    return {"sha256": sha256(path), "size": path.stat().st_size}


def weights(export: dict) -> dict:
    """Where the weights came from: a checkpoint (path and sha256 of its weight files) or random (seed)."""
    if export.get("weights") != "checkpoint":
        return {"source": "random", "seed": export.get("seed")}
    folder = Path(export["checkpoint"])
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise UsageError(f"checkpoint {folder} of the export holds no *.safetensors now; restore it or re-export")
    return {"source": "checkpoint", "checkpoint": str(folder),
            "files": {f.name: file_record(f) for f in files}}


def versions(stages: dict[str, Stage]) -> dict:
    """Library versions from the stage reports: the first stage that records a library wins in the flat
    view (the export for torch and transformers); `by_stage` keeps every report's own."""
    by_stage = {name: s.report.get("versions", {}) for name, s in stages.items() if s.report.get("versions")}
    flat: dict[str, str] = {}
    for recorded in by_stage.values():
        for lib, version in recorded.items():
            flat.setdefault(lib, version)
    return {**dict(sorted(flat.items())), "by_stage": by_stage}


def _worst(outputs: dict) -> dict:
    """The worst numbers over a case's outputs."""
    records = [r for r in outputs.values() if isinstance(r, dict)]
    worst = {}
    for key in ("max_abs", "max_rel"):
        values = [r[key] for r in records if key in r]
        if values:
            worst[key] = max(values)
    for key, source in (("min_cosine", "cosine"), ("min_token_cosine", "min_token_cosine")):
        values = [r[source] for r in records if r.get(source) is not None]
        if values:
            worst[key] = min(values)
    return worst


def validation(report: dict) -> dict:
    """A stage's validation: its reference, whether it passed, and per case the worst numbers."""
    val = report.get("validation")
    if not isinstance(val, dict):
        return {}
    cases = [{**{k: v for k, v in c.items() if k not in ("outputs", "ok")},  # case name and its facts
              **_worst(c.get("outputs", {})), "ok": c.get("ok")} for c in val.get("cases", [])]
    summary = {k: val[k] for k in ("reference", "passed", "max_abs", "min_cosine", "min_token_cosine") if k in val}
    if "reference" not in summary and report.get("stage") == "export":
        summary["reference"] = "eager PyTorch model"
    return {**summary, "tolerance": report.get("tolerance"), "cases": cases}


def stage_record(stage: Stage) -> dict:
    report = stage.report
    record = {"stage": stage.name, "created": report.get("created")}
    if stage.name == "surgery" and "checks" in report:  # `surgery stage`: the family's checks, then per-case records
        record["surgery"] = {"command": report.get("command"), "checks": [c.get("check") for c in report["checks"]]}
        record["validation"] = validation(report)
    elif stage.name == "surgery":  # a single surgery command (debake) run by hand
        record["surgery"] = {k: report[k] for k in ("command", "fixed", "unfixable") if k in report}
        record["surgery"]["findings"] = len(report.get("findings", []))
        record["verification"] = report.get("verification")
    else:
        record["validation"] = validation(report)
    if "passes" in report:
        record["passes"] = [{k: p.get(k) for k in ("pass", "rewrites", "ok")} for p in report["passes"]]
    return record


#: What reading a stage report's values raises when one is of another kind than the stage writes (a hand-edited
#: or corrupted report.json): turned into one `error:` line naming the reports (`reports_read`).
REPORT_VALUE_ERRORS = (AttributeError, TypeError, KeyError, IndexError, ValueError)


@contextmanager
def reports_read(stages: dict[str, Stage]):
    """Around code that reads the stage reports' values: a value of the wrong kind is bad input (UsageError)."""
    try:
        yield
    except REPORT_VALUE_ERRORS as err:
        names = ", ".join(str(s.folder / "report.json") for s in stages.values())
        raise UsageError(f"a stage report holds a value of another kind than its stage writes ({type(err).__name__}: "
                         f"{one_line(err)[:200]}); re-run the stage, or restore the report ({names})") from None


def check_reports(stages: dict[str, Stage]) -> None:
    """Read what the manifest takes from each report before any work (`reports_read`'s error when one is
    malformed)."""
    with reports_read(stages):
        versions(stages)
        for stage in stages.values():
            stage_record(stage)


def variant_record(variant: Variant, files: dict[str, dict], fp32: Variant, fam: Family, metadata: dict) -> dict:
    """A variant's manifest record; a quantized one's accuracy with the largest image its checks measured
    (`largest_image_pixels`, what `--engine auto` runs it up to: runtime/path_choice.py)."""
    report = variant.stage.report
    own = {path: rec for path, rec in files.items() if variant.owns(path)}
    record = {"name": variant.name, "file": variant.path, "stage": variant.stage.name,
              "files": sorted(own), "size": sum(rec["size"] for rec in own.values())}
    if variant.name == "fp32":
        record["dtype"] = "float32 weights"
        return record
    val = report.get("validation", {})
    record["quantization"] = report.get("config", {})
    record["accuracy_vs_fp32"] = {"reference": f"{fp32.name} ({Path(report.get('input', '')).parent.name or '?'} stage)",
                                  **{k: val[k] for k in ("run", "max_abs", "min_cosine", "min_token_cosine") if k in val}}
    photos = val.get("photos") or {}
    if "min_token_cosine" in photos:  # int8/int4: on held-out real photos (quantize/photo_check.py)
        record["accuracy_vs_fp32"]["photos"] = {k: photos[k] for k in ("photos", "sizes", "max_abs", "min_token_cosine")}
    measured = path_choice.measured_pixels(fam, metadata, val)
    if measured is not None:
        record["accuracy_vs_fp32"]["largest_image_pixels"] = measured
    if "cpu_execution_provider" in report:  # fp16: the figures above are emulated float16 storage
        cpu_ep = report["cpu_execution_provider"]
        record["accuracy_vs_fp32_cpu_ep"] = {k: cpu_ep[k] for k in ("run", "max_abs", "min_cosine", "min_token_cosine")
                                             if k in cpu_ep}
    if variant.folder == "openvino":  # checked in OpenVINO at the precision of --engine openvino there
        record["accuracy_vs_fp32"]["engine"] = val.get("engine")
    if "precision" in report:
        precision = report["precision"]
        record["precision"] = {"fp16_nodes": precision.get("fp16_nodes"),
                               "fp32_nodes": [{k: n.get(k) for k in ("node", "op", "reason")}
                                              for n in precision.get("fp32_nodes", [])]}
    for key in ("quantized_nodes", "size_ratio", "outlier_stress"):
        if key in report:
            record[key] = report[key]
    return record


#: The figures of a stage's check kept in the manifest.
FIGURES = ("run", "finite", "max_abs", "min_cosine", "min_token_cosine")
#: Checks of the qnn stage (quantize/qnn.py) beside its gate on photos.
QNN_CHECKS = ("photos", "calibration_photos", "random_layouts")


def _figures(check: dict) -> dict:
    record = {k: check[k] for k in FIGURES if k in check}
    if check.get("cases"):
        record["cases"] = [c.get("case") for c in check["cases"] if isinstance(c, dict)]
    return record


def static_record(bucket: StaticBucket, files: dict[str, dict], fp32_proto: onnx.ModelProto) -> dict:
    """A static bucket's record (see the module docstring): `bucket_head`, the fp32 file's I/O, and per variant its
    files, size, stage and accuracy."""
    record = bucket_head(bucket)
    record["inputs"], record["outputs"] = io_records(fp32_proto.graph.input), io_records(fp32_proto.graph.output)
    fp32 = bucket.variants[0]
    for entry, variant in zip(record["variants"], bucket.variants):
        report = variant.stage.report
        own = {path: rec for path, rec in files.items() if variant.owns(path)}
        entry.update(files=sorted(own), size=sum(rec["size"] for rec in own.values()),
                     stage=f"{variant.stage.folder.parent.name}/{variant.stage.name}")
        if variant is fp32:
            entry["accuracy_vs_eager"] = validation(report)
            continue
        val = report.get("validation", {})
        entry["quantization"] = report.get("config", {})
        accuracy = {"reference": f"fp32 ({fp32.path})", **_figures(val)}
        accuracy.update({k: _figures(val[k]) for k in QNN_CHECKS if isinstance(val.get(k), dict)})
        if "min_token_cosine" not in accuracy and "min_token_cosine" in report:  # qnn: its gate, on photos
            accuracy["min_token_cosine"] = report["min_token_cosine"]
        entry["accuracy_vs_fp32"] = accuracy
        if "cpu_execution_provider" in report:  # fp16: the figures above are emulated float16 storage
            entry["accuracy_vs_fp32_cpu_ep"] = _figures(report["cpu_execution_provider"])
    return record


def build(name: str, fam: Family, stages: dict[str, Stage], chosen: list[Variant], fp32_proto: onnx.ModelProto,
          smoke: list[dict], files: dict[str, dict], static: list[tuple[StaticBucket, onnx.ModelProto]] = ()) -> dict:
    """The manifest (see the module docstring); `static`: each static bucket with its fp32 file's proto."""
    export = stages["export"].report
    static_records = {buckets.KEY: [static_record(b, files, proto) for b, proto in static]} if static else {}
    return {
        "format": FORMAT,
        "name": name,
        "family": fam.name,
        "title": fam.title,
        "model": export.get("model"),
        "config": Path(export.get("config", "")).name,
        "inputs": io_records(fp32_proto.graph.input),
        "outputs": io_records(fp32_proto.graph.output),
        "symbols": fam.dims,
        "opset": opsets(fp32_proto),
        "versions": versions(stages),
        "weights": weights(export),
        "export": {"path": export.get("exporter"), "opset": export.get("opset"),
                   "example": export.get("example"), "tolerance": export.get("tolerance")},
        "stages": [stage_record(s) for s in stages.values()],
        "variants": [variant_record(v, files, chosen[0], fam, onnx_io.metadata_of(fp32_proto)) for v in chosen],
        "smoke": smoke,
        **static_records,
        "files": dict(sorted(files.items())),
    }


def add_speed(manifest: dict, build: Path, chosen: list[Variant]) -> None:
    """Add `speed` from BUILD/speed/report.json (`python -m release speed`) for the variants whose stage
    is the one that was timed; nothing when there is no such report."""
    path = build / "speed" / "report.json"
    if not path.is_file():
        return
    try:
        report = json.loads(path.read_text())
        results = report["results"]
    except (OSError, ValueError, KeyError, TypeError):
        raise UsageError(f"{path} is not a speed report; remove it or re-run `python -m release speed`") from None
    timed = {}
    for v in chosen:
        result = results.get(v.stage.name)
        if result and result.get("stage_created") == v.stage.report.get("created"):
            timed[v.name] = {"median_s": result["median_s"], "runs_s": result["runs_s"]}
    if timed:
        manifest["speed"] = {k: report.get(k) for k in ("size", "threads", "reps", "machine")}
        manifest["speed"]["variants"] = timed
