"""`python -m bench.sweep --model qwen3-vl`: fp32 against the INT8 and INT4 options, to choose by measurement.

Every point is a stage built from build/NAME/optimized with the stage's own command-line flags
(`python -m quantize int8|int4 ... FLAGS`, into build/NAME/sweep/LABEL/; rebuilt only when the
optimized model or the flags changed). Per point: latency (one thread, one 448x448 image, medians of
`--reps` rounds interleaved across all points, same input), file size against fp32, and the worst per-token
cosine against fp32 from the stage's report: on the random weights (at the validation cases CASES), on the
realistic outlier-stress copy (the stage's gate: 4 residual channels 20-100x, written once by the patch
embedding, as in trained ViTs) and on the worst-case copy (every writer of the stream scaled; reported only).
The shipped point of each stage (what `make export` takes) is, of the shippable points (INT8: exact on every
x86 CPU, i.e. not `--full-range`), the fastest that meets every floor of FLOORS[stage], else of those meeting
the most; ties within 5% of the fastest go, for INT8, to the more accurate (random weights, then realistic
stress), and for INT4, whose reason to exist is size, to the smaller file first (TIE_BREAKS): with VNNI the
8-bit MatMulNBits kernel is as fast as the 4-bit one, and an accuracy tie-break would ship a "q4" with nearly
every MatMul at 8 bits, larger than the INT8 variant.
Writes bench/results/sweep-NAME.json, sweep.md (sweep-NAME.md for other models) and sweep-NAME.png (the
Pareto plot: accuracy on the three weight sets against latency and against size).
Torch-free; needs `make export MODEL=NAME` (or any build/NAME/optimized stage) first.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import logging
import sys
import time
from pathlib import Path

from bench import sweep_report
from bench.timing import interleaved, load_average, photo_feed, stage_model
from vlm_vision_onnx.core import onnx_io, parity
from vlm_vision_onnx.core.machine import machine
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.families import of_model
from vlm_vision_onnx.families.shipping import Shipping, int8_nbits_flags
from vlm_vision_onnx.release.variants import QUANTIZED
from vlm_vision_onnx.runtime import smoke

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SIZE = (448, 448)
#: (label, stage, flags). Flags are those of `python -m quantize STAGE`: what `make export` takes.
POINTS = [
    ("int8 dynamic 7-bit", "int8", ["--method", "dynamic", "--reduce-range", "--outliers", "exclude"]),
    ("int8 dynamic 7-bit, smoothed", "int8",
     ["--method", "dynamic", "--reduce-range", "--smooth", "--outliers", "exclude"]),
    ("int8 static 7-bit", "int8", ["--method", "static", "--reduce-range", "--outliers", "exclude"]),
    ("int8 nbits b32 sym a4", "int8", ["--method", "nbits", "--block-size", "32", "--symmetric",
                                       "--accuracy-level", "4", "--outliers", "exclude"]),
    ("int4 b32 sym a4", "int4", ["--block-size", "32", "--symmetric", "--accuracy-level", "4", "--outliers", "report"]),
    ("int4 b32 asym a4", "int4", ["--block-size", "32", "--asymmetric", "--accuracy-level", "4", "--outliers", "report"]),
    ("int4 b32 hqq a4", "int4",
     ["--block-size", "32", "--asymmetric", "--algorithm", "hqq", "--accuracy-level", "4", "--outliers", "report"]),
    ("int4 b128 asym a4", "int4",
     ["--block-size", "128", "--asymmetric", "--accuracy-level", "4", "--outliers", "report"]),
    ("int4 b128 hqq a4", "int4",
     ["--block-size", "128", "--asymmetric", "--algorithm", "hqq", "--accuracy-level", "4", "--outliers", "report"]),
    ("int4 b128 gptq a4", "int4",
     ["--block-size", "128", "--asymmetric", "--algorithm", "gptq", "--accuracy-level", "4", "--outliers", "report"]),
    ("int4 b32 gptq a4", "int4",
     ["--block-size", "32", "--asymmetric", "--algorithm", "gptq", "--accuracy-level", "4", "--outliers", "report"]),
]


def _readable(pattern: str) -> str:
    r"""A MatMul name pattern as a point's label says it: `down_proj|attn\.proj` -> `down_proj + attn.proj`."""
    return pattern.replace("|", " + ").replace("\\.", ".")


