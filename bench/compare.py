"""`python -m bench.compare [--models qwen2-vl qwen2.5-vl qwen3-vl qwen3.5 phi-4-mm]`: the pipelines side by side,
from real runs, into docs/comparison.md (and the figures as docs/comparison.json).

Reads the stage folders `make export MODEL=...` wrote (build/MODEL/{export,optimized,int8,int4}/: model and
report) and measures latency and run-time memory here. Per model: export path, time and peak memory; each
stage's peak memory; declared dims of the I/O (what the graph can vary at run time and what it cannot); node
counts by op type before and after optimize and the fused ops; fp32, INT8 and INT4 sizes; accuracy of each
variant (export vs eager; INT8 and INT4 vs fp32, random and outlier-stress weights); latency of the optimized
fp32, INT8 and INT4 graphs per image at 448x448 and 1024x1024 (a random image through the family's own
processor, configured as its release package would be) and per output token; the peak RSS of one run of each
variant at 1024x1024, each in its own process (`bench.scale_point`). Timings: medians of `--reps` runs after a
warm-up, variants interleaved, all models in one run.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx_ir as ir

from vlm_vision_onnx.core import onnx_io, session
from vlm_vision_onnx.core import report as reports
from vlm_vision_onnx.core.errors import Parser, UsageError, main_wrapper
from vlm_vision_onnx.core.machine import describe, machine
from vlm_vision_onnx.core.parity import worst
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.families import FAMILIES, family
from vlm_vision_onnx.release.variants import ALWAYS

ROOT = Path(__file__).resolve().parents[1]
SIZES = [(448, 448), (1024, 1024)]
STAGES = ("export", *ALWAYS)
VARIANTS = {"fp32": "optimized", "int8": "int8", "int4": "int4"}
#: Every model `make compare` puts side by side (build/NAME of `make export MODEL=NAME`): each family at published
#: dims, by its family name (a config or alias of configs/).
MODELS = list(FAMILIES)


def read_stages(model: str, build: Path) -> dict[str, dict]:
    """{stage: {"model": path, "report": dict}} of BUILD/MODEL, UsageError naming the missing stage."""
    found = {}
    for stage in STAGES:
        folder = build / model / stage
        if not (folder / "report.json").is_file():
            raise UsageError(f"{folder} is missing: run `make export MODEL={model}` first")
        found[stage] = {"model": onnx_io.model_path(folder), "report": reports.read_beside(folder / "model.onnx")}
    return found


def op_counts(model_file: Path) -> dict[str, int]:
    """{op type: count} of the graph (Loop bodies included), read without the weights."""
    model = ir.serde.deserialize_model(onnx_io.read_proto(model_file))
    counts: dict[str, int] = {}
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def fused_weight_bytes(model_file: Path) -> int:
    """Bytes of the weights held by fused com.microsoft ops other than MatMulNBits (ORT's Attention takes
    the q, k, v weights into one): MatMul-weight quantizers cannot reach them. Read without the weights."""
    graph = onnx_io.read_proto(model_file).graph
    sizes = {t.name: int(np.prod(t.dims)) * 4 for t in graph.initializer if t.data_type == 1}
    return sum(sizes.get(name, 0) for node in graph.node if node.domain == "com.microsoft"
               and node.op_type != "MatMulNBits" for name in node.input)


def declared_dims(model_file: Path) -> dict[str, list]:
    """{input/output name: dims (int or symbol)} as the graph declares them."""
    graph = onnx_io.read_proto(model_file).graph
    weights = {t.name for t in graph.initializer}
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in [*graph.input, *graph.output] if v.name not in weights}


def image_feeds(fam_name: str, export_report: dict, model_file: Path) -> dict[str, dict]:
    """{'HxW': feeds} for one random RGB image of each size through the family's processor."""
    fam = family(fam_name)
    metadata = onnx_io.metadata(model_file)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        fam.release.write_config(export_report, metadata, Path(tmp))
        fam.release.write_processor(export_report, metadata, Path(tmp))
        processor = fam.processing.processor(Path(tmp))
        return {f"{h}x{w}": fam.processing.image_inputs(rng.integers(0, 256, (h, w, 3), dtype=np.uint8), processor)
                for h, w in SIZES}


