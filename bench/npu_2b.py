"""`python -m bench.npu_2b`: one static bucket at published dims, on the CPU and on Qualcomm's HTP simulator, one run.

Per model (`--models`, default Qwen3-VL-2B and Qwen2.5-VL-3B's tower, random weights) at one size (`--size`,
default 448x448), with the stage folders `make export STATIC=WxH` writes (made here when missing, by the same
commands: `builders.vision --static`, `quantize qnn`; the dynamic export by `builders.vision`):

1. **speed** in ONNX Runtime CPU fp32: the static export against the dynamic export (BUILD/MODEL/export) on the
   same pixel_values (the timing photo resized to the bucket; the dynamic model gets the bucket's grid_thw),
   interleaved, `--reps` rounds at `--threads` threads; the two outputs' max abs difference on that photo;
2. **the HTP simulator** (`runtime npu-check`, CPU fallback disabled): the fp32 export at HTP fp16 precision and
   the A16W8 QDQ stage (`--htp`: which of the two), min per-token cosine against the CPU EP's fp32 on `--photos` of
   npu-check's photos; the context binary's size, compile and load time. The simulator is slow at these dims:
   Qwen3-VL-2B at 448 x 448 took minutes per compile and about 15 minutes per photo at fp16 precision on 2 cores,
   and the tiny models ran 3-14x longer in QDQ (bench/results/npu-tiny.md).

Writes RESULTS/npu-2b.json and npu-2b.md. The simulator's times are this x86 machine simulating the NPU, not a
device's speed; the speed phase runs first, alone, and nothing else should run while it does.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from bench.timing import TIMING_PHOTO, interleaved, load_average
from core import onnx_io
from core.machine import describe, machine
from core.progress import say

DEFAULT = ("qwen3-vl-2b", "qwen2.5-vl-3b")
RESULTS = Path(__file__).parent / "results"
TAG = "npu-2b"


def _run(*args: str) -> None:
    say("python -m " + " ".join(args), TAG)
    subprocess.run([sys.executable, "-m", *args], check=True)


def stages(build: Path, model: str, size: str, make: tuple[str, ...]) -> dict[str, Path]:
    """The stage folders (dynamic, static, qnn), those in `make` made by their command when their model.onnx is
    missing."""
    static = build / model / f"static-{size}"
    folders = {"dynamic": build / model / "export", "static": static / "export", "qnn": static / "qnn"}
    commands = {"dynamic": ("builders.vision", "--model", model, "--out", str(folders["dynamic"])),
                "static": ("builders.vision", "--model", model, "--static", size, "--out", str(folders["static"])),
                "qnn": ("quantize", "qnn", str(folders["static"]), str(folders["qnn"]))}
    for name, folder in folders.items():
        if name in make and not (folder / "model.onnx").exists():
            _run(*commands[name])
    return folders


def photo_feeds(folders: dict[str, Path]) -> dict[str, dict[str, np.ndarray]]:
    """The timing photo at the bucket: {static: {pixel_values}, dynamic: {pixel_values, grid_thw}}."""
    import skimage.data

    from families.qwen_vl import static_inputs

    proto = onnx_io.read_proto(folders["static"] / "model.onnx")
    metadata = {p.key: p.value for p in proto.metadata_props}
    values = static_inputs.pixels(getattr(skimage.data, TIMING_PHOTO)(), metadata)
    grid = np.array([static_inputs.static_grid(metadata)], dtype=np.int64)
    return {"static": {"pixel_values": values}, "dynamic": {"pixel_values": values, "grid_thw": grid}}


def speed(folders: dict[str, Path], threads: int, reps: int) -> dict:
    """ORT CPU fp32, static against dynamic, interleaved: medians, rounds, the outputs' max abs difference."""
    feeds = photo_feeds(folders)
    sessions = {}
    for name in ("static", "dynamic"):
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        sessions[name] = ort.InferenceSession(str(folders[name] / "model.onnx"), options,
                                              providers=["CPUExecutionProvider"])
    outputs = {name: sessions[name].run(None, feeds[name]) for name in sessions}
    diff = max(float(np.abs(a - b).max()) for a, b in zip(outputs["static"], outputs["dynamic"]))
    say(f"timing static and dynamic, {reps} interleaved rounds at {threads} threads", TAG)
    timed = interleaved({name: (lambda s=sessions[name], f=feeds[name]: s.run(None, f)) for name in sessions}, reps)
    return {"threads": threads, "reps": reps, "photo": TIMING_PHOTO, "max_abs_static_vs_dynamic": diff,
            "tokens": int(outputs["static"][0].shape[0]), **timed,
            "static_speedup": timed["dynamic"]["median_s"] / timed["static"]["median_s"]}


