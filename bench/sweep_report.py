"""Markdown table and accuracy-latency plot of a `bench.sweep` result (pure functions of its json)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from core.machine import describe

COLORS = {"fp32": "tab:gray", "int8": "tab:blue", "int4": "tab:orange"}


def _cos(value) -> str:
    return "–" if value is None else f"{value:.5f}"


def markdown(result: dict, png: str) -> str:
    t, best, fp32 = result["targets"], result["best"], result["rows"][0]
    lines = [
        f"# Quantization sweep: {result['model']} ({result['size']}, one thread)",
        "",
        (f"Produced by `python -m bench.sweep --model {result['model']}` (`make bench`), {result['started']} – "
         f"{result['finished']}. Machine: {describe(result['machine'])} (AVX-512: {result['machine']['avx512']}, "
         f"AMX: {result['machine']['amx']}), shared with other jobs: load average {result['load_average_start']} "
         f"at the start, {result['load_average_end']} at the end. Latency: medians of {result['reps']} rounds "
         f"interleaved across all points, one thread, one {result['size']} image (grid {result['grid_thw']}), same "
         "input. Cosines: the worst per-token (per output row) cosine against the fp32 model over the validation "
         f"layouts {', '.join(result.get('cases') or ['(all)'])} and every output, from each stage's report; stress = the same quantization of the outlier-stress copy "
         "(a few residual-stream channels scaled 20–100×) against its own fp32 outputs. Random weights."),
        "",
        "| point | s | vs fp32 | MiB | min per-token cos | outlier stress | MatMuls kept fp32 | flags |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        mark = " **(best INT8)**" if r["label"] == best.get("int8") else \
            " **(best INT4)**" if r["label"] == best.get("int4") else ""
        lines.append(f"| {r['label']}{mark} | {r['median_s']:.3f} | {r['speedup']:.2f}× | {r['mib']:.0f} | "
                     f"{_cos(r['token_cosine'])} | {_cos(r['stress_token_cosine'])} | {r['fp32_matmuls_excluded']} | "
                     f"`{' '.join(r['flags'])}` |")
    for p in result.get("failed", []):
        lines.append(f"| {p['label']} | failed ({p['error']}) | | | | | | `{' '.join(p['flags'])}` |")
    lines += ["", f"Choice: {best['rule']}.", ""]
    if "int8" in best:
        r = next(x for x in result["rows"] if x["label"] == best["int8"])
        ok = [r["speedup"] >= t["int8_speedup"], r["token_cosine"] >= t["token_cosine"],
              (r["stress_token_cosine"] or 0) >= t["stress_token_cosine"]]
        lines += ["## Targets (best INT8, this run)", "", "| target | measured | met |", "|---|---:|:---:|",
                  f"| ≥ {t['int8_speedup']}× faster than optimized fp32 | {r['speedup']:.2f}× | {'yes' if ok[0] else 'no'} |",
                  (f"| min per-token cosine ≥ {t['token_cosine']} (random weights) | {_cos(r['token_cosine'])} | "
                   f"{'yes' if ok[1] else 'no'} |"),
                  (f"| min per-token cosine ≥ {t['stress_token_cosine']} (outlier stress) | "
                   f"{_cos(r['stress_token_cosine'])} | {'yes' if ok[2] else 'no'} |"), ""]
    lines += [f"fp32 (optimized): {fp32['median_s']:.3f} s, {fp32['mib']:.0f} MiB.", "",
              f"![accuracy against latency]({png})", ""]
    return "\n".join(lines)


def plot(result: dict, path) -> None:
    """1 - min per-token cosine (log) against latency: filled = random weights, hollow = outlier stress."""
    fig, ax = plt.subplots(figsize=(10, 6))
    fp32 = result["rows"][0]
    ax.axvline(fp32["median_s"], color=COLORS["fp32"], linestyle="--", label=f"fp32 ({fp32['median_s']:.2f} s)")
    for r in result["rows"][1:]:
        color = COLORS.get(r["stage"], "black")
        for value, fill in ((r["token_cosine"], color), (r["stress_token_cosine"], "none")):
            if value is not None:
                ax.scatter(r["median_s"], max(1 - value, 1e-7), s=50, facecolors=fill, edgecolors=color)
        ax.annotate(r["label"], (r["median_s"], max(1 - r["token_cosine"], 1e-7)), fontsize=7,
                    xytext=(4, 2), textcoords="offset points")
    for stage, color in COLORS.items():
        if stage != "fp32":
            ax.scatter([], [], color=color, label=f"{stage}, random weights")
            ax.scatter([], [], facecolors="none", edgecolors=color, label=f"{stage}, outlier stress")
    for target in (result["targets"]["token_cosine"], result["targets"]["stress_token_cosine"]):
        ax.axhline(1 - target, color="tab:green", linewidth=0.8, linestyle=":")
    ax.set_yscale("log")
    ax.set_xlabel(f"seconds (median), {result['size']}, 1 thread")
    ax.set_ylabel("1 − min per-token cosine vs fp32 (log; lower is better)")
    ax.set_title(f"{result['model']}: accuracy against latency (dotted: targets 0.999 and 0.99)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