def points(shipping: Shipping) -> list[tuple[str, str, list[str]]]:
    """POINTS plus the family's own (its declared `Shipping`): dynamic INT8 with the MatMuls matching each of
    `int8_nbits_for` by MatMulNBits, and INT4 with `int4_matmuls` of the most sensitive MatMuls at 8 bits."""
    nbits = [(f"int8 dynamic 7-bit, {_readable(pattern)} nbits", "int8", list(int8_nbits_flags(pattern)))
             for pattern in shipping.int8_nbits_for]
    return POINTS + nbits + [
        (f"int4 b128 asym a4, {n} MatMuls 8-bit", "int4",
         ["--block-size", "128", "--asymmetric", "--accuracy-level", "4", "--outliers", "report",
          "--int8-matmuls", str(n)])
        for n in shipping.int4_matmuls]


FP32 = "fp32 (optimized)"
#: The floors a shipped point must meet (issue 17): min per-token cosine against fp32 on random weights and on
#: the realistic outlier stress, speed against optimized fp32 (448x448, one thread), size against fp32; for INT8
#: also on the held-out photos (the "photos" column), the floor with which `--engine auto` takes a variant
#: (runtime/path_choice.py, issue 33): an INT8 under it never runs by default.
FLOORS = {"int8": {"token_cosine": 0.998, "stress_token_cosine": 0.99, "photo_token_cosine": 0.998, "speedup": 2.5},
          "int4": {"token_cosine": 0.98, "stress_token_cosine": 0.95, "speedup": 1.5, "size_ratio": 0.30}}


def say(message: str) -> None:
    print(f"[sweep] {message}", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-vl")
    parser.add_argument("--reps", type=int, default=5, help="timed rounds over all points (default 5)")
    parser.add_argument("--only", action="append", default=[], metavar="LABEL",
                        help="sweep only the points whose label contains this (repeatable)")
    parser.add_argument("--skip", action="append", default=[], metavar="LABEL",
                        help="leave out the points whose label contains this (repeatable; the report lists them)")
    parser.add_argument("--report-only", action="store_true",
                        help="no building or timing: apply the choice rule to the last run's JSON and rewrite its "
                             "table and plot")
    parser.add_argument("--shipped", action="store_true",
                        help="add the int8 and int4 stage folders `make export` made in BUILD/MODEL as points (the "
                             "family's shipped flags; accuracy from their reports, every layout); without --only, build "
                             "no other point")
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


def shipped_points(root: Path, shipping: Shipping) -> list[dict]:
    """The int8 and int4 stages of `make export` in `root` as built points (labels say so; flags the family's
    shipped ones)."""
    found = []
    for stage in QUANTIZED:
        folder = stage_model(root.parent, root.name, stage).parent
        found.append({"label": f"{stage} shipped (make export)", "stage": stage, "flags": shipping.stage_flags(stage),
                      "folder": str(folder), "report": json.loads((folder / "report.json").read_text())})
    return found


def fingerprint(model_file: Path, flags: list[str]) -> str:
    """Changes when the fp32 model's files or the flags change (size and mtime, not content: cheap)."""
    stats = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in sorted(model_file.parent.glob("model.onnx*"))]
    return hashlib.sha256(json.dumps([stats, flags]).encode()).hexdigest()[:16]


def folder_name(label: str) -> str:
    return label.replace(" ", "-").replace(",", "")


def build_points(root: Path, points: list[tuple], cases: tuple[str, ...]) -> list[dict]:
    """Build (or reuse) every point's stage folder, validated at `cases`; [{label, stage, flags, folder,
    report | error}]."""
    from quantize import __main__ as quantize_cli  # the stages' own command, exactly as make runs it
    from quantize import outlier_check
    from quantize.options import StageRun

    # one reference run of the fp32 (and stressed) model for all points, validated at `cases`
    hooks = StageRun(keep_prepared=True, cases=cases)

    optimized = root / "optimized" / "model.onnx"
    index_file = root / "sweep" / "index.json"
    index = json.loads(index_file.read_text()) if index_file.exists() else {}
    built = []
    for label, stage, flags in points:
        folder = root / "sweep" / folder_name(label)
        key = fingerprint(optimized, [stage, *flags])
        report = folder / "report.json"
        if index.get(label) != key or not report.exists():
            say(f"building {folder}: python -m quantize {stage} {optimized.parent} {folder} {' '.join(flags)}")
            start = time.perf_counter()
            # the worst-case figure costs a third quantization; with GPTQ that is a third calibration (minutes at
            # 2B dims), so GPTQ points are measured without it
            worst = [] if "gptq" in flags else ["--worst-case-budget", str(outlier_check.SWEEP_WORST_CASE_BUDGET)]
            code = quantize_cli.main([stage, str(optimized.parent), str(folder), *flags, "--force", *worst], hooks)
            if code != 0:
                built.append({"label": label, "stage": stage, "flags": flags, "error": f"exit {code}"})
                index.pop(label, None)
                continue
            index[label] = key
            index_file.parent.mkdir(parents=True, exist_ok=True)
            index_file.write_text(json.dumps(index, indent=1) + "\n")
            say(f"built {label} in {time.perf_counter() - start:.0f} s")
        built.append({"label": label, "stage": stage, "flags": flags, "folder": str(folder),
                      "report": json.loads(report.read_text())})
    return built


