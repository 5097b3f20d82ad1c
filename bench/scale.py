"""`python -m bench.scale --model qwen3-vl`: latency and peak memory against patch count, each point in
its own process, and the cost of a mixed pack against its single calls.

Variants: `ort optimized` (build/NAME/optimized, or --optimized), the quantized stages build/NAME/int8 and
build/NAME/int4 when they exist, and any `--compare LABEL=PATH` (e.g. the graph of an older attention).
Curve: one square image per side in --sides (default 32, 64, 92, 128: 1,024 .. 16,384 patches, the
last a 2048x2048 image at patch 16; at patch 14, Qwen2-VL's and Qwen2.5-VL's, 2048x2048 is 146 x 146); for every repetition, every side and every variant a fresh
`python -m bench.scale_point` process loads the model, runs once and reports its time and peak RSS
(variants interleaved inside each side, so machine load hits all alike; medians reported). Memory
above the weights = peak RSS - model file size. Every child runs under an address-space cap
(--max-memory-gib) so that a quadratic graph fails instead of exhausting the shared machine.
Pack: 448x448 + 336x336 in one call against two calls, interleaved in one process per variant.
Writes bench/results/scale-NAME.json and scale.md (scale-NAME.md for other models). Torch-free.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.timing import PATCH_DIM, grid_for, load_average, patch_of
from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.machine import describe, machine
from vlm_vision_onnx.release.variants import QUANTIZED

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SIDES = [32, 64, 92, 128]  # 1,024 / 4,096 / 8,464 / 16,384 patches
PACK_SIZES = [(448, 448), (336, 336)]


def say(message: str) -> None:
    print(f"[scale] {message}", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-vl", help="build/MODEL holds the stages")
    parser.add_argument("--optimized", type=Path, help="model.onnx of the fp32 optimized variant")
    parser.add_argument("--stages", default=",".join(QUANTIZED),
                        help="quantized stage folders of build/MODEL to include when present (default int8,int4)")
    parser.add_argument("--compare", action="append", default=[], metavar="LABEL=PATH",
                        help="another model.onnx to measure alongside (repeatable)")
    parser.add_argument("--sides", default=",".join(map(str, SIDES)),
                        help="square grid sides, comma-separated; SIDE:REPS overrides --reps for one side")
    parser.add_argument("--reps", type=int, default=2, help="processes per point and variant (default 2)")
    parser.add_argument("--pack-reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-memory-gib", type=float, default=16.0)
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def variants(args) -> dict[str, Path]:
    root = args.build / args.model
    found = {"ort optimized": args.optimized or root / "optimized" / "model.onnx"}
    found.update({f"ort {stage}": root / stage / "model.onnx" for stage in filter(None, args.stages.split(","))
                  if (root / stage / "model.onnx").exists()})
    for item in args.compare:
        label, sep, path = item.partition("=")
        if not sep:
            raise SystemExit(f"error: --compare takes LABEL=PATH, got {item!r}")
        found[label] = Path(path)
    missing = [str(p) for p in found.values() if not p.exists()]
    if missing:
        raise SystemExit(f"error: {missing[0]} not found (run `make export MODEL={args.model}` first)")
    return found


def weights_mib(model: Path) -> float:
    return sum(f.stat().st_size for f in model.parent.glob(model.name + "*")) / 2**20


def child(model: Path, grid: list, args, singles: list | None = None, reps: int = 1) -> dict:
    """Run bench.scale_point in a fresh process; its JSON record."""
    command = [sys.executable, "-m", "bench.scale_point", str(model), json.dumps(grid), "--reps", str(reps),
               "--threads", str(args.threads), "--max-memory-gib", str(args.max_memory_gib)]
    if singles:
        command += ["--singles", *map(json.dumps, singles)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"error": f"exit {done.returncode}: {' '.join(done.stderr.split())[-300:]}"}
    return json.loads(lines[-1])


def curve(models: dict[str, Path], sides: dict[int, int], args) -> list[dict]:
    """{side: repetitions} -> one record per (repetition, side, variant), repetitions outermost."""
    records = []
    for rep in range(max(sides.values())):
        for side in (s for s, count in sides.items() if rep < count):
            grid = [[1, side, side]]
            for label, model in models.items():
                record = child(model, grid, args)
                records.append({"variant": label, "num_patches": side * side, "grid_thw": grid, "rep": rep,
                                **record})
                shown = record.get("error") or f"{record['seconds'][0]:.2f} s, peak {record['peak_rss_mib']:.0f} MiB"
                say(f"rep {rep + 1}, {side * side} patches, {label}: {shown}")
    return records


def summarize(records: list[dict], models: dict[str, Path]) -> list[dict]:
    """One row per (variant, patch count): medians over the repetitions that ran."""
    rows = []
    for label, model in models.items():
        weights = weights_mib(model)
        for n in sorted({r["num_patches"] for r in records}):
            runs = [r for r in records if r["variant"] == label and r["num_patches"] == n]
            ok = [r for r in runs if not r.get("error")]
            row = {"variant": label, "num_patches": n, "runs": len(runs), "failed": len(runs) - len(ok),
                   "weights_mib": round(weights, 1)}
            if ok:
                peak = float(np.median([r["peak_rss_mib"] for r in ok]))
                row.update({"median_s": float(np.median([r["seconds"][0] for r in ok])), "peak_rss_mib": peak,
                            "peak_minus_weights_mib": round(peak - weights, 1),
                            "rss_loaded_mib": float(np.median([r["rss_loaded_mib"] for r in ok]))})
            else:
                row["error"] = runs[0].get("error") if runs else "not run"
            rows.append(row)
    return rows


def pack_costs(models: dict[str, Path], args) -> list[dict]:
    patch = patch_of(int(onnx_io.metadata(next(iter(models.values()))).get("patch_dim", PATCH_DIM)))
    singles = [grid_for(h, w, patch) for h, w in PACK_SIZES]
    pack = [g[0] for g in singles]
    rows = []
    for label, model in models.items():
        record = child(model, pack, args, singles, reps=args.pack_reps)
        row = {"variant": label, "grid_thw": pack, **record}
        if not record.get("error"):
            row["pack_median_s"] = float(np.median(record["pack_s"]))
            row["singles_median_s"] = float(np.median(record["singles_s"]))
            row["ratio"] = row["pack_median_s"] / row["singles_median_s"]
            say(f"pack {pack}, {label}: {row['pack_median_s']:.2f} s vs two calls {row['singles_median_s']:.2f} s")
        rows.append(row)
    return rows


def why(error: str, result: dict) -> str:
    """An allocation failure under the cap in a few words, else the error's start."""
    if "allocate" in error.lower() or "bfc_arena" in error:
        return f"could not allocate under the {result['max_memory_gib']:.0f} GiB address-space cap"
    return error[:120]


