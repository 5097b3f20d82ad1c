"""`python -m bench.runtimes --build build/qwen3-vl-2b`: the same files in two ONNX Runtime versions and OpenVINO.

On the stage folders of one `make export` (optimized = the fp32 variant, int8, int4), in groups of variants that
are open at once and interleaved (all at once do not fit in 24 GB; each group holds ORT fp32, the reference):
group `runtimes` at each `--layout` (default: one 448x448 image and a 448x448 + 336x336 pack, random pixels on the
grids Qwen's processor gives; 1024x1024 on request) and each `--threads` count; groups `standard` and `baseline` at
448x448, one thread, unless `--layout` / `--threads` are given.
`--reps` rounds after a warm-up; the variants:
  ORT fp32 / INT8 / INT4         the shipped variants in this venv's ONNX Runtime (its version in the results)
  ORT X.Y.Z fp32 / INT8 / INT4   the same files in another ONNX Runtime version (`--ort-other DIR`: a folder
                                 holding it, `pip install --target DIR onnxruntime==X.Y.Z`), in a worker process
  OV f32 / bf16 fp32 file        OpenVINO on the fp32 file at each inference precision
  OV f32 / bf16 INT8 file        OpenVINO on the INT8 file
  ... standard file              when BUILD/standard holds `make export OPS=standard`: that export (ai.onnx ops
                                 only) in ONNX Runtime and OpenVINO
  ... (baseline)                 with `--baseline DIR`: ORT on another build of the same model (the files
                                 before a change), for a no-regression check in the same run
Each variant's accuracy: min per-token cosine of its outputs against ORT fp32 at that layout. With
`--accuracy`, OpenVINO f32 and bf16 on the fp32 file also run at every validation layout of the optimized
stage's report (the numbers behind `core.engine`'s default precision). Every runtime install lives in its own
worker process (`bench.runtime_worker`), so versions that cannot share a process are timed in one run.
Writes bench/results/runtimes[-SUFFIX].json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.timing import grid_for, load_average, patch_of, pixels, write_results
from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.machine import describe, machine
from vlm_vision_onnx.core.parity import min_token_cosine
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.release.variants import ALWAYS

ROOT = Path(__file__).resolve().parents[1]
TAG = "runtimes"
LAYOUTS = {"448x448": [(448, 448)], "448x448 + 336x336": [(448, 448), (336, 336)], "1024x1024": [(1024, 1024)]}
#: The runtimes group's layouts when no --layout is given (the other groups': 448x448).
DEFAULT_LAYOUTS = ["448x448", "448x448 + 336x336"]
REFERENCE = "ORT fp32"


class Worker:
    """One `bench.runtime_worker` process (env: extra PYTHONPATH for another runtime install)."""

    def __init__(self, pythonpath: str | None = None):
        env = dict(os.environ)
        paths = [p for p in (pythonpath, str(ROOT), env.get("PYTHONPATH")) if p]
        env["PYTHONPATH"] = os.pathsep.join(paths)
        self.process = subprocess.Popen([sys.executable, "-m", "bench.runtime_worker"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT)

    def ask(self, **command) -> dict:
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker died on {command}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise RuntimeError(f"{command}: {answer['error']}")
        return answer

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait(timeout=120)


def ort_version(folder: Path | None = None) -> str:
    """The version of the onnxruntime in this venv, or of the one installed into `folder` (pip install --target)."""
    from importlib import metadata

    if folder is None:
        return metadata.version("onnxruntime")
    found = [d.version for d in metadata.distributions(path=[str(folder)]) if d.metadata["Name"] == "onnxruntime"]
    if not found:
        raise SystemExit(f"--ort-other {folder}: no onnxruntime installed there (pip install --target {folder} "
                         "onnxruntime==X.Y.Z)")
    return found[0]


def variant_groups(build: Path, baseline: Path | None, other: str | None) -> dict[str, dict[str, dict]]:
    """{group: {label: {worker, engine, file, precision}}} (worker 'base': this venv, 'other': ORT `other`, a
    version). A group's variants are open at once and interleaved; every group holds the reference (ORT fp32), so its cosines
    and speed-ups are against the same outputs. Groups keep memory bounded: all 2B sessions at once do not fit
    in 24 GB (measured: the worker was killed at 21 GB)."""
    files = {stage: onnx_io.model_path(build / stage) for stage in ALWAYS
             if (build / stage).is_dir() or stage == "optimized"}  # int8 / int4 only where the build has them
    names = {"optimized": "fp32", "int8": "INT8", "int4": "INT4"}
    ours = {f"ORT {names[s]}": {"worker": "base", "engine": "onnxruntime", "file": f} for s, f in files.items()}
    reference = {REFERENCE: ours[REFERENCE]}
    runtimes = dict(ours)
    if other:
        runtimes.update({f"ORT {other} {names[s]}": {"worker": "other", "engine": "onnxruntime", "file": f}
                         for s, f in files.items()})
    for stage in [s for s in ("optimized", "int8") if s in files]:
        for precision in ("f32", "bf16"):
            runtimes[f"OV {precision} {names[stage]} file"] = {"worker": "base", "engine": "openvino",
                                                                "file": files[stage], "precision": precision}
    groups = {"runtimes": runtimes}
    if (build / "standard" / "report.json").is_file():  # `make export OPS=standard`
        standard = onnx_io.model_path(build / "standard")
        groups["standard"] = {**reference, "ORT standard file": {"worker": "base", "engine": "onnxruntime",
                                                                      "file": standard}}
        for precision in ("f32", "bf16"):
            groups["standard"][f"OV {precision} standard file"] = {"worker": "base", "engine": "openvino",
                                                                   "file": standard, "precision": precision}
    if baseline is not None:
        groups["baseline"] = {**ours, **{f"ORT {names[s]} (baseline)": {
            "worker": "base", "engine": "onnxruntime", "file": onnx_io.model_path(baseline / s)} for s in files}}
    return groups


def layout_feeds(layout: list[tuple[int, int]], patch_dim: int, folder: Path, name: str) -> Path:
    grid = [g for h, w in layout for g in grid_for(h, w, patch_of(patch_dim))]
    path = folder / f"{name}.npz"
    np.savez(path, **pixels(grid, 0, patch_dim))
    return path


def min_cosine(a: Path, b: Path) -> float:
    with np.load(a) as x, np.load(b) as y:
        return min(min_token_cosine(x[k], y[k]) for k in y.files)


def time_point(workers: dict, specs: dict, threads: int, feeds: Path, reps: int, tmp: Path) -> dict:
    """Open every variant at `threads`, warm and check it, then `reps` interleaved rounds; close them."""
    for label, spec in specs.items():
        workers[spec["worker"]].ask(open=label, engine=spec["engine"], file=str(spec["file"]), threads=threads,
                                    precision=spec.get("precision"))
    outs = {label: tmp / f"out-{i}.npz" for i, label in enumerate(specs)}
    for label, spec in specs.items():
        workers[spec["worker"]].ask(run=label, feeds=str(feeds), out=str(outs[label]))
    times = {label: [] for label in specs}
    for _ in range(reps):
        for label, spec in specs.items():
            times[label].append(workers[spec["worker"]].ask(run=label, feeds=str(feeds), out=None)["seconds"])
    for label, spec in specs.items():
        workers[spec["worker"]].ask(close=label)
    return {label: {"median_s": statistics.median(t), "times_s": [round(x, 4) for x in t],
                    "min_token_cosine": min_cosine(outs[label], outs[REFERENCE])} for label, t in times.items()}


def reference_point(worker: Worker, standard: Path, feeds: Path, tmp: Path) -> dict:
    """One run of the ONNX reference evaluator on the standard export (numpy; slow, so not interleaved), and its
    min per-token cosine against ORT fp32 on the same feeds."""
    worker.ask(open="reference", engine="reference", file=str(standard))
    seconds = worker.ask(run="reference", feeds=str(feeds), out=str(tmp / "reference.npz"))["seconds"]
    worker.ask(close="reference")
    return {"seconds": seconds, "min_token_cosine": min_cosine(tmp / "reference.npz", tmp / "out-0.npz")}


def accuracy_at_validation_layouts(worker: Worker, fp32: Path, tmp: Path) -> list[dict]:
    """OpenVINO f32 and bf16 against ORT fp32 at every validation layout of the fp32 stage's report."""
    from vlm_vision_onnx.families import of_model
    from vlm_vision_onnx.families import validation as layouts_mod

    metadata = onnx_io.metadata(fp32)
    family = of_model(metadata, fp32)
    layouts = layouts_mod.layouts_for(fp32, metadata, family)
    specs = {"ort": ("onnxruntime", None), "f32": ("openvino", "f32"), "bf16": ("openvino", "bf16")}
    for label, (engine, precision) in specs.items():
        worker.ask(open=label, engine=engine, file=str(fp32), threads=None, precision=precision)
    rows = []
    for i, (layout, feeds) in enumerate(zip(layouts, layouts_mod.layout_inputs(family, layouts, metadata))):
        path = tmp / f"validation-{i}.npz"  # a path per layout: the worker caches feeds by path
        np.savez(path, **feeds)
        for label in specs:
            worker.ask(run=label, feeds=str(path), out=str(tmp / f"v-{label}.npz"))
        rows.append({"case": layout["case"], **{p: min_cosine(tmp / f"v-{p}.npz", tmp / "v-ort.npz")
                                                 for p in ("f32", "bf16")}})
        say(f"{layout['case']}: OpenVINO f32 {rows[-1]['f32']:.6f}, bf16 {rows[-1]['bf16']:.6f}", TAG)
    for label in specs:
        worker.ask(close=label)
    return rows