def time_all(models: dict[str, dict], threads: int, reps: int) -> dict:
    """{model: {variant: {size: {median_s, tokens, runs_s}}}}: every (model, variant) session open at once,
    runs interleaved round-robin so that load on the shared cores hits every point alike."""
    points = []
    for name, info in models.items():
        for variant, stage in VARIANTS.items():
            sess = session.open_session(info["stages"][stage]["model"], threads)
            for size, feeds in info["feeds"].items():
                tokens = session.run(sess, feeds)  # warm-up
                points.append((name, variant, size, sess, feeds, next(iter(tokens.values())).shape[0]))
    runs = {(p[0], p[1], p[2]): [] for p in points}
    for rep in range(reps):
        say(f"latency round {rep + 1}/{reps} ({len(points)} points)")
        for name, variant, size, sess, feeds, _ in points:
            start = time.perf_counter()
            sess.run(None, feeds)
            runs[(name, variant, size)].append(round(time.perf_counter() - start, 4))
    result: dict = {}
    for name, variant, size, _, _, tokens in points:
        median = statistics.median(runs[(name, variant, size)])
        result.setdefault(name, {}).setdefault(variant, {})[size] = {
            "median_s": median, "tokens": int(tokens), "ms_per_token": round(1000 * median / tokens, 3),
            "runs_s": runs[(name, variant, size)]}
    return result


def runtime_memory(models: dict[str, dict], threads: int) -> dict:
    """{model: {variant: peak RSS MiB}} of one run at the largest size, each in its own `bench.scale_point`
    process (so that the peak is that variant's alone)."""
    size = "{}x{}".format(*SIZES[-1])
    found: dict = {}
    for name, info in models.items():
        grid = json.dumps(info["feeds"][size]["grid_thw"].tolist()) if "grid_thw" in info["feeds"][size] else None
        for variant, stage in VARIANTS.items():
            if grid is None:  # Phi-4-multimodal: its feeds are not a grid; measured in-process by time_all only
                continue
            done = subprocess.run([sys.executable, "-m", "bench.scale_point", str(info["stages"][stage]["model"]),
                                   grid, "--reps", "1", "--threads", str(threads)], capture_output=True, text=True,
                                  cwd=ROOT, check=False)
            lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
            record = json.loads(lines[-1]) if lines else {"error": done.stderr.strip()[-200:]}
            found.setdefault(name, {})[variant] = record.get("peak_rss_mib")
            say(f"{name} {variant} at {size}: peak RSS {record.get('peak_rss_mib')} MiB")
    return found


def _stage_peak(report: dict) -> float:
    peak = report.get("peak_rss_mib")
    return peak["total"] if isinstance(peak, dict) else peak


def summarize(name: str, stages: dict[str, dict]) -> dict:
    """The figures of one pipeline, from its stage reports and graphs."""
    export, optimized, int8, int4 = (stages[s]["report"] for s in STAGES)
    before, after = op_counts(stages["export"]["model"]), op_counts(stages["optimized"]["model"])
    export_worst = worst([c for c in export["validation"]["cases"] if "outputs" in c])
    int8_worst, int4_worst = worst(int8["validation"]["cases"]), worst(int4["validation"]["cases"])
    stress8, stress = ((r.get("outlier_stress") or {}).get("validation") or {} for r in (int8, int4))
    return {
        "model": export["model"], "family": export["family"], "exporter": export["exporter"], "opset": export["opset"],
        "export_s": round(sum(export["timings_s"].values()), 1), "export_peak_mib": export["peak_rss_mib"]["total"],
        "dims": declared_dims(stages["export"]["model"]),
        "ops_before": before, "ops_after": after,
        "fused": {k: v for k, v in after.items() if k.startswith("com.microsoft.")},
        "stage_peak_mib": {s: _stage_peak(stages[s]["report"]) for s in STAGES},
        "fp32_bytes": sum(optimized["files"].values()), "int8_bytes": sum(int8["files"].values()),
        "int4_bytes": sum(int4["files"].values()),
        "int8_min_token_cosine": int8_worst["min_token_cosine"],
        "int8_stress_min_token_cosine": stress8.get("min_token_cosine"),
        "int4_fused_fp32_bytes": fused_weight_bytes(stages["int4"]["model"]),
        "int4_settings": int4.get("config"),
        "export_cases": len(export["validation"]["cases"]), "export_passed": export["validation"]["passed"],
        "export_max_abs": export_worst["max_abs"], "export_min_cosine": export_worst["min_cosine"],
        "int4_min_token_cosine": int4_worst["min_token_cosine"],
        "int4_stress_min_token_cosine": stress.get("min_token_cosine"),
    }


