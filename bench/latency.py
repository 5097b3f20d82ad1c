"""`python -m bench.latency --model qwen3-vl`: encoder latency, torch eager vs ONNX Runtime stages.

One run, same inputs for every variant, repetitions interleaved across variants (variant A, B, C,
A, B, C, ...) so that machine load hits all alike; medians reported. Variants:
  torch eager / torch sdpa   the transformers model (per-frame attention), same random weights (seed 0)
  ort export                 build/NAME/export (fp32, as exported)
  ort optimized(...)         build/NAME/optimized and one ablation (no RotaryEmbedding)
  ort int8 / ort int4         build/NAME/int8 and build/NAME/int4: the points `make export` ships, chosen
                             by `python -m bench.sweep` (which measures every INT8 and INT4 option)
Also: the measured fp32 GEMM peak, the encoder's analytic FLOPs and achieved fraction of that peak,
latency against patch count (256..4096), and a mixed two-image pack against two single calls.
Needs `make export MODEL=NAME` (build/NAME/export); builds the optimized stage and ablations it lacks. Writes bench/results/latency-NAME.json, latency.md (or latency-NAME.md) and latency-NAME.png.
"""

import argparse
import gc
import json
import logging
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from bench import flops, gemm_peak, latency_report
from bench.timing import grid_for, interleaved, load_average, pixels
from builders.config import load_config
from builders.qwen_vl.model import build_random
from quantize import optimize as optimize_stage
from quantize.options import StageRun
from vlm_vision_onnx.core.machine import machine
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.release.variants import QUANTIZED  # the quantized stages every `make export` builds

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
SIZES = [(448, 448), (336, 336), (560, 560)]
CURVE_SIDES = [16, 24, 32, 48, 64]  # square grids: 256 .. 4096 patches
ABLATIONS = {"ort optimized (no RotaryEmbedding)": {"rotary"}}


def say(message: str) -> None:
    print(f"[bench] {message}", flush=True)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.latency", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-vl")
    parser.add_argument("--reps", type=int, default=3, help="timed repetitions per point (default 3)")
    parser.add_argument("--curve-reps", type=int, default=2, help="repetitions of the patch-count curve")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--out", type=Path, default=RESULTS)
    return parser.parse_args(argv)


# ---------------------------------------------------------------- stages
def ensure_stages(name: str, build: Path) -> dict[str, Path]:
    """{variant label: model.onnx}, building the optimized and ablation folders that are missing."""
    root = build / name
    export = root / "export" / "model.onnx"
    if not export.exists():
        raise SystemExit(f"error: {export} not found: run `make export MODEL={name}` first")
    models = {"ort export": export}
    optimized = root / "optimized"
    if not (optimized / "model.onnx").exists():
        say(f"building {optimized}")
        optimize_stage.run(export, optimized, set(), StageRun())
    for label, skip in ABLATIONS.items():
        folder = root / "bench" / ("optimized-skip-" + "-".join(sorted(skip)))
        if not (folder / "model.onnx").exists():
            say(f"building {folder}")
            optimize_stage.run(export, folder, skip, StageRun())
        models[label] = folder / "model.onnx"
    models["ort optimized"] = optimized / "model.onnx"
    for stage in QUANTIZED:
        if (root / stage / "model.onnx").exists():
            models[f"ort {stage}"] = root / stage / "model.onnx"
        else:
            say(f"no {root / stage}: run `make export MODEL={name}` to time it")
    return models


def stage_report(model_file: Path) -> dict:
    report = model_file.with_name("report.json")
    return json.loads(report.read_text()) if report.exists() else {}


# ---------------------------------------------------------------- timing
def ort_runner(session: ort.InferenceSession, feed: dict):
    return lambda: session.run(None, feed)


def torch_runner(visual, impl: str, feed: dict):
    pv, grid = torch.from_numpy(feed["pixel_values"]), torch.from_numpy(feed["grid_thw"])

    def run():
        for module in visual.modules():
            if hasattr(module, "config"):
                module.config._attn_implementation = impl
        with torch.inference_mode():
            out = visual(pv, grid_thw=grid, return_dict=True)
        return [t.numpy() for t in (out.pooler_output, *out.deepstack_features)]
    return run


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# ---------------------------------------------------------------- machine
def machine_and_versions() -> dict:
    """core.machine facts plus the versions of the runtimes compared."""
    return {**machine(), "versions": {"onnxruntime": ort.__version__, "torch": torch.__version__,
                                      "numpy": np.__version__}}


