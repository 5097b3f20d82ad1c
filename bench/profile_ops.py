"""`python -m bench.profile_ops --model qwen3-vl`: where each stage's time goes, by op type and category.

For each variant's stage model build/MODEL/VARIANT/model.onnx (default: optimized, int8, int4), either family,
one photo resized to --size through the family's processor (`bench.timing.photo_feed`), --threads intra-op
threads: the wall time of --reps runs after a warm-up without profiling, then the same with ONNX Runtime's
profiler on (`enable_profiling`). The trace's kernel events (`"cat": "Node"`, `args.op_name`) are summed per
op type and per category for the run with the median summed node time. Nodes inside an If or Loop body (the
segment attention) are events of their own, counted under their op type; the If's or Loop's event spans its
body, so it is counted by its own time (its span minus its body's kernels) and reported with its span. ORT fuses DynamicQuantizeLinear + MatMulInteger (+ Cast + Mul)
into DynamicQuantizeMatMul at session load: that activation quantization is inside the integer MatMul time.
A missing variant is one line and skipped. Writes bench/results/profile-MODEL[-SUFFIX].json and .md; ORT's trace files
go to a temporary folder.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path

import onnxruntime as ort

from bench.timing import TIMING_PHOTO, interleaved, load_average, photo_feed, shown, write_results
from vlm_vision_onnx.core.errors import Parser, UsageError, main_wrapper
from vlm_vision_onnx.core.machine import describe, machine
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.core.session import ORT_ERRORS, open_session, ort_error_line
from vlm_vision_onnx.release.variants import ALWAYS
from vlm_vision_onnx.runtime.smoke import integer_values

ROOT = Path(__file__).resolve().parents[1]
TAG = "profile-ops"
VARIANTS = ALWAYS  # the stages every `make export` builds
#: category: op types as the trace names them (`args.op_name`: no domain). Unlisted op types are "other".
CATEGORIES: dict[str, frozenset[str]] = {
    "quantize/dequantize": frozenset({"DynamicQuantizeLinear", "QuantizeLinear", "DequantizeLinear"}),
    "integer MatMul": frozenset({"MatMulInteger", "DynamicQuantizeMatMul", "MatMulIntegerToFloat", "QLinearMatMul",
                                 "MatMulNBits", "QGemm"}),
    "fp32 MatMul/Gemm": frozenset({"MatMul", "Gemm", "FusedMatMul", "FusedGemm"}),
    #: The segment attention is an If (one batched MHA when every segment has one size) around a Loop (per segment).
    "attention": frozenset({"MultiHeadAttention", "Attention", "Softmax", "Loop", "If"}),
    "LayerNorm": frozenset({"LayerNormalization", "SkipLayerNormalization", "SimplifiedLayerNormalization",
                            "SkipSimplifiedLayerNormalization", "RMSNormalization"}),
    "activation": frozenset({"Gelu", "FastGelu", "BiasGelu", "QuickGelu"}),
    "RoPE": frozenset({"RotaryEmbedding"}),
    "other": frozenset(),
}
MATMUL_CATEGORIES = ("integer MatMul", "fp32 MatMul/Gemm")
#: Ops whose kernel event spans the kernels of their subgraphs.
SUBGRAPH_OPS = frozenset({"Loop", "If", "Scan"})
TOP = 10


def category(op: str) -> str:
    return next((name for name, ops in CATEGORIES.items() if op in ops), "other")


# ---------------------------------------------------------------- the trace
def _kernels(trace: list[dict]) -> list[dict]:
    """The kernel events of a trace (`"cat": "Node"` with an op_name; not the fence events older ORTs write)."""
    return [e for e in trace if e.get("cat") == "Node" and "op_name" in e.get("args", {})
            and not e.get("name", "").endswith(("_fence_before", "_fence_after"))]


def _inside(inner: dict, outer: dict) -> bool:
    return (inner is not outer and inner.get("tid") == outer.get("tid") and outer["ts"] <= inner["ts"]
            and inner["ts"] + inner["dur"] <= outer["ts"] + outer["dur"])


def run_breakdown(kernels: list[dict]) -> dict:
    """One run's kernel events -> {ops: {op: {us, calls}}, subgraphs: {op: {calls, span_us, self_us, body_us}},
    total_us}. A subgraph op (Loop) counts its own time (its span minus the kernels directly in it), so that
    `total_us` is the sum of the top-level spans and no kernel is counted twice; `body_us` holds what ran in
    its bodies, by op type (span = own time + body)."""
    containers = [e for e in kernels if e["args"]["op_name"] in SUBGRAPH_OPS]
    parent = {}  # id(event) -> the innermost container event holding it
    for e in kernels:
        holders = [c for c in containers if _inside(e, c)]
        parent[id(e)] = min(holders, key=lambda c: c["dur"]) if holders else None
    direct = {id(c): 0.0 for c in containers}
    for e in kernels:
        if parent[id(e)] is not None:
            direct[id(parent[id(e)])] += e["dur"]
    ops: dict[str, dict] = {}
    subgraphs: dict[str, dict] = {}

    def subgraph(op: str) -> dict:
        return subgraphs.setdefault(op, {"calls": 0, "span_us": 0.0, "self_us": 0.0, "body_us": {}})

    for e in kernels:
        op = e["args"]["op_name"]
        own = max(0.0, e["dur"] - direct[id(e)]) if id(e) in direct else float(e["dur"])
        rec = ops.setdefault(op, {"us": 0.0, "calls": 0})
        rec["us"] += own
        rec["calls"] += 1
        if id(e) in direct:
            sub = subgraph(op)
            sub["calls"] += 1
            sub["span_us"] += e["dur"]
            sub["self_us"] += own
        holder = parent[id(e)]
        while holder is not None:  # in the body of every enclosing container
            body = subgraph(holder["args"]["op_name"])["body_us"]
            body[op] = body.get(op, 0.0) + own
            holder = parent[id(holder)]
    return {"ops": ops, "subgraphs": subgraphs, "total_us": sum(r["us"] for r in ops.values())}


def aggregate(trace: list[dict], warmup: int = 1) -> dict:
    """An ORT profile trace (the event list of `end_profiling()`'s JSON) -> the breakdown of the run with
    the median summed node time, after `warmup` runs: {runs, node_ms_per_run, node_ms, categories, ops,
    subgraphs}. Runs are the `model_run` session events; kernels belong to the run whose span holds them."""
    runs = sorted((e for e in trace if e.get("cat") == "Session" and e.get("name") == "model_run"),
                  key=lambda e: e["ts"])[warmup:]
    if not runs:
        raise ValueError(f"the trace has no model run after {warmup} warm-up run(s)")
    kernels = _kernels(trace)
    per_run = [run_breakdown([k for k in kernels if _inside(k, run)]) for run in runs]
    order = sorted(range(len(per_run)), key=lambda i: per_run[i]["total_us"])
    chosen = per_run[order[(len(order) - 1) // 2]]
    total = chosen["total_us"]

    def ms(us: float) -> float:
        return round(us / 1000, 3)

    def share(us: float) -> float:
        return round(us / total, 4) if total else 0.0

    by_category = dict.fromkeys(CATEGORIES, 0.0)
    for op, rec in chosen["ops"].items():
        by_category[category(op)] += rec["us"]
    categories = {name: {"ms": ms(us), "share": share(us)} for name, us in by_category.items()}
    ops = {op: {"category": category(op), "calls": rec["calls"], "ms": ms(rec["us"]), "share": share(rec["us"])}
           for op, rec in sorted(chosen["ops"].items(), key=lambda kv: -kv[1]["us"])}
    subgraphs = {op: {"calls": s["calls"], "span_ms": ms(s["span_us"]), "self_ms": ms(s["self_us"]),
                      "body_ms": {k: ms(v) for k, v in sorted(s["body_us"].items(), key=lambda kv: -kv[1])}}
                 for op, s in chosen["subgraphs"].items()}
    return {"runs": len(runs), "node_ms_per_run": [ms(r["total_us"]) for r in per_run], "node_ms": ms(total),
            "categories": categories, "ops": ops, "subgraphs": subgraphs}


# ---------------------------------------------------------------- measuring
def _profiled_session(path: Path, threads: int, prefix: Path) -> ort.InferenceSession:
    """A CPU session of `path` with ORT's profiler on (open_session has no profiling option)."""
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = threads
    options.enable_profiling = True
    options.profile_file_prefix = str(prefix)
    try:
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except ORT_ERRORS as exc:
        raise UsageError(f"ONNX Runtime cannot load {path}: {ort_error_line(exc)}") from None


def _timed(sess: ort.InferenceSession, feeds: dict, reps: int, path: Path) -> dict:
    """One warm-up, then `reps` timed runs: {median_s, times_s}."""
    try:
        return interleaved({"run": lambda: sess.run(None, feeds)}, reps)["run"]
    except ORT_ERRORS as exc:
        raise UsageError(f"ONNX Runtime cannot run {path}: {ort_error_line(exc)}") from None


def profile_variant(path: Path, feeds: dict, threads: int, reps: int, tmp: Path) -> dict:
    """Wall time without and with profiling, and the profiled breakdown (`aggregate`) of `path`."""
    plain = open_session(path, threads)
    wall = _timed(plain, feeds, reps, path)
    del plain
    sess = _profiled_session(path, threads, tmp / path.parent.name)
    profiled = _timed(sess, feeds, reps, path)
    trace = json.loads(Path(sess.end_profiling()).read_text())
    del sess
    return {"model_file": shown(path), "wall": wall, "profiled_wall": profiled, **aggregate(trace, warmup=1)}


# ---------------------------------------------------------------- report
def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def largest_non_matmul(record: dict, count: int = 3) -> list[tuple[str, dict]]:
    """The `count` costliest op types outside the MatMul categories."""
    return [(op, r) for op, r in record["ops"].items() if r["category"] not in MATMUL_CATEGORIES][:count]


def variant_markdown(name: str, r: dict) -> list[str]:
    profiled_s = r["profiled_wall"]["median_s"]
    walls = (f"`{r['model_file']}`. Wall per run (median): {r['wall']['median_s'] * 1000:.1f} ms without "
             f"profiling, {profiled_s * 1000:.1f} ms with; summed node time {r['node_ms']:.1f} ms "
             f"({_pct(r['node_ms'] / 1000 / profiled_s)} of the profiled wall).")
    lines = [f"## {name}", "", walls, "", "| category | ms | share |", "|---|---:|---:|"]
    lines += [f"| {c} | {v['ms']:.2f} | {_pct(v['share'])} |" for c, v in r["categories"].items()]
    lines += ["", f"Top {TOP} op types:", "", "| op type | category | calls | ms | share |",
              "|---|---|---:|---:|---:|"]
    lines += [f"| {op} | {v['category']} | {v['calls']} | {v['ms']:.2f} | {_pct(v['share'])} |"
              for op, v in list(r["ops"].items())[:TOP]]
    for op, s in r["subgraphs"].items():
        body = ", ".join(f"{k} {v:.2f}" for k, v in list(s["body_ms"].items())[:4])
        lines += ["", (f"{op}: {s['calls']} call(s) spanning {s['span_ms']:.2f} ms: its own time "
                       f"{s['self_ms']:.2f} ms (counted under {category(op)}), body kernels (ms, counted under "
                       f"their op types): {body}.")]
    return lines + [""]


def markdown(result: dict) -> str:
    intro = (f"Produced by `{result['command']}`, {result['started']}. Machine: {describe(result['machine'])} "
             f"(load average {result['load_average_start']} at start), onnxruntime {result['onnxruntime']}. One "
             f"photo ({result['photo']}) of {result['size']} through the family's processor (pixel_values "
             f"{result['pixel_values_shape']}, {result['layout']}), "
             f"{result['threads']} thread(s). Per variant: one warm-up and {result['reps']} runs without "
             f"profiling (wall), then one warm-up and {result['reps']} runs with ONNX Runtime's profiler; the "
             "breakdown is the profiled run with the median summed node time. Node time is kernel time: the "
             "gap to the wall is the executor and profiler overhead between kernels.")
    lines = [f"# Where the time goes, by op: {result['model']}", "", intro, ""]
    if result["missing"]:
        lines += ["Missing (not profiled): " + ", ".join(f"{v} (`{p}`)" for v, p in result["missing"].items()) + ".",
                  ""]
    for name, record in result["variants"].items():
        lines += variant_markdown(name, record)
    lines += ["## Largest non-MatMul costs", ""]
    parts = []
    for name, r in result["variants"].items():
        top = ", ".join(f"{op} {_pct(v['share'])} ({v['ms']:.1f} ms)" for op, v in largest_non_matmul(r))
        matmul = sum(r["categories"][c]["share"] for c in MATMUL_CATEGORIES)
        quant = r["categories"]["quantize/dequantize"]["share"]
        parts.append(f"{name}: {top}; the MatMuls {_pct(matmul)}, quantize/dequantize {_pct(quant)}.")
    fused = [n for n, r in result["variants"].items() if "DynamicQuantizeMatMul" in r["ops"]]
    notes = ("In " + ", ".join(fused) + " ORT runs DynamicQuantizeMatMul (DynamicQuantizeLinear + MatMulInteger "
             "fused at load): its activation quantization is inside the integer MatMul time, not under "
             "quantize/dequantize. ") if fused else ""
    if any("MatMulNBits" in r["ops"] for r in result["variants"].values()):
        notes += ("MatMulNBits with accuracy_level 4 (the shipped INT8 and INT4 setting) quantizes its "
                  "activations to int8 inside the kernel: that time too is integer MatMul time. ")
    notes += ("If and Loop bodies (the segment attention) are traced kernel by kernel: their nodes count under "
              "their op types, the If or Loop under attention by its own time only (span minus body kernels).")
    lines += [" ".join(parts), "", notes]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- main
def parse_size(text: str) -> tuple[int, int]:
    found = re.fullmatch(r"(\d+)x(\d+)", text.strip())
    if not found or min(int(found[1]), int(found[2])) < 1:
        raise UsageError(f"--size must be HEIGHTxWIDTH in pixels, e.g. 448x448, got {text!r}")
    return int(found[1]), int(found[2])


def stage_models(build: Path, model: str, variants: list[str]) -> tuple[dict[str, Path], dict[str, str]]:
    """({variant: model.onnx} present, {variant: path} missing); UsageError when none is present."""
    paths = {variant: build / model / variant / "model.onnx" for variant in variants}
    present = {variant: path for variant, path in paths.items() if path.is_file()}
    missing = {variant: shown(path) for variant, path in paths.items() if variant not in present}
    if not present:
        raise UsageError(f"no stage model to profile: {', '.join(missing.values())} missing; run "
                         f"`make export MODEL={model}` first")
    for variant, path in missing.items():
        say(f"{variant}: {path} is missing: skipped (run `make export MODEL={model}` to build it)", TAG)
    return present, missing


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = Parser(prog="python -m bench.profile_ops", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-vl", help="build/MODEL (default qwen3-vl)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated stage folders of build/MODEL (default {','.join(VARIANTS)})")
    parser.add_argument("--size", default="448x448", help="image HEIGHTxWIDTH in pixels (default 448x448)")
    parser.add_argument("--threads", type=int, default=1, help="ORT intra-op threads (default 1)")
    parser.add_argument("--reps", type=int, default=3, help="timed runs after one warm-up (default 3)")
    parser.add_argument("--build", type=Path, default=ROOT / "build", help="folder holding MODEL/VARIANT/")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results",
                        help="where profile-MODEL.json and .md go (default bench/results)")
    parser.add_argument("--suffix", default="", help="profile-MODEL-SUFFIX.json and .md (another CPU's run beside)")

    def body() -> int:
        args = parser.parse_args(argv)
        if args.threads < 1 or args.reps < 1:
            raise UsageError(f"--threads and --reps must be >= 1, got {args.threads} and {args.reps}")
        height, width = parse_size(args.size)
        variants = list(dict.fromkeys(v.strip() for v in args.variants.split(",") if v.strip()))
        if not variants:
            raise UsageError("--variants names no stage folder")
        present, missing = stage_models(args.build, args.model, variants)
        feeds = photo_feed(next(iter(present.values())), (height, width))
        result = {"model": args.model, "command": "python -m bench.profile_ops " + shlex.join(argv),
                  "machine": machine(), "onnxruntime": ort.__version__, "size": f"{height}x{width}",
                  "photo": TIMING_PHOTO, "layout": integer_values(feeds),
                  "pixel_values_shape": list(feeds["pixel_values"].shape), "threads": args.threads,
                  "reps": args.reps, "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                  "load_average_start": load_average(), "missing": missing, "variants": {}}
        with tempfile.TemporaryDirectory(prefix="profile-ops-") as tmp:
            for variant, path in present.items():
                say(f"{variant}: {path}, {args.size}, {args.threads} thread(s), warm-up + {args.reps} runs, "
                    "without then with profiling", TAG)
                record = profile_variant(path, feeds, args.threads, args.reps, Path(tmp))
                result["variants"][variant] = record
                top = ", ".join(f"{c} {_pct(v['share'])}" for c, v in record["categories"].items() if v["share"])
                say(f"{variant}: {record['wall']['median_s'] * 1000:.1f} ms per run; node time "
                    f"{record['node_ms']:.1f} ms: {top}", TAG)
        result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
        name = f"profile-{args.model}" + (f"-{args.suffix}" if args.suffix else "")
        write_results(args.out, name, result, markdown(result), TAG)
        return 0

    return main_wrapper(body)


if __name__ == "__main__":
    raise SystemExit(main())
