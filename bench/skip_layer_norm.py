"""`python -m bench.skip_layer_norm`: ORT's CPU SkipLayerNormalization against Add + LayerNormalization.

Why the optimize stage ships no SkipLayerNormalization (quantize/passes/unfuse_skip_layer_norm.py). One
residual normalisation at each family's 448x448 activation shape (Qwen3-VL 2B [784, 1024], rank 2;
Phi-4-multimodal [2, 1025, 1152], rank 3), with the residual sum as an output as in the encoders, in two forms:
  SkipLayerNormalization      com.microsoft, what ORT's transformer optimizer fuses
  Add + LayerNormalization    the standard ops (opset 17+)
Both forms interleaved, --reps rounds after a warm-up, at 1 and 2 intra-op threads; medians and the ratio.
Writes bench/results/skip-layer-norm.json and .md.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from bench.timing import interleaved, load_average, write_results
from core.errors import Parser, UsageError, main_wrapper
from core.machine import describe, machine
from core.progress import say

ROOT = Path(__file__).resolve().parents[1]
TAG = "skip-layer-norm"
SHAPES = {"qwen3-vl 2B": [784, 1024], "phi-4-mm": [2, 1025, 1152]}
FORMS = ("SkipLayerNormalization", "Add + LayerNormalization")
EPSILON = 1e-6


def form_model(form: str, shape: list[int]) -> bytes:
    """x, r [shape] -> (y = LayerNorm(x + r), s = x + r) in `form`; gamma and beta random [shape[-1]]."""
    rng = np.random.default_rng(0)
    width = shape[-1]
    inits = [numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), n) for n in ("gamma", "beta")]
    if form == "SkipLayerNormalization":
        nodes = [helper.make_node("SkipLayerNormalization", ["x", "r", "gamma", "beta"], ["y", "", "", "s"],
                                  domain="com.microsoft", epsilon=EPSILON)]
    else:
        nodes = [helper.make_node("Add", ["x", "r"], ["s"]),
                 helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=-1, epsilon=EPSILON)]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "r", "y", "s")]
    graph = helper.make_graph(nodes, "residual_norm", io[:2], io[2:], inits)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def measure(shape: list[int], threads: int, reps: int) -> dict:
    """{form: {median_s, times_s}} plus the outputs' max abs difference between the forms."""
    rng = np.random.default_rng(1)
    feed = {n: rng.standard_normal(shape, dtype=np.float32) for n in ("x", "r")}
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    sessions = {form: ort.InferenceSession(form_model(form, shape), options, providers=["CPUExecutionProvider"])
                for form in FORMS}
    outputs = [s.run(None, feed) for s in sessions.values()]
    diff = max(float(np.abs(a - b).max()) for a, b in zip(*outputs, strict=True))
    times = interleaved({form: (lambda s=s: s.run(None, feed)) for form, s in sessions.items()}, reps)
    return {"times": times, "max_abs_diff": diff,
            "ratio": times[FORMS[0]]["median_s"] / times[FORMS[1]]["median_s"]}


def markdown(result: dict) -> str:
    lines = ["# SkipLayerNormalization against Add + LayerNormalization on ONNX Runtime's CPU", "",
             (f"Produced by `{result['command']}`, {result['started']}. Machine: {describe(result['machine'])} "
             f"(load average {result['load_average_start']} at start), onnxruntime {result['onnxruntime']}. One "
             f"residual normalisation (the sum an output too), {result['reps']} interleaved rounds after a warm-up, "
             "medians."), "",
             "| shape | threads | SkipLayerNormalization ms | Add + LayerNormalization ms | ratio | max abs diff |",
             "|---|---:|---:|---:|---:|---:|"]
    for row in result["rows"]:
        t = row["times"]
        lines.append(f"| {row['model']} {row['shape']} | {row['threads']} | {t[FORMS[0]]['median_s'] * 1000:.2f} | "
                     f"{t[FORMS[1]]['median_s'] * 1000:.2f} | {row['ratio']:.2f}× | {row['max_abs_diff']:.1e} |")
    lines += ["", ("ratio: SkipLayerNormalization's time over Add + LayerNormalization's. The optimize stage splits "
              "every SkipLayerNormalization (`unskipln`), so the shipped models run the standard pair.")]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = Parser(prog="python -m bench.skip_layer_norm", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20, help="interleaved rounds (default 20)")
    parser.add_argument("--threads", default="1,2", help="intra-op thread counts (default 1,2)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results",
                        help="where skip-layer-norm.json and .md go (default bench/results)")

    def body() -> int:
        args = parser.parse_args(argv)
        try:
            threads = [int(t) for t in args.threads.split(",") if t.strip()]
        except ValueError:
            raise UsageError(f"--threads must be comma-separated integers, got {args.threads!r}") from None
        if args.reps < 1 or not threads or min(threads) < 1:
            raise UsageError(f"--reps and every --threads value must be >= 1, got {args.reps} and {args.threads}")
        result = {"command": shlex.join(["python", "-m", "bench.skip_layer_norm", *argv]), "machine": machine(),
                  "onnxruntime": ort.__version__, "reps": args.reps, "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                  "load_average_start": load_average(), "rows": []}
        for model, shape in SHAPES.items():
            for count in threads:
                row = {"model": model, "shape": shape, "threads": count, **measure(shape, count, args.reps)}
                result["rows"].append(row)
                say(f"{model} {shape}, {count} thread(s): SkipLayerNormalization {row['ratio']:.2f}x the time of "
                    "Add + LayerNormalization", TAG)
        write_results(args.out, "skip-layer-norm", result, markdown(result), TAG)
        return 0

    return main_wrapper(body)


if __name__ == "__main__":
    raise SystemExit(main())
