"""`python -m bench.skip_layer_norm`: ORT's CPU residual normalisations, fused or not.

Why the optimize stage ships no SkipLayerNormalization (quantize/passes/unfuse_skip_layer_norm.py), and which
form of Qwen2.5-VL's RMSNorm it ships. One residual normalisation at each family's 448x448 activation shape
(Qwen3-VL 2B [784, 1024], rank 2; Phi-4-multimodal [2, 1025, 1152], rank 3; Qwen2.5-VL 3B [1024, 1280], RMSNorm),
with the residual sum as an output as in the encoders, in the forms of its kind (FORMS):
  LayerNorm: SkipLayerNormalization (com.microsoft, what ORT's transformer optimizer fuses) against
             Add + LayerNormalization (the standard ops, opset 17+)
  RMSNorm:   SkipSimplifiedLayerNormalization (com.microsoft) and Add + SimplifiedLayerNormalization (ORT's fused
             RMSNorm, what the optimize stage ships) against Add + the exported ops (Pow, ReduceMean, Add, Sqrt,
             Reciprocal, Mul, Mul)
The forms interleaved, --reps rounds after a warm-up, at 1 and 2 intra-op threads; medians, and the ratio of the
first form's time over the second's. Writes bench/results/skip-layer-norm.json and .md.
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
from vlm_vision_onnx.core.errors import Parser, UsageError, main_wrapper
from vlm_vision_onnx.core.machine import describe, machine
from vlm_vision_onnx.core.progress import say

ROOT = Path(__file__).resolve().parents[1]
TAG = "skip-layer-norm"
#: model -> (norm kind, activation shape at 448x448)
SHAPES = {"qwen3-vl 2B": ("layer", [784, 1024]), "phi-4-mm": ("layer", [2, 1025, 1152]),
          "qwen2.5-vl 3B": ("rms", [1024, 1280])}
FORMS = {"layer": ("SkipLayerNormalization", "Add + LayerNormalization"),
         "rms": ("SkipSimplifiedLayerNormalization", "Add + SimplifiedLayerNormalization", "Add + RMSNorm ops")}
EPSILON = 1e-6


def _rms_ops(x: str, out: str) -> list:
    """RMSNorm as the export writes it: x * 1 / sqrt(mean(x^2) + eps) * gamma."""
    return [helper.make_node("Pow", [x, "two"], ["sq"]),
            helper.make_node("ReduceMean", ["sq", "last"], ["var"], keepdims=1),
            helper.make_node("Add", ["var", "eps"], ["var_eps"]),
            helper.make_node("Sqrt", ["var_eps"], ["std"]),
            helper.make_node("Reciprocal", ["std"], ["inv"]),
            helper.make_node("Mul", [x, "inv"], ["normed"]),
            helper.make_node("Mul", ["gamma", "normed"], [out])]


def form_model(form: str, shape: list[int]) -> bytes:
    """x, r [shape] -> (y = Norm(x + r), s = x + r) in `form`; gamma (and LayerNorm's beta) random [shape[-1]]."""
    rng = np.random.default_rng(0)
    width = shape[-1]
    inits = [numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), n) for n in ("gamma", "beta")]
    inits += [numpy_helper.from_array(np.array(v, dtype), n) for n, v, dtype in
              (("two", 2.0, np.float32), ("eps", EPSILON, np.float32), ("last", [-1], np.int64))]
    add = helper.make_node("Add", ["x", "r"], ["s"])
    if form == "SkipLayerNormalization":
        nodes = [helper.make_node("SkipLayerNormalization", ["x", "r", "gamma", "beta"], ["y", "", "", "s"],
                                  domain="com.microsoft", epsilon=EPSILON)]
    elif form == "Add + LayerNormalization":
        nodes = [add, helper.make_node("LayerNormalization", ["s", "gamma", "beta"], ["y"], axis=-1, epsilon=EPSILON)]
    elif form == "SkipSimplifiedLayerNormalization":
        nodes = [helper.make_node("SkipSimplifiedLayerNormalization", ["x", "r", "gamma"], ["y", "", "", "s"],
                                  domain="com.microsoft", epsilon=EPSILON)]
    elif form == "Add + SimplifiedLayerNormalization":
        nodes = [add, helper.make_node("SimplifiedLayerNormalization", ["s", "gamma"], ["y"], axis=-1,
                                       epsilon=EPSILON)]
    else:
        nodes = [add, *_rms_ops("s", "y")]
    io = [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "r", "y", "s")]
    graph = helper.make_graph(nodes, "residual_norm", io[:2], io[2:], inits)
    opsets = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10).SerializeToString()


def measure(forms: tuple[str, ...], shape: list[int], threads: int, reps: int) -> dict:
    """{form: {median_s, times_s}} plus the outputs' max abs difference from the first form's, and the ratio of
    the first form's time over the second's."""
    rng = np.random.default_rng(1)
    feed = {n: rng.standard_normal(shape, dtype=np.float32) for n in ("x", "r")}
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    sessions = {form: ort.InferenceSession(form_model(form, shape), options, providers=["CPUExecutionProvider"])
                for form in forms}
    first, *others = [s.run(None, feed) for s in sessions.values()]
    diff = max(float(np.abs(a - b).max()) for other in others for a, b in zip(first, other, strict=True))
    times = interleaved({form: (lambda s=s: s.run(None, feed)) for form, s in sessions.items()}, reps)
    return {"times": times, "max_abs_diff": diff,
            "ratio": times[forms[0]]["median_s"] / times[forms[1]]["median_s"]}


def markdown(result: dict) -> str:
    lines = ["# SkipLayerNormalization against Add + LayerNormalization on ONNX Runtime's CPU", "",
             (f"Produced by `{result['command']}`, {result['started']}. Machine: {describe(result['machine'])} "
             f"(load average {result['load_average_start']} at start), onnxruntime {result['onnxruntime']}. One "
             f"residual normalisation (the sum an output too), {result['reps']} interleaved rounds after a warm-up, "
             "medians."), "",
             ]
    for kind, forms in FORMS.items():
        lines += ["", "| shape | threads | " + " | ".join(f"{f} ms" for f in forms) + " | ratio | max abs diff |",
                  "|---|---:|" + "---:|" * (len(forms) + 2)]
        for row in (r for r in result["rows"] if r["kind"] == kind):
            t = row["times"]
            ms = " | ".join(f"{t[f]['median_s'] * 1000:.2f}" for f in forms)
            lines.append(f"| {row['model']} {row['shape']} | {row['threads']} | {ms} | {row['ratio']:.2f}× | "
                         f"{row['max_abs_diff']:.1e} |")
    lines += ["", ("ratio: the first form's time over the second's. The optimize stage splits every "
              "SkipLayerNormalization (`unskipln`), so the shipped models run Add + LayerNormalization; Qwen2.5-VL's "
              "RMSNorm ships as Add + SimplifiedLayerNormalization (ORT's optimizer fuses it; no pass makes the "
              "Skip form).")]
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
        for model, (kind, shape) in SHAPES.items():
            forms = FORMS[kind]
            for count in threads:
                row = {"model": model, "kind": kind, "shape": shape, "threads": count,
                       **measure(forms, shape, count, args.reps)}
                result["rows"].append(row)
                say(f"{model} {shape}, {count} thread(s): {forms[0]} {row['ratio']:.2f}x the time of {forms[1]}",
                    TAG)
        write_results(args.out, "skip-layer-norm", result, markdown(result), TAG)
        return 0

    return main_wrapper(body)


if __name__ == "__main__":
    raise SystemExit(main())