def _varies(dims: dict[str, list]) -> tuple[str, str]:
    """(what varies, what is fixed) at run time, from the declared dims."""
    symbols = sorted({d for shape in dims.values() for d in shape if isinstance(d, str)})
    fixed = [f"{n} {[d for d in shape]}" for n, shape in dims.items()
             if any(isinstance(d, int) for d in shape)]
    return ", ".join(symbols), "; ".join(f"`{f}`" for f in fixed)


def _cosines(random: float, stress: float | None) -> str:
    return f"{random:.4f} / " + (f"{stress:.4f}" if stress else "–")


def render(summaries: dict[str, dict], timings: dict, memory: dict, facts: dict) -> str:
    names = list(summaries)
    head = "| | " + " | ".join(f"`{summaries[n]['model']}`" for n in names) + " |"
    rule = "|---|" + "---:|" * len(names)

    def row(label, fn):
        return f"| {label} | " + " | ".join(fn(summaries[n], n) for n in names) + " |"

    mib = lambda b: f"{b / 2**20:,.0f} MiB"
    lines = [
        "# The Qwen generations and Phi-4-multimodal through the same pipeline",
        "",
        (f"Written by `make compare` (`python -m bench.compare`) on {facts['machine']}, {facts['created']}, from "
        "the stage folders of `make export` for each model (random weights at the published dims); "
        + (f"latency measured in the run of {facts['latency_from']} (`--latency-from`; the rest in this one): "
           if facts.get("latency_from") else "latency measured in this run: ")
        + f"{facts['threads']} thread(s), median of {facts['reps']} runs after a warm-up, "
        "all points interleaved. Latency is of one random RGB image through the family's own processor."),
        "",
        "## Export and graphs",
        "",
        head, rule,
        row("export path (opset)", lambda s, n: f"{s['exporter']} ({s['opset']})"),
        row("export + validation wall time", lambda s, n: f"{s['export_s']} s"),
        row("export peak RSS", lambda s, n: f"{s['export_peak_mib']:,.0f} MiB"),
        row("peak RSS of optimize / int8 / int4", lambda s, n: " / ".join(
            f"{s['stage_peak_mib'][k]:,.0f}" for k in ALWAYS) + " MiB"),
        row("parity vs eager (cases, worst max abs diff, min cosine)",
            lambda s, n: f"{s['export_cases']} cases {'passed' if s['export_passed'] else 'FAILED'}, "
                         f"{s['export_max_abs']:.2e}, {s['export_min_cosine']:.6f}"),
        row("varies at run time (symbolic dims)", lambda s, n: _varies(s["dims"])[0]),
        row("fixed (static dims)", lambda s, n: _varies(s["dims"])[1]),
        row("nodes before / after optimize", lambda s, n: f"{sum(s['ops_before'].values())} / {sum(s['ops_after'].values())}"),
        row("fused ops after optimize", lambda s, n: ", ".join(f"{k.split('.')[-1]} {v}" for k, v in s["fused"].items())),
        row("fp32 size (optimized)", lambda s, n: mib(s["fp32_bytes"])),
        row("INT8 size", lambda s, n: f"{mib(s['int8_bytes'])} ({100 * s['int8_bytes'] / s['fp32_bytes']:.0f}%)"),
        row("INT4 size", lambda s, n: f"{mib(s['int4_bytes'])} ({100 * s['int4_bytes'] / s['fp32_bytes']:.0f}%)"),
        row("INT4: fp32 weights inside fused ops (not MatMuls, so not quantized)",
            lambda s, n: mib(s["int4_fused_fp32_bytes"])),
        row("INT8 min per-token cosine vs fp32 (random / outlier-stress weights)",
            lambda s, n: _cosines(s["int8_min_token_cosine"], s["int8_stress_min_token_cosine"])),
        row("INT4 min per-token cosine vs fp32 (random / outlier-stress weights)",
            lambda s, n: _cosines(s["int4_min_token_cosine"], s["int4_stress_min_token_cosine"])),
        row("peak RSS of one fp32 / INT8 / INT4 run at {} (own process)".format("x".join(map(str, SIZES[-1]))),
            lambda s, n: " / ".join(f"{memory[n][v]:,.0f}" if memory.get(n, {}).get(v) else "–"
                                    for v in VARIANTS) + " MiB"),
        "",
        "## Latency (ONNX Runtime CPU)",
        "",
        "| model | variant | size | tokens | median s | ms per output token |",
        "|---|---|---|---:|---:|---:|",
    ]
    for n in names:
        for variant, sizes in timings[n].items():
            for size, t in sizes.items():
                lines.append(f"| `{summaries[n]['model']}` | {variant} | {size} | {t['tokens']} | "
                             f"{t['median_s']:.3f} | {t['ms_per_token']:.2f} |")
    lines += ["", "## Node counts by op type (export -> optimized)", ""]
    for n in names:
        s = summaries[n]
        ops = sorted(set(s["ops_before"]) | set(s["ops_after"]),
                     key=lambda k: -(s["ops_before"].get(k, 0) + s["ops_after"].get(k, 0)))
        lines += [f"`{s['model']}`:", "", "| op | export | optimized |", "|---|---:|---:|"]
        lines += [f"| {k} | {s['ops_before'].get(k, 0)} | {s['ops_after'].get(k, 0)} |" for k in ops]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m bench.compare", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=MODELS, help="build/NAME folders to compare")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--build", type=Path, default=ROOT / "build", help="folder holding build/MODEL/<stage>/")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "comparison.md")
    parser.add_argument("--list", action="store_true", help="print the default models, one per line, and exit "
                        "(`make compare` exports the missing ones)")
    parser.add_argument("--latency-from", type=Path,
                        help="take the latency of an earlier run's JSON (same models) and measure only the rest")

    def body() -> int:
        args = parser.parse_args(argv)
        if args.list:
            print("\n".join(MODELS))
            return 0
        if args.threads < 1 or args.reps < 1:
            raise UsageError(f"--threads and --reps must be >= 1, got {args.threads} and {args.reps}")
        models = {}
        for name in args.models:
            stages = read_stages(name, args.build)
            export = stages["export"]["report"]
            models[name] = {"stages": stages,
                            "feeds": image_feeds(export["family"], export, stages["optimized"]["model"])}
        summaries = {n: summarize(n, m["stages"]) for n, m in models.items()}
        facts = {"machine": describe(machine()), "created": time.strftime("%Y-%m-%d"), "threads": args.threads,
                 "reps": args.reps}
        if args.latency_from:
            earlier = json.loads(args.latency_from.read_text())
            if set(earlier["latency"]) != set(models):
                raise UsageError(f"{args.latency_from} times {sorted(earlier['latency'])}, not {sorted(models)}")
            timings = earlier["latency"]
            facts.update(threads=earlier["facts"]["threads"], reps=earlier["facts"]["reps"],
                         latency_from=f"{earlier['facts']['created']}, {earlier['facts']['machine']}")
        else:
            timings = time_all(models, args.threads, args.reps)
        memory = runtime_memory(models, args.threads)
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(render(summaries, timings, memory, facts) + "\n")
        results = args.out.with_suffix(".json")
        results.write_text(json.dumps({"facts": facts, "summaries": summaries, "latency": timings,
                                       "runtime_peak_rss_mib": memory}, indent=1) + "\n")
        say(f"wrote {args.out} and {results}")
        return 0

    return main_wrapper(body)


if __name__ == "__main__":
    raise SystemExit(main())