def htp(folders: dict[str, Path], photos: int, which: list[str], work: Path) -> dict:
    """`runtime npu-check` on the fp32 export (HTP fp16 precision) and the QDQ stage: their records."""
    import skimage.data
    from PIL import Image

    from runtime.npu import PHOTOS

    images = []
    for name in PHOTOS[:photos]:
        images.append(work / f"{name}.png")
        Image.fromarray(getattr(skimage.data, name)()).save(images[-1])
    records = {}
    for name in which:
        report = work / f"npu-{name}.json"
        _run("runtime", "npu-check", str(folders[name]), "--images", *map(str, images), "--json", str(report),
             "--context-dir", str(work / f"context-{name}"))
        records[name] = json.loads(report.read_text())["npu_check"][0]
    return records


def _htp_cells(h: dict) -> list[str]:
    """Per variant (fp32 at HTP fp16 precision, A16W8 QDQ): cosine, context MiB, compile / load s, run s."""
    cells = []
    for name in ("static", "qnn"):
        r = h.get(name)
        if r is None:
            cells += ["not run"] * 4
            continue
        cells += [f"{r['min_token_cosine']:.5f}", f"{sum(r['context']['binaries'].values()) / 2**20:.0f}",
                  f"{r['context_compile_s']:.0f} / {r['context_load_s']:.0f}", f"{r['htp_run_s']:.0f}"]
    return cells


