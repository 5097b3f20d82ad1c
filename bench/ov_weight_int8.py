"""`python -m bench.ov_weight_int8 --build build/qwen3-vl-2b`: an OpenVINO INT8 of another kind, measured before
it is built as a stage: int8 weights with activations quantized at run time, against ONNX Runtime's INT8 and
OpenVINO bf16.

The ov-int8 stage (quantize/ov_int8.py) quantizes activations statically (NNCF FakeQuantize, one range per tensor
from the calibration photos): fastest on AVX-512 VNNI but under the 0.998 floor on photos at Qwen3-VL-2B
(bench/results/cpu-race-avx512-bf16.md). OpenVINO's CPU plugin also runs a FullyConnected whose weight is a
compressed int8 constant (Constant i8 -> Convert -> Multiply by a per-output-channel scale) with its activations
quantized per group of `DYNAMIC_QUANTIZATION_GROUP_SIZE` values at run time (the plugin's default, 32), the
attention in bf16. NNCF's `compress_weights` does not read this tool's graphs (its graph builder fails on the
segment attention's If), so `compress` writes that pattern itself: every MatMul with a 2-D float constant weight of
at least 65,536 values but the patch embedding (it reads the pixels), symmetric int8 per output channel
(scale = max |w| / 127).

Paths, one process, interleaved after a warm-up (whose outputs give the accuracy: min per-token cosine over every
output against ONNX Runtime fp32 on the optimized file): ORT INT8 (BUILD/int8), OV bf16 (the optimized file),
OV bf16 with the compressed weights at group size 32 and 0 (no activation quantization: weights decompressed).
Cases: bench.cpu_race's (the astronaut at each size, the rocket video). Writes bench/results/ov-weight-int8[-SUFFIX].json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.cpu_race import cases
from bench.timing import load_average, write_results
from core import cpu, openvino_session
from core.engine import default_precision
from core.machine import describe, machine
from core.openvino_session import OpenVINOSession
from core.parity import min_token_cosine
from core.progress import say
from core.session import open_session

ROOT = Path(__file__).resolve().parents[1]
TAG = "ov-weight-int8"
MIN_ELEMENTS = 65536
GROUPS = (32, 0)


def compress(source: Path, out: Path) -> int:
    """OUT (an IR): SOURCE with every large constant-weight MatMul's weight as int8 + per-channel scale, the patch
    embedding left float; returns how many weights were compressed."""
    from openvino import Type, opset13, save_model

    from quantize.ov_int8 import pixel_matmuls

    model = openvino_session._openvino().Core().read_model(str(source))
    pixels, count = set(pixel_matmuls(model)), 0
    for op in model.get_ordered_ops():
        if op.get_type_name() != "MatMul" or op.get_friendly_name() in pixels:
            continue
        weight = op.input_value(1).get_node()
        if weight.get_type_name() != "Constant":
            continue
        w = weight.get_data().astype(np.float32)
        if w.ndim != 2 or w.size < MIN_ELEMENTS:
            continue
        k_axis = 1 if op.get_transpose_b() else 0
        scale = np.abs(w).max(axis=k_axis, keepdims=True) / 127.0
        scale[scale == 0] = 1.0
        q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
        decompressed = opset13.multiply(opset13.convert(opset13.constant(q), Type.f32),
                                        opset13.constant(scale.astype(np.float32)))
        op.input(1).replace_source_output(decompressed.output(0))
        count += 1
    save_model(model, str(out), compress_to_fp16=False)
    return count


def markdown(result: dict) -> str:
    labels = list(next(iter(result["cases"].values())))
    lines = [f"# OpenVINO int8 weights with run-time activation quantization: {result['model']}", "",
             (f"`{result['command']}` on {describe(result['machine'])}; CPU flags: {', '.join(result['cpu_flags'])}; "
              f"{result['started']} - {result['finished']}. {result['compressed']} MatMul weights compressed. Medians "
              f"of {result['reps']} interleaved rounds in one process, {result['threads']} threads; accuracy: min "
              "per-token cosine over every output against ONNX Runtime fp32 on the same feed."), "",
             "| path | " + " | ".join(result["cases"]) + " |", "|---|" + "---:|" * len(result["cases"])]
    for label in labels:
        cells = [f"{c[label]['median_s']:.3f} s, {c[label]['min_token_cosine']:.5f}" for c in result["cases"].values()]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ov_weight_int8", description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build" / "qwen3-vl-2b")
    parser.add_argument("--sizes", default="448,1024")
    parser.add_argument("--video", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--suffix", default="")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    fp32, int8 = args.build / "optimized" / "model.onnx", args.build / "int8" / "model.onnx"
    for path in (fp32, int8):
        if not path.exists():
            print(f"error: {path} is missing: run `make export MODEL=...` first", file=sys.stderr)
            return 2
    result = {"command": "python -m bench.ov_weight_int8 " + " ".join(argv if argv is not None else sys.argv[1:]),
              "model": args.build.name, "machine": machine(), "reps": args.reps, "threads": args.threads,
              "cpu_flags": [f for f in ("avx512_vnni", "avx512_bf16", "amx_bf16", "amx_int8") if cpu.has(f)],
              "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_average_start": load_average(), "cases": {}}
    feeds = cases(fp32, [int(s) for s in args.sizes.split(",") if s], args.video)
    reference = open_session(fp32, args.threads)
    expected = {case: reference.run(None, f) for case, f in feeds.items()}
    del reference
    with tempfile.TemporaryDirectory(prefix="ov-weight-int8-") as tmp:
        compressed = Path(tmp) / "model.xml"
        result["compressed"] = compress(fp32, compressed)
        say(f"{result['compressed']} MatMul weights compressed to int8", TAG)
        precision = default_precision()
        opened = {"ORT INT8": open_session(int8, args.threads),
                  f"OV {precision}": OpenVINOSession(fp32, args.threads, precision)}
        for group in GROUPS:
            opened[f"OV {precision}, int8 weights, group {group}"] = OpenVINOSession(
                compressed, args.threads, precision, {"DYNAMIC_QUANTIZATION_GROUP_SIZE": group})
        for case, feed in feeds.items():
            accuracy = {label: min(min_token_cosine(g, r) for g, r in zip(path.run(None, feed), expected[case]))
                        for label, path in opened.items()}
            times = {label: [] for label in opened}
            for _ in range(args.reps):
                for label, path in opened.items():
                    start = time.perf_counter()
                    path.run(None, feed)
                    times[label].append(time.perf_counter() - start)
            result["cases"][case] = {label: {"median_s": round(statistics.median(times[label]), 3),
                                             "runs_s": [round(t, 3) for t in times[label]],
                                             "min_token_cosine": round(float(accuracy[label]), 5)}
                                     for label in opened}
            say(f"{case}: " + ", ".join(f"{k} {v['median_s']} s {v['min_token_cosine']}"
                                        for k, v in result["cases"][case].items()), TAG)
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    stem = "ov-weight-int8" + (f"-{args.suffix}" if args.suffix else "")
    write_results(args.out, stem, result, markdown(result), TAG)
    return 0


if __name__ == "__main__":
    sys.exit(main())
