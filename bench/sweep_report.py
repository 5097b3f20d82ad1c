"""Markdown table and accuracy-latency plot of a `bench.sweep` result (pure functions of its json)."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from vlm_vision_onnx.core.machine import describe
from vlm_vision_onnx.release.variants import QUANTIZED

COLORS = {"fp32": "tab:gray", "int8": "tab:blue", "int4": "tab:orange"}


def _cos(value) -> str:
    return "–" if value is None else f"{value:.5f}"


FLOOR_TEXT = {"token_cosine": ("min per-token cosine (random weights)", "≥"),
              "stress_token_cosine": ("min per-token cosine (realistic outlier stress)", "≥"),
              "photo_token_cosine": ("min per-token cosine (held-out photos)", "≥"),
              "speedup": ("speed vs optimized fp32", "≥"), "size_ratio": ("size vs fp32", "≤")}


def _value(key: str, value) -> str:
    if value is None:
        return "–"
    return f"{value:.2f}×" if key == "speedup" else f"{100 * value:.1f}%" if key == "size_ratio" else _cos(value)


def markdown(result: dict, png: str) -> str:
    best, fp32 = result["best"], result["rows"][0]
    floors = best.get("floors") or result.get("floors", {})
    m = result["machine"]
    lines = [
        f"# Quantization sweep: {result['model']} ({result['size']}, one thread)",
        "",
        (f"Produced by `python -m bench.sweep --model {result['model']}` (`make bench`), {result['started']} – "
         f"{result['finished']}. Machine: {describe(m)} (AVX-512: {m['avx512']}, AMX: {m['amx']}, VNNI: "
         f"{m.get('vnni')}), load average {result['load_average_start']} at the start, {result['load_average_end']} "
         f"at the end. Latency: medians of {result['reps']} rounds interleaved across all points, one thread, one "
         f"{result['size']} photo ({result.get('layout') or {'grid_thw': result.get('grid_thw')}}), same input. Cosines: the worst per-token (per "
         "output row) cosine against the fp32 model, every output, from each stage's report: random = the "
         f"model's own (random) weights at {', '.join(result.get('cases') or ['(all)'])}; realistic stress = the "
         "stage's gate, a copy whose residual stream carries 4 channels 20–100× written once by the patch "
         "embedding (as massive activations appear in trained ViTs), at the probe layouts and the largest one; "
         "worst case = every writer of the stream scaled (each block amplifies its input's error into those "
         "channels), at the probe layouts, reported only; photos = the same weights on real photos no stage "
         f"calibrates on ({', '.join((result.get('photos') or {}).get('photos', ['not measured']))}), through the "
         "family's processor."),
        "",
        "| point | s | vs fp32 | MiB | size | random | photos | realistic stress | worst case | fp32 MatMuls | 8-bit MatMuls | flags |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in result["rows"]:
        mark = " **(shipped INT8)**" if r["label"] == best.get("int8") else \
            " **(shipped INT4)**" if r["label"] == best.get("int4") else ""
        lines.append(f"| {r['label']}{mark} | {r['median_s']:.3f} | {r['speedup']:.2f}× | {r['mib']:.0f} | "
                     f"{100 * r.get('size_ratio', 1):.1f}% | {_cos(r['token_cosine'])} | {_cos(r.get('photo_token_cosine'))} | "
                     f"{_cos(r['stress_token_cosine'])} | {_cos(r.get('worst_token_cosine'))} | "
                     f"{r['fp32_matmuls_excluded']} | {r.get('int8_matmuls', 0)} | `{' '.join(r['flags'])}` |")
    for p in result.get("failed", []):
        lines.append(f"| {p['label']} | failed ({p['error']}) | | | | | | | | | | `{' '.join(p['flags'])}` |")
    if result.get("not_run"):
        lines += ["", f"Not run this time (`--only` / `--skip`): {', '.join(result['not_run'])}."]
    lines += ["", f"Choice: {best['rule']}.", ""]
    for stage in QUANTIZED:
        if stage not in best or stage not in floors:
            continue
        r = next(x for x in result["rows"] if x["label"] == best[stage])
        lines += [f"## Floors of the shipped {stage.upper()} ({r['label']}, this run)", "",
                  "| floor | measured | met |", "|---|---:|:---:|"]
        for key, limit in floors[stage].items():
            text, sign = FLOOR_TEXT[key]
            value = r.get(key)
            ok = value is not None and (value <= limit if sign == "≤" else value >= limit)
            lines.append(f"| {text} {sign} {_value(key, limit)} | {_value(key, value)} | {'yes' if ok else '**no**'} |")
        lines.append("")
    lines += [f"fp32 (optimized): {fp32['median_s']:.3f} s, {fp32['mib']:.0f} MiB.", "",
              f"![accuracy against latency and size]({png})", ""]
    return "\n".join(lines)


def plot(result: dict, path) -> None:
    """The Pareto plot: 1 - min per-token cosine (log) against latency (left) and size (right); per point a
    filled marker (random weights), a hollow one (realistic stress) and a cross (worst case)."""
    fig, axes = plt.subplots(1, 2, figsize=(15, 6), sharey=True)
    fp32 = result["rows"][0]
    floors = result["best"].get("floors") or {}
    for ax, x_key, x_label in ((axes[0], "median_s", f"seconds (median), {result['size']}, 1 thread"),
                               (axes[1], "mib", "MiB on disk")):
        ax.axvline(fp32[x_key], color=COLORS["fp32"], linestyle="--", label=f"fp32 ({fp32[x_key]:.2f})")
        for r in result["rows"][1:]:
            color = COLORS.get(r["stage"], "black")
            x = r[x_key]
            for key, face, marker in (("token_cosine", color, "o"), ("stress_token_cosine", "none", "o"),
                                      ("worst_token_cosine", color, "x")):
                value = r.get(key)
                if value is not None:
                    kwargs = {"facecolors": face, "edgecolors": color} if marker == "o" else {"color": color}
                    ax.scatter(x, max(1 - value, 1e-7), s=45, marker=marker, **kwargs)
            ax.annotate(r["label"], (x, max(1 - r["token_cosine"], 1e-7)), fontsize=6, xytext=(4, 2),
                        textcoords="offset points")
        for stage_floors in floors.values():
            for key in ("token_cosine", "stress_token_cosine"):
                ax.axhline(1 - stage_floors[key], color="tab:green", linewidth=0.6, linestyle=":")
        ax.set_yscale("log")
        ax.set_xlabel(x_label)
    for stage, color in COLORS.items():
        if stage != "fp32":
            axes[0].scatter([], [], color=color, label=f"{stage}, random weights")
            axes[0].scatter([], [], facecolors="none", edgecolors=color, label=f"{stage}, realistic stress")
            axes[0].scatter([], [], color=color, marker="x", label=f"{stage}, worst case (reported)")
    axes[0].set_ylabel("1 − min per-token cosine vs fp32 (log; lower is better)")
    fig.suptitle(f"{result['model']}: accuracy against latency and size (dotted: the floors)")
    axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