def table(rows: list[dict]) -> str:
    lines = [("| model | size | tokens | ORT CPU fp32: static s | dynamic s | static speed-up | max abs static vs "
              "dynamic | A16W8 QDQ on the CPU EP (qnn stage, 4 photos) | HTP fp16 precision: cosine | context MiB | "
              "compile / load s | run s | HTP A16W8 QDQ: cosine | context MiB | compile / load s | run s |"),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        s = r["speed"]
        cells = [f"`{r['model']}`", r["size"], str(s["tokens"]), f"{s['static']['median_s']:.2f}",
                 f"{s['dynamic']['median_s']:.2f}", f"{s['static_speedup']:.2f}x",
                 f"{s['max_abs_static_vs_dynamic']:.1e}",
                 f"{r['qnn_cpu_photos']:.5f}" if "qnn_cpu_photos" in r else "not run", *_htp_cells(r.get("htp", {}))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(found: dict) -> str:
    records = [r for row in found["rows"] for r in row.get("htp", {}).values()]
    photos = ", ".join(records[0]["photos"]) if records else "no photo"
    return (f"# One static bucket at published dims: CPU speed and the HTP simulator\n\n"
            f"`python -m bench.npu_2b` ({found['started']}"
            + (f", resumed after the speed phase at {found['resumed']} (`--resume`)" if "resumed" in found else "")
            + f", {describe(found['machine'])}; onnxruntime "
            f"{found['onnxruntime']}, onnxruntime-qnn 2.7.0, soc 60, HTP v73). Random weights at the published "
            "dims.\n\n"
            f"- **Speed**: ONNX Runtime CPU fp32, the static export against the dynamic export on the same "
            f"pixel_values ({found['rows'][0]['speed']['photo'] if found['rows'] else ''} resized to the bucket), "
            "interleaved rounds, medians; nothing else ran during this phase. The A16W8 CPU EP figure is `quantize qnn`'s "
            "own check (its 4 held-out photos).\n"
            f"- **HTP simulator**: `runtime npu-check` with CPU fallback disabled (every node on the HTP) on "
            f"{photos}, run on the context binary loaded back; min per-token cosine against the CPU EP's fp32. "
            "**Compile, load and run times are Qualcomm's simulator on this x86 machine (2 cores, shared with other "
            "work during this phase), not a device's speed.** \"not run\": left out of this run (`--htp`, `--no-qnn-stage`; why: docs/npu.md, "
            "\"At published dims\").\n\n" + table(found["rows"]) + "\n")


def save(results: Path, found: dict, rows: list[dict], resume: bool) -> dict:
    """Write npu-2b.json; returns what was written. A --resume run replaces only its own models' rows in the file as
    it is now, so that two resumed runs of different --models (hours each in the simulator) can run side by side."""
    if resume and (results / "npu-2b.json").exists():
        mine = {r["model"]: r for r in rows}
        on_disk = json.loads((results / "npu-2b.json").read_text())
        found = {**found, "rows": [mine.pop(r["model"], r) for r in on_disk["rows"]] + list(mine.values())}
    (results / "npu-2b.json").write_text(json.dumps(found, indent=1) + "\n")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.npu_2b", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT))
    parser.add_argument("--size", default="448x448", metavar="WxH")
    parser.add_argument("--build", type=Path, default=Path("build"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--photos", type=int, default=1, help="npu-check photos per model (the simulator is slow)")
    parser.add_argument("--htp", nargs="+", choices=("static", "qnn"), default=["static", "qnn"],
                        help="which models run on the HTP simulator: the fp32 static export (HTP fp16 precision) "
                             "and the A16W8 QDQ stage (default both)")
    parser.add_argument("--no-qnn-stage", dest="qnn_stage", action="store_false",
                        help="leave out `quantize qnn` (and the QDQ model on the HTP: at 2B dims one photo takes "
                             "hours in the simulator)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--report-only", action="store_true", help="rewrite npu-2b.md from npu-2b.json")
    parser.add_argument("--resume", action="store_true",
                        help="keep npu-2b.json's speed phase (its start, machine and medians) and run the steps "
                             "after it that it lacks, the qnn stage and each --htp model included (the report says it "
                             "was resumed)")
    args = parser.parse_args(argv)
    if args.report_only:
        found = json.loads((args.results / "npu-2b.json").read_text())
    else:
        folders = {model: stages(args.build, model, args.size, ("dynamic", "static")) for model in args.models}
        if args.resume:
            found = json.loads((args.results / "npu-2b.json").read_text())
            found["resumed"] = time.strftime("%Y-%m-%dT%H:%M:%S")
            rows = [r for r in found["rows"] if r["model"] in args.models]  # the others stay as they were
        else:
            found = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": machine(),
                     "onnxruntime": ort.__version__, "load_average_start": load_average(), "rows": []}
            rows = [{"model": model, "size": args.size, "speed": speed(folders[model], args.threads, args.reps)}
                    for model in args.models]
            say("speed phase done", TAG)
        if not args.resume:
            found["rows"] = rows
        save(args.results, found, rows, args.resume)
        on_htp = [name for name in args.htp if args.qnn_stage or name != "qnn"]
        for row in rows:  # the JSON is rewritten after each step: `--report-only` tells what a cut run measured
            if args.qnn_stage and "qnn_cpu_photos" not in row:  # also after a --resume whose HTP phase ran without it
                stages(args.build, row["model"], args.size, ("qnn",))
                report = json.loads((folders[row["model"]]["qnn"] / "report.json").read_text())
                row["qnn_cpu_photos"] = report["min_token_cosine"]
                save(args.results, found, rows, args.resume)
            missing = [name for name in on_htp if name not in row.get("htp", {})]  # after a --resume: what it lacks
            if not missing:
                continue
            with tempfile.TemporaryDirectory(prefix="npu-2b-") as tmp:
                row["htp"] = {**row.get("htp", {}), **htp(folders[row["model"]], args.photos, missing, Path(tmp))}
            save(args.results, found, rows, args.resume)  # kept per model
        found["load_average_end"] = load_average()
        found = save(args.results, found, rows, args.resume)
    (args.results / "npu-2b.md").write_text(markdown(found))
    print(table(found["rows"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