def summary(point: dict) -> dict:
    """The table's fields of one built point, from its stage report."""
    report = point["report"]
    stress = report.get("outlier_stress") or {}
    worst = report.get("outlier_stress_worst_case") or {}
    excluded = [n for n in report["fp32_weight_nodes"] if n["reason"].startswith("excluded")]
    return {"label": point["label"], "stage": point["stage"], "flags": point["flags"], "folder": point["folder"],
            "mib": sum(report["files"].values()) / 2**20, "size_ratio": report["size_ratio"],
            "token_cosine": report["validation"]["min_token_cosine"],
            "cosine": report["validation"]["min_cosine"],
            "stress_token_cosine": (stress.get("validation") or {}).get("min_token_cosine"),
            "worst_token_cosine": (worst.get("validation") or {}).get("min_token_cosine"),
            "quantized_nodes": report["quantized_nodes"], "fp32_matmuls_excluded": len(excluded),
            "int8_matmuls": len((report.get("mixed_precision") or {}).get("promoted", []))}


#: Photos none of the stages calibrates on (quantize.calibration.STAGE_PHOTOS), at this size: the "photos" column.
PHOTO_SIZE = (448, 448)


def photo_accuracy(rows: list[dict], model_file: Path) -> dict:
    """Each row's min per-token cosine against fp32 on real photos no stage calibrated on (row["photo_token_cosine"]);
    returns what they were. Random-pixel validation inputs are not what users feed, and a calibrated method
    (static, GPTQ) is tuned to photos: this column shows it."""
    from quantize import calibration

    held_out = [p for p in calibration.PHOTOS if p not in (*calibration.STAGE_PHOTOS, calibration.VIDEO_PHOTO)][:3]
    feeds = calibration.for_model(model_file, photos=held_out, sizes=(PHOTO_SIZE,), video=False)
    say(f"accuracy on {len(feeds)} held-out photos ({', '.join(held_out)}) at {PHOTO_SIZE[0]}x{PHOTO_SIZE[1]}")
    reference = [open_session(model_file, 0).run(None, feed) for feed in feeds]
    for row in rows:
        session = open_session(Path(row["folder"]) / "model.onnx", 0)
        row["photo_token_cosine"] = min(parity.min_token_cosine(g, r) for feed, ref in zip(feeds, reference)
                                        for g, r in zip(session.run(None, feed), ref))
        del session
        gc.collect()
    return {"photos": held_out, "size": list(PHOTO_SIZE), "how": "quantize/calibration.py, the family's processor"}


def shippable(row: dict) -> bool:
    """A point `make export` may ship: INT8 computing the same on every x86 CPU (8-bit dynamic weights saturate
    the int8 kernel of CPUs without VNNI, `core.cpu`); every INT4 point."""
    return "--full-range" not in row["flags"]


def met(row: dict, floors: dict) -> dict[str, bool]:
    """{floor: met} of one measured row (size_ratio is a ceiling)."""
    return {key: ((row.get(key) or 0) <= value) if key == "size_ratio" else ((row.get(key) or 0) >= value)
            for key, value in floors.items()}


def _accuracy(row: dict) -> tuple:
    return (row["token_cosine"] or 0, row["stress_token_cosine"] or 0)


#: What decides between points within 5% of the fastest (the larger key wins), per stage.
TIE_BREAKS = {"int8": _accuracy, "int4": lambda row: (-row["size_ratio"], *_accuracy(row))}


def choose(rows: list[dict], floors: dict = FLOORS) -> dict:
    """{"int8": label, "int4": label, "rule": ...} by the module docstring's rule."""
    best = {"rule": ("of the shippable points of each stage (INT8: not --full-range, exact on every x86 CPU), the "
                     "fastest meeting every floor, else of those meeting the most floors; ties within 5% of the "
                     "fastest go, for INT8, to the higher min per-token cosine on random weights, then on the "
                     "realistic outlier stress, and for INT4 to the smaller file, then the same accuracies"),
            "floors": floors}
    for stage, stage_floors in floors.items():
        candidates = [r for r in rows if r["stage"] == stage and shippable(r)]
        if candidates:
            most = max(sum(met(r, stage_floors).values()) for r in candidates)
            best[stage] = fastest_or_near([r for r in candidates if sum(met(r, stage_floors).values()) == most],
                                          TIE_BREAKS[stage])
    return best