def markdown(result: dict) -> str:
    rows, labels = result["curve_summary"], list(result["variants"])
    sizes = sorted({r["num_patches"] for r in rows})
    cell = {(r["variant"], r["num_patches"]): r for r in rows}

    def show(label, n, key, fmt):
        row = cell.get((label, n), {})
        return fmt.format(row[key]) if key in row else "fails" if row.get("error") else "–"

    lines = [f"# Scale: {result['model']} ({result['weights']} weights)", "",
             (f"Produced by `python -m bench.scale --model {result['model']}`, {result['started']} – "
             f"{result['finished']}. Machine: {describe(result['machine'])}, shared with other jobs: load "
             f"average {result['load_average_start']} at start, {result['load_average_end']} at the end. "
             f"{result['threads']} thread(s); every point in its own process, processes per point and variant "
             f"{result['reps_per_side']} (by grid side), variants interleaved; medians. Address space capped at "
             f"{result['max_memory_gib']} GiB per process."), "",
             "## Seconds per call (one square image)", "",
             "| patches | " + " | ".join(labels) + " |", "|---:|" + "---:|" * len(labels)]
    lines += [f"| {n} | " + " | ".join(show(v, n, "median_s", "{:.2f}") for v in labels) + " |" for n in sizes]
    lines += ["", "## Peak RSS minus model file size (MiB)", "",
              "| patches | " + " | ".join(labels) + " |", "|---:|" + "---:|" * len(labels)]
    lines += [f"| {n} | " + " | ".join(show(v, n, "peak_minus_weights_mib", "{:.0f}") for v in labels) + " |"
              for n in sizes]
    lines += ["", "Model files: " + ", ".join(f"{v} {cell[(v, sizes[0])]['weights_mib']:.0f} MiB" for v in labels)
              + ". Failures: " + ("; ".join(f"{r['variant']} at {r['num_patches']}: {why(r['error'], result)}"
                                           for r in rows if r.get("error")) or "none") + ".", ""]
    lines += ["## Mixed pack against its single calls", "", "| variant | pack (s) | two calls (s) | pack / two calls |",
              "|---|---:|---:|---:|"]
    lines += [f"| {r['variant']} | {r['pack_median_s']:.2f} | {r['singles_median_s']:.2f} | {r['ratio']:.3f} |"
              if "ratio" in r else f"| {r['variant']} | fails | | |" for r in result["pack"]]
    lines += ["", "## Targets", "", "| target | measured |", "|---|---|"]
    lines += [f"| {t['target']} | {t['measured']} |" for t in result["targets"]]
    return "\n".join(lines) + "\n"