# ---------------------------------------------------------------- main
def main(argv=None) -> int:
    args = parse_args(argv)
    logging.disable(logging.INFO)  # onnxscript / ORT log every rewrite at INFO when stages are built
    threads = [int(t) for t in args.threads.split(",")]
    config = load_config(args.model)
    models = ensure_stages(args.model, args.build)
    say(f"variants: {', '.join(models)}")
    result = {"model": args.model, "config": config.name, "vision": config.vision, "weights": "random (seed 0)",
              "machine": machine_and_versions(), "load_average_start": load_average(), "reps": args.reps,
              "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    say("GEMM peak")
    result["gemm_peak"] = {str(t): v for t, v in gemm_peak.measure(threads).items()}
    result["files"] = {label: sum(f.stat().st_size for f in path.parent.glob("model.onnx*"))
                       for label, path in models.items()}
    result["quantized_quality"] = {
        label: {k: stage_report(path)["validation"].get(k) for k in ("min_token_cosine", "min_cosine", "max_abs")}
        | {"config": stage_report(path).get("config")} for label, path in models.items()
        if label.removeprefix("ort ") in QUANTIZED}
    visual = build_random(config, seed=0)
    sizes = [(h, w, grid_for(h, w)) for h, w in SIZES]
    table = []
    for t in threads:
        torch.set_num_threads(t)
        sessions = {label: open_session(path, t) for label, path in models.items()}
        for h, w, grid in sizes:
            feed = pixels(grid)
            runners = {"torch eager": torch_runner(visual, "eager", feed),
                       "torch sdpa": torch_runner(visual, "sdpa", feed)}
            runners.update({label: ort_runner(s, feed) for label, s in sessions.items()})
            reference = runners["torch eager"]()
            agreement = {label: min(cosine(a, b) for a, b in zip(reference, run())) for label, run in runners.items()}
            say(f"{t} thread(s), {h}x{w} ({grid}): timing {len(runners)} variants x {args.reps}")
            timed = interleaved(runners, args.reps)
            for label, rec in timed.items():
                table.append({"threads": t, "size": f"{h}x{w}", "grid_thw": grid,
                              "num_patches": int(np.prod(grid, 1).sum()), "variant": label, **rec,
                              "min_cosine_vs_torch_eager": agreement[label]})
                say(f"  {label:40s} {rec['median_s']:.3f} s")
        del sessions
        gc.collect()
    result["table"] = table
    best = min((r for r in table if r["threads"] == 1 and r["size"] == "448x448"
                and r["variant"] in result["quantized_quality"]), key=lambda r: r["median_s"])["variant"]
    result["best_quantized"] = best
    torch.set_num_threads(1)
    sessions = {label: open_session(models[label], 1) for label in ("ort optimized", best)}
    curve = []
    for side in CURVE_SIDES:
        feed = pixels([[1, side, side]])
        runners = {label: ort_runner(s, feed) for label, s in sessions.items()}
        runners["torch sdpa"] = torch_runner(visual, "sdpa", feed)
        say(f"curve: {side * side} patches")
        for label, rec in interleaved(runners, args.curve_reps).items():
            curve.append({"num_patches": side * side, "grid_thw": [[1, side, side]], "variant": label, **rec})
    result["curve"] = curve
    pack, singles = [[1, 28, 28], [1, 20, 20]], [[[1, 28, 28]], [[1, 20, 20]]]
    packs = []
    for label, s in sessions.items():
        feeds = [pixels(pack)] + [pixels(g, seed=i + 1) for i, g in enumerate(singles)]
        runners = {"pack": ort_runner(s, feeds[0]),
                   "two calls": lambda s=s, f=feeds: [s.run(None, x) for x in f[1:]]}
        for how, rec in interleaved(runners, args.reps).items():
            packs.append({"variant": label, "how": how, "grid_thw": pack, **rec})
    result["pack_vs_single"] = packs
    result["flops"] = {f"{h}x{w}": flops.encoder_flops(config.vision, grid) for h, w, grid in sizes}
    result["load_average_end"] = load_average()
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    result["summary"] = latency_report.summarize(result)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"latency-{args.model}"
    (args.out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    md_name = "latency.md" if args.model == "qwen3-vl" else f"{stem}.md"
    (args.out / md_name).write_text(latency_report.markdown(result, f"{stem}.png"))
    latency_report.plot(result, args.out / f"{stem}.png")
    say(f"wrote {args.out}/{stem}.json, {md_name}, {stem}.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