def fastest_or_near(rows: list[dict], preference) -> str:
    """Label of the preferred (largest `preference(row)`) of the rows within 5% of the fastest's median."""
    fastest = min(r["median_s"] for r in rows)
    return max((r for r in rows if r["median_s"] <= 1.05 * fastest), key=preference)["label"]


def main(argv=None) -> int:
    args = parse_args(argv)
    logging.disable(logging.INFO)
    stem = f"sweep-{args.model}"
    md_name = "sweep.md" if args.model == "qwen3-vl" else f"{stem}.md"
    if args.report_only:
        last = args.out / f"{stem}.json"
        if not last.exists():
            print(f"error: --report-only needs the JSON of an earlier run, and {last} is missing: run "
                  f"`python -m bench.sweep --model {args.model}` first", file=sys.stderr)
            return 2
        return write_report(args.out, stem, md_name, json.loads(last.read_text()))
    root = args.build / args.model
    optimized = stage_model(args.build, args.model)
    shipping = of_model(onnx_io.metadata(optimized), optimized).shipping
    cases = shipping.sweep_cases
    every = points(shipping)
    shipped_only = args.shipped and not args.only  # the stages of make export alone
    chosen = [p for p in every if not shipped_only and (not args.only or any(o in p[0] for o in args.only))
              and not any(s in p[0] for s in args.skip)]
    skipped = [p[0] for p in every if p not in chosen]
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    built = (shipped_points(root, shipping) if args.shipped else []) + build_points(root, chosen, cases)
    failed = [p for p in built if "error" in p]
    rows = [{"label": FP32, "stage": "fp32", "flags": [], "folder": str(optimized.parent),
             "mib": sum(f.stat().st_size for f in optimized.parent.glob("model.onnx*")) / 2**20,
             "size_ratio": 1.0, "token_cosine": 1.0, "cosine": 1.0, "stress_token_cosine": 1.0,
             "worst_token_cosine": 1.0, "quantized_nodes": 0, "fp32_matmuls_excluded": 0, "int8_matmuls": 0}] + [summary(p) for p in built if "error" not in p]
    photos = photo_accuracy(rows, optimized)
    feed = photo_feed(optimized, SIZE)
    layout = smoke.integer_values(feed)
    load_start = load_average()
    say(f"timing {len(rows)} points at {SIZE[0]}x{SIZE[1]} ({layout}), one thread, {args.reps} interleaved rounds")
    sessions = {r["label"]: open_session(Path(r["folder"]) / "model.onnx", 1) for r in rows}
    timed = interleaved({label: (lambda s=s: s.run(None, feed)) for label, s in sessions.items()}, args.reps)
    del sessions
    gc.collect()
    for r in rows:
        r.update(timed[r["label"]])
        r["speedup"] = timed[FP32]["median_s"] / r["median_s"]
        say(f"  {r['label']:45s} {r['median_s']:.3f} s  {r['speedup']:.2f}x  {r['mib']:.0f} MiB  "
            f"cos/token {r['token_cosine']:.5f}  stress {r['stress_token_cosine'] or float('nan'):.5f}  "
            f"worst {r['worst_token_cosine'] or float('nan'):.5f}")
    result = {"model": args.model, "size": f"{SIZE[0]}x{SIZE[1]}", "layout": layout, "threads": 1,
              "cases": [*(["every validation layout (the stages of make export)"] if args.shipped else []),
                        *(cases if chosen else [])],
              "reps": args.reps, "weights": "random (seed 0), realistic and worst-case outlier stress",
              "photos": photos, "not_run": skipped,
              "floors": FLOORS,
              "machine": machine(), "started": started, "load_average_start": load_start,
              "load_average_end": load_average(), "finished": time.strftime("%Y-%m-%dT%H:%M:%S"),
              "rows": rows, "failed": failed}
    args.out.mkdir(parents=True, exist_ok=True)
    return write_report(args.out, stem, md_name, result)


def write_report(out: Path, stem: str, md_name: str, result: dict) -> int:
    """Apply the choice rule to the measured rows; write the JSON, the table and the plot."""
    result["best"] = choose(result["rows"])
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / md_name).write_text(sweep_report.markdown(result, f"{stem}.png"))
    sweep_report.plot(result, out / f"{stem}.png")
    say(f"best INT8: {result['best'].get('int8')}; best INT4: {result['best'].get('int4')}")
    say(f"wrote {out}/{stem}.json, {md_name}, {stem}.png")
    if result["failed"]:
        say(f"failed points: {', '.join(p['label'] for p in result['failed'])}")
    return 1 if result["failed"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