def markdown(result: dict) -> str:
    lines = ["# The same files in ONNX Runtime and OpenVINO", "",
             (f"Produced by `python -m bench.runtimes {result['argv']}`, {result['started']} – {result['finished']}. "
              f"Machine: {describe(result['machine'])} (load average {result['load_average_start']} at start). "
              f"Model: {result['model']} (random weights), stage folders of `make export`. ORT: this venv's "
              f"onnxruntime {result['onnxruntime']}. Medians of "
              f"{result['reps']} rounds, every variant interleaved with the others; cosine: min per-token cosine "
              f"against {REFERENCE} at that layout; × = speed-up over {REFERENCE}."), ""]
    for point in result["points"]:
        lines += [f"## {point['group']}: {point['layout']}, {point['threads']} thread(s)", "",
                  f"| variant | median (s) | × vs {REFERENCE} | min per-token cosine |", "|---|---:|---:|---:|"]
        base = point["variants"][REFERENCE]["median_s"]
        for label, v in point["variants"].items():
            lines.append(f"| {label} | {v['median_s']:.3f} | {base / v['median_s']:.2f}× | "
                         f"{v['min_token_cosine']:.5f} |")
        lines.append("")
    if result.get("reference"):
        r = result["reference"]
        lines += ["## The ONNX reference evaluator on the standard export", "",
                  (f"One run at {r['layout']} (numpy, as many threads as its BLAS takes): {r['seconds']:.1f} s, min "
                   f"per-token cosine {r['min_token_cosine']:.6f} against {REFERENCE}."), ""]
    if result.get("accuracy"):
        rows = result["accuracy"]
        lines += ["## OpenVINO on the fp32 file at every validation layout", "",
                  f"{len(rows)} layouts of the optimized stage's report; min per-token cosine against ONNX Runtime fp32.",
                  "", "| layout | OV f32 | OV bf16 |", "|---|---:|---:|"]
        lines += [f"| {r['case']} | {r['f32']:.6f} | {r['bf16']:.6f} |" for r in rows]
        lines += ["", f"Worst: f32 {min(r['f32'] for r in rows):.6f}, bf16 {min(r['bf16'] for r in rows):.6f}.", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.runtimes", description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=Path, required=True, help="build/MODEL of `make export`")
    parser.add_argument("--baseline", type=Path, help="another build of the same model, timed as '(baseline)'")
    parser.add_argument("--ort-other", "--ort-next", type=Path, dest="ort_other",
                        help="a folder holding another onnxruntime version (pip install --target DIR onnxruntime==X.Y.Z)")
    parser.add_argument("--layout", action="append", choices=sorted(LAYOUTS), help="default: all")
    parser.add_argument("--threads", type=int, nargs="+", help="default: 1 and 2 (runtimes), 1 (other groups)")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--accuracy", action="store_true", help="also OpenVINO at every validation layout")
    parser.add_argument("--reference", action="store_true",
                        help="also one run of the ONNX reference evaluator on BUILD/standard at 448x448")
    parser.add_argument("--groups", nargs="+", choices=("runtimes", "standard", "baseline"),
                        help="only these groups of variants (default: every group the folders allow)")
    parser.add_argument("--suffix", default="", help="results file suffix (runtimes-SUFFIX.json)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    argv_shown = " ".join(sys.argv[1:] if argv is None else argv)
    fp32 = onnx_io.model_path(args.build / "optimized")
    metadata = onnx_io.metadata(fp32)
    patch_dim = int(onnx_io.read_proto(fp32).graph.input[0].type.tensor_type.shape.dim[1].dim_value)
    result = {"argv": argv_shown, "machine": machine(), "model": metadata.get("model"), "reps": args.reps,
              "load_average_start": load_average(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "points": [],
              "onnxruntime": ort_version()}
    other = ort_version(args.ort_other) if args.ort_other is not None else None
    result["onnxruntime_other"] = other
    groups = variant_groups(args.build, args.baseline, other)
    specs = groups["runtimes"]
    if args.groups:
        groups = {name: group for name, group in groups.items() if name in args.groups}
    workers = {"base": Worker()}
    if args.ort_other is not None:
        workers["other"] = Worker(str(args.ort_other))
    try:
        with tempfile.TemporaryDirectory(prefix="bench-runtimes-") as tmp:
            tmp = Path(tmp)
            for group, specs in groups.items():
                # the runtimes at every layout and thread count; the standard file and the baseline where the
                # issue asks for them (448x448, one thread) unless told
                layouts = args.layout or (DEFAULT_LAYOUTS if group == "runtimes" else ["448x448"])
                for name in layouts:
                    feeds = layout_feeds(LAYOUTS[name], patch_dim, tmp, name.replace(" ", ""))
                    for threads in args.threads or ([1, 2] if group == "runtimes" else [1]):
                        say(f"{group}: {name}, {threads} thread(s): {len(specs)} variants ...", TAG)
                        point = time_point(workers, specs, threads, feeds, args.reps, tmp)
                        result["points"].append({"group": group, "layout": name, "threads": threads,
                                                 "variants": point})
                        for label, v in point.items():
                            say(f"  {label}: {v['median_s']:.3f} s, cosine {v['min_token_cosine']:.5f}", TAG)
            standard = args.build / "standard"
            if args.reference and (standard / "report.json").is_file():
                feeds = layout_feeds(LAYOUTS["448x448"], patch_dim, tmp, "reference")
                point = time_point(workers, {REFERENCE: specs[REFERENCE]}, 1, feeds, 1, tmp)  # out-0.npz: ORT
                result["reference"] = {"layout": "448x448", **reference_point(workers["base"],
                                                                            onnx_io.model_path(standard), feeds, tmp)}
                say(f"reference evaluator, 448x448: {result['reference']['seconds']:.1f} s, cosine "
                    f"{result['reference']['min_token_cosine']:.6f} (ORT fp32 {point[REFERENCE]['median_s']:.2f} s)", TAG)
            if args.accuracy:
                result["accuracy"] = accuracy_at_validation_layouts(workers["base"], fp32, tmp)
    finally:
        for worker in workers.values():
            worker.close()
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    stem = "runtimes" + (f"-{args.suffix}" if args.suffix else "")
    write_results(args.out, stem, result, markdown(result), TAG)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