def targets(rows: list[dict], packs: list[dict], compare: list[str]) -> list[dict]:
    cell = {(r["variant"], r["num_patches"]): r for r in rows}
    found = []
    small, large = cell.get(("ort optimized", 4096), {}), cell.get(("ort optimized", 16384), {})
    if "peak_minus_weights_mib" in small and "peak_minus_weights_mib" in large:
        ratio = large["peak_minus_weights_mib"] / small["peak_minus_weights_mib"]
        found.append({"target": "memory above weights, 16,384 / 4,096 patches ≤ 4.5× (ort optimized)",
                      "measured": f"{ratio:.2f}× ({large['peak_minus_weights_mib']:.0f} / "
                                  f"{small['peak_minus_weights_mib']:.0f} MiB)"})
    if large:
        found.append({"target": "a 2048x2048 image (16,384 patches) runs (ort optimized)",
                      "measured": "yes" if "median_s" in large else f"no: {large.get('error')}"})
    for label in compare:
        before = cell.get((label, 4096), {})
        if "median_s" in before and "median_s" in small:
            found.append({"target": f"ort optimized at 4,096 patches ≥ 1.15× faster than {label}",
                          "measured": f"{before['median_s'] / small['median_s']:.2f}×"})
    found += [{"target": f"448² + 336² pack ≤ 1.05× two calls ({p['variant']})", "measured": f"{p['ratio']:.3f}×"}
              for p in packs if "ratio" in p]
    return found


def main(argv=None) -> int:
    args = parse_args(argv)
    models = variants(args)
    sides = {int(side): int(count or args.reps) for side, _, count in (s.partition(":") for s in args.sides.split(","))}
    say(f"variants: {', '.join(f'{k} ({v})' for k, v in models.items())}")
    result = {"model": args.model, "weights": "random (seed 0)", "machine": machine(), "threads": args.threads,
              "reps": args.reps, "reps_per_side": sides, "max_memory_gib": args.max_memory_gib, "load_average_start": load_average(),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "variants": {k: str(v) for k, v in models.items()}}
    result["curve"] = curve(models, sides, args)
    result["curve_summary"] = summarize(result["curve"], models)
    result["pack"] = pack_costs(models, args)
    result["targets"] = targets(result["curve_summary"], result["pack"], [c.partition("=")[0] for c in args.compare])
    result["load_average_end"] = load_average()
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"scale-{args.model}"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    md = "scale.md" if args.model == "qwen3-vl" else f"{stem}.md"
    (args.out / md).write_text(markdown(result))
    say(f"wrote {args.out}/{stem}.json and {md}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
