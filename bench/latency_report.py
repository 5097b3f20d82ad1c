"""Targets, markdown table and plot of a `bench.latency` result (pure functions of its json)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

KEY_SIZE = "448x448"


def _median(result: dict, variant: str, threads: int = 1, size: str = KEY_SIZE) -> float:
    return next(r["median_s"] for r in result["table"]
                if r["variant"] == variant and r["threads"] == threads and r["size"] == size)


def summarize(result: dict) -> dict:
    """The issue's targets at 448x448, one thread, from this run's medians."""
    best = result["best_quantized"]
    sdpa, eager = _median(result, "torch sdpa"), _median(result, "torch eager")
    export, opt = _median(result, "ort export"), _median(result, "ort optimized")
    peak = result["gemm_peak"]["1"]["gflops"]
    achieved = result["flops"][KEY_SIZE] / opt / 1e9
    quantized = {v: {"vs_optimized": opt / _median(result, v),
                     "size_ratio": result["files"][v] / result["files"]["ort optimized"]}
                 for v in result["quantized_quality"]}
    packs = {(p["variant"], p["how"]): p["median_s"] for p in result["pack_vs_single"]}
    return {
        "torch_eager_s": eager, "torch_sdpa_s": sdpa, "ort_export_s": export, "ort_optimized_s": opt,
        "best_quantized": best, "best_quantized_s": _median(result, best), "quantized": quantized,
        "optimized_vs_sdpa": sdpa / opt, "export_vs_sdpa": sdpa / export, "optimized_vs_export": export / opt,
        "rotary_fusion_gain": _median(result, "ort optimized (no RotaryEmbedding)") / opt,
        "encoder_gflop": result["flops"][KEY_SIZE] / 1e9, "gemm_peak_gflops": peak,
        "optimized_gflops": achieved, "fraction_of_peak": achieved / peak,
        "pack_vs_two_calls": {v: packs[(v, "pack")] / packs[(v, "two calls")] for v, _ in packs},
        "targets": {
            "optimized >= 2.5x torch sdpa": sdpa / opt >= 2.5,
            "optimized >= 85% of GEMM peak": achieved / peak >= 0.85,
        },
    }


def markdown(result: dict, png: str) -> str:
    s, m = result["summary"], result["machine"]
    threads = sorted({r["threads"] for r in result["table"]})
    sizes = list(dict.fromkeys(r["size"] for r in result["table"]))
    variants = list(dict.fromkeys(r["variant"] for r in result["table"]))
    cols = [(t, z) for t in threads for z in sizes]
    lines = [
        f"# Encoder latency: {result['model']} ({result['weights']} weights)",
        "",
        (f"Produced by `python -m bench.latency --model {result['model']}` (`make bench`), {result['started']} – "
        f"{result['finished']}. Machine: {m['cpu']}, {m['cores']} cores (AVX-512: {m['avx512']}), "
        f"{m['memory_gib']} GiB, shared with other jobs: load average {result['load_average_start']} at start, "
        f"{result['load_average_end']} at the end. ONNX Runtime {m['versions']['onnxruntime']}, torch "
        f"{m['versions']['torch']}. Medians of {result['reps']} repetitions interleaved across variants, same "
        "inputs; seconds per call."),
        "",
        "| variant | MiB | " + " | ".join(f"{z} {t}T" for t, z in cols) + " | vs torch sdpa (448, 1T) |",
        "|---|---:|" + "---:|" * len(cols) + "---:|",
    ]
    for v in variants:
        cells = [f"{_median(result, v, t, z):.3f}" for t, z in cols]
        lines.append(f"| {v} | {result['files'].get(v, 0) / 2**20:.0f} | " + " | ".join(cells)
                     + f" | {s['torch_sdpa_s'] / _median(result, v):.2f}x |")
    lines += ["", "## Targets (448x448, one thread, this run)", "",
              "| target | measured | met |", "|---|---:|:---:|",
              (f"| optimized fp32 ≥ 2.5× torch sdpa | {s['optimized_vs_sdpa']:.2f}× | "
              f"{'yes' if s['targets']['optimized >= 2.5x torch sdpa'] else 'no'} |"),
              (f"| optimized fp32 ≥ 85% of GEMM peak | {100 * s['fraction_of_peak']:.0f}% "
              f"({s['optimized_gflops']:.0f} of {s['gemm_peak_gflops']:.0f} GFLOP/s) | "
              f"{'yes' if s['targets']['optimized >= 85% of GEMM peak'] else 'no'} |"),
              "",
              "Quantized stages against optimized fp32 (the INT8 / INT4 choice and its targets: "
              "`bench/results/sweep.md`): " + "; ".join(
                  f"{v} {q['vs_optimized']:.2f}× faster, {100 * q['size_ratio']:.1f}% of the size"
                  for v, q in s["quantized"].items()) + ".",
              "",
              f"Encoder at 448x448: {s['encoder_gflop']:.0f} GFLOP (matrix products, analytic: `bench/flops.py`). "
              f"GEMM peak: one 2048³ fp32 MatMul in ONNX Runtime, median: "
              + ", ".join(f"{t} thread(s) {v['gflops']:.0f} GFLOP/s" for t, v in result["gemm_peak"].items()) + ".",
              (f"Export → optimized: {s['optimized_vs_export']:.2f}×; the project's own RotaryEmbedding fusion over "
               f"ORT's fusions alone: {s['rotary_fusion_gain']:.2f}×."),
              "", "## Quantized stages: accuracy against fp32 (all validation layouts, every output)", "",
              "| variant | options | min per-token cosine | min cosine | max abs diff |", "|---|---|---:|---:|---:|"]
    for v, q in result["quantized_quality"].items():
        options = ", ".join(f"{k} {x}" for k, x in (q["config"] or {}).items() if x not in ([], None))
        lines.append(f"| {v} | {options} | {q['min_token_cosine']:.4f} | {q['min_cosine']:.4f} | {q['max_abs']:.3g} |")
    lines += ["", "Random weights: these cosines say little about a trained checkpoint.", "",
              "## Latency against patch count (one thread)", "",
              "| patches | " + " | ".join(dict.fromkeys(c["variant"] for c in result["curve"])) + " |",
              "|---:|" + "---:|" * len(dict.fromkeys(c["variant"] for c in result["curve"]))]
    for n in dict.fromkeys(c["num_patches"] for c in result["curve"]):
        lines.append(f"| {n} | " + " | ".join(f"{c['median_s']:.3f}" for c in result["curve"]
                                                if c["num_patches"] == n) + " |")
    lines += ["", "## Mixed pack [[1,28,28],[1,20,20]] against two single calls (one thread)", "",
              "| variant | pack (s) | two calls (s) | pack / two calls |", "|---|---:|---:|---:|"]
    for v, ratio in s["pack_vs_two_calls"].items():
        p = {x["how"]: x["median_s"] for x in result["pack_vs_single"] if x["variant"] == v}
        lines.append(f"| {v} | {p['pack']:.3f} | {p['two calls']:.3f} | {ratio:.2f} |")
    lines += ["", ("Attention runs per frame (a Loop of MultiHeadAttention over the frames of the pack): a pack "
              "computes no cross-image scores. Curve to 16,384 patches with memory: bench/results/scale.md."),
              "", f"![latency]({png})", ""]
    return "\n".join(lines)


def plot(result: dict, path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5))
    rows = [r for r in result["table"] if r["threads"] == 1 and r["size"] == KEY_SIZE]
    left.barh([r["variant"] for r in rows], [r["median_s"] for r in rows], color="tab:blue")
    left.invert_yaxis()
    left.set_xlabel("seconds (median), 448x448, 1 thread")
    left.set_title(f"{result['model']}: latency by variant")
    for v in dict.fromkeys(c["variant"] for c in result["curve"]):
        pts = [c for c in result["curve"] if c["variant"] == v]
        right.plot([c["num_patches"] for c in pts], [c["median_s"] for c in pts], marker="o", label=v)
    right.set_xscale("log", base=2)
    right.set_yscale("log")
    right.set_xlabel("patches (square image)")
    right.set_ylabel("seconds (median), 1 thread")
    right.set_title("latency against patch count")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
