"""`python -m bench.cpu_race_families --builds build/qwen2-vl-2b,...`: the CPU race's second table, one row per model.

For each build (a `make export` build folder of any family at its published dims: export, optimized and int8
stages, ov-int8 when built), `bench.cpu_race.race` with the paths a user picks between: PyTorch bf16 (the family's
`pytorch_run`: transformers' forward, sdpa), ONNX Runtime INT8, OpenVINO bf16 on the optimized file, OpenVINO INT8
(when built), and the package's default path on this machine at each size (`bench.cpu_race.default_paths`);
PyTorch fp32 runs once per case, untimed, for the accuracy (min per-token cosine over every output). Each build's paths are timed
interleaved, case by case (a warm-up run, then `--reps` rounds); builds one after another.
Cases: scikit-image's astronaut resized to each `--sizes` square through the model's own processor.
Writes bench/results/cpu-race-families[-SUFFIX].json and .md.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from bench import cpu_race
from bench.timing import load_average, write_results
from vlm_vision_onnx.core import cpu
from vlm_vision_onnx.core.machine import describe, machine
from vlm_vision_onnx.core.progress import say

ROOT = Path(__file__).resolve().parents[1]
TAG = "cpu-race-families"
BASE = "PyTorch bf16"
#: The timed paths, in table order (those a build or this machine lacks are left out), and a model's default
#: path when it is none of these (ORT fp32 on a CPU where no INT8 meets the floor).
TIMED = (BASE, "ORT INT8", "OV bf16", "OV INT8")


def measure(build: Path, sizes: list[int], threads: int, reps: int, tmp: Path) -> dict:
    """One build's race: {model, build, defaults: {case: (label, line)}, cases: {case: {label: {median_s,
    min_token_cosine, ...}}}, peak_rss_mib, load_s}."""
    export = json.loads((build / "export" / "report.json").read_text())
    feeds = cpu_race.cases(build / "optimized" / "model.onnx", sizes, 0)
    defaults = cpu_race.default_paths(build, feeds)
    run = cpu_race.race(build, feeds, threads, reps, tmp,
                        only=(cpu_race.REFERENCE, *TIMED, *(label for label, _ in defaults.values())),
                        untimed=(cpu_race.REFERENCE,), profile=False)
    return {"model": export["model"], "build": str(build), "defaults": defaults, **run}


def _cell(r: dict | None, base: float | None) -> str:
    """'1.23 s, 1.50x, 0.99835' of one path at one case ('-' when the path did not run)."""
    if not r:
        return "-"
    ratio = f", {base / r['median_s']:.2f}x" if base else ""
    cos = f", {r['min_token_cosine']:.5f}" if r.get("min_token_cosine") is not None else ""
    return f"{r['median_s']:.2f} s{ratio}{cos}"


def markdown(result: dict) -> str:
    flags = ", ".join(result["cpu_flags"]) or "none of " + ", ".join(cpu_race.FLAGS)
    lines = ["# CPU race, every family at published dims", "",
             (f"`{result['command']}` on {describe(result['machine'])}; CPU flags: {flags}; {result['threads']} "
              f"thread(s); {result['started']} - {result['finished']}. Random weights at each config's published "
              "dims. Medians of interleaved rounds within each model; x = PyTorch bf16's median / the path's; "
              "accuracy: min per-token cosine over every output against PyTorch fp32 on the same photo. **Bold**: "
              "the package's default path on this machine (`runtime embed` with no option)."), "",
             ]
    columns = [*TIMED, *dict.fromkeys(label for m in result["models"] for label, _ in m["defaults"].values()
                                      if label not in TIMED)]
    lines += ["| model | photo | " + " | ".join(columns) + " |", "|---|---|" + "---:|" * len(columns)]
    for model in result["models"]:
        for case, by_label in model["cases"].items():
            base = by_label.get(BASE, {}).get("median_s")
            cells = [_cell(by_label.get(label), base if label != BASE else None) for label in columns]
            cells = [f"**{c}**" if label == model["defaults"][case][0] and c != "-" else c
                     for label, c in zip(columns, cells)]
            lines.append(f"| {model['model']} | {case} | " + " | ".join(cells) + " |")
    lines += ["", "Default path per model and size: " + "; ".join(
        f"{m['model']} {case}: {line}" for m in result["models"] for case, (_, line) in m["defaults"].items()) + ".",
              ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_race_families", description=__doc__.splitlines()[0])
    parser.add_argument("--builds", required=True, help="build folders, comma-separated (each: export, optimized, "
                                                        "int8 stages; ov-int8 when built)")
    parser.add_argument("--sizes", default="448,1024", help="square photo sides, comma-separated (default 448,1024)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--suffix", default="")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    builds = [Path(b) for b in args.builds.split(",") if b]
    missing = [str(b) for b in builds if not (b / "export" / "report.json").exists()
               or not (b / "optimized" / "model.onnx").exists()]
    if missing:
        parser.error(f"not a build with export and optimized stages: {', '.join(missing)} (run `make export "
                     "MODEL=...` first)")
    result = {"command": "python -m bench.cpu_race_families " + " ".join(argv if argv is not None else sys.argv[1:]),
              "machine": machine(), "cpu_flags": [f for f in cpu_race.FLAGS if cpu.has(f)], "threads": args.threads,
              "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_average_start": load_average(), "models": []}
    sizes = [int(s) for s in args.sizes.split(",") if s]
    for build in builds:
        say(f"{build}: race at {', '.join(f'{s}x{s}' for s in sizes)}", TAG)
        with tempfile.TemporaryDirectory(prefix="cpu-race-families-") as tmp:
            result["models"].append(measure(build, sizes, args.threads, args.reps, Path(tmp)))
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    stem = "cpu-race-families" + (f"-{args.suffix}" if args.suffix else "")
    write_results(args.out, stem, result, markdown(result), TAG)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
