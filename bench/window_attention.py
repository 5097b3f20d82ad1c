"""`python -m bench.window_attention`: Qwen2.5-VL's window attention, a Loop over windows or windows batched.

One window attention at Qwen2.5-VL-3B dims (16 heads x 80, width 1280, windows of 8 x 8 patches) on one frame
of each size (448x448, 1024x1024 and 2048x2048 through the processor: 32 x 32, 74 x 74, 146 x 146 patches; the
last two cut windows at the edges), q/k/v [1, N, 1280] in window order, in two forms:
  loop over windows    the lowering shipped until 2026-11-28: `segment_attention`'s Loop, one unmasked
                       MultiHeadAttention per window (run here by handing it one [1, 1, size] frame per window)
  windows batched      the shipped lowering (builders/qwen_vl/window_attention.py): full windows as one batch,
                       the windows cut at an edge as a second, key-masked one
on three engines: ONNX Runtime's CPU EP, OpenVINO f32 and, where the CPU has it, OpenVINO bf16.
Both forms are O(N) in memory (no N x N tensor). Time: --threads threads, medians of --reps rounds interleaved
across forms and engines, same input; peak RSS of the process is recorded once at the end. Writes
bench/results/window-attention.json and .md. The test `tests/test_window_attention_bench.py` checks that both
forms compute the same.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from bench.timing import interleaved, load_average, write_results
from vlm_vision_onnx.core.machine import describe, machine
from vlm_vision_onnx.core.report import peak_rss_mib

ROOT = Path(__file__).resolve().parents[1]
HEADS, HEAD_DIM, WINDOW = 16, 80, 8
#: One frame per size (pixels of the photo) and its grid in patches (Qwen2.5-VL's processor, patch 14).
FRAMES = {"448x448": (32, 32), "1024x1024": (74, 74), "2048x2048": (146, 146)}
FORMS = ("loop over windows", "windows batched")
#: A form and engine whose first run takes longer than this (seconds) is not repeated: its one run is its figure.
SLOW_S = 10.0


def build(form: str, width: int = HEADS * HEAD_DIM, heads: int = HEADS) -> onnx.ModelProto:
    """One call of the form's function, inlined: query, key, value [1, N, width], grid_thw [I, 3] (the loop's:
    one [1, 1, size] row per window, `window_grid`) -> out [1, N, width]."""
    from builders.onnx_export import inline_functions
    from builders.qwen_vl.segment_attention import CHUNK_ROWS, SEGMENT_ATTENTION
    from builders.qwen_vl.window_attention import WINDOW_ATTENTION

    if form == FORMS[0]:
        proto, attrs = SEGMENT_ATTENTION.to_function_proto(), {"chunk": CHUNK_ROWS["contrib"]}
    else:
        proto, attrs = WINDOW_ATTENTION.to_function_proto(), {"window": WINDOW}
    names = ["query", "key", "value"]
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, "N", width]) for x in names]
    inputs.append(helper.make_tensor_value_info("grid_thw", TensorProto.INT64, ["I", 3]))
    node = helper.make_node(proto.name, [*names, "grid_thw"], ["out"], domain=proto.domain, num_heads=heads,
                            scale=(width // heads) ** -0.5, **attrs)
    graph = helper.make_graph([node], "window_attention", inputs,
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    imports = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1),
               helper.make_opsetid(proto.domain, 1)]
    return inline_functions(helper.make_model(graph, opset_imports=imports, functions=[proto], ir_version=10))


def window_grid(grid: list[list[int]]) -> np.ndarray:
    """grid_thw int64 [S, 3] that makes each window of `grid` one frame of its own: [1, 1, window rows]."""
    from builders.qwen_vl.segment_attention import segment_sizes

    return np.array([[1, 1, size] for size in segment_sizes(grid, WINDOW)], np.int64)


def feed_of(form: str, feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The form's inputs for a window-ordered feed with the frames' grid_thw."""
    return dict(feed, grid_thw=window_grid(feed["grid_thw"].tolist())) if form == FORMS[0] else feed


def sessions(threads: int) -> dict[str, object]:
    """{"form, engine": run(feed) -> out [1, N, C]} for every form on every engine this machine has."""
    import onnxruntime as ort

    from vlm_vision_onnx.core import openvino_session

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    runs = {}
    folder = Path(tempfile.mkdtemp(prefix="window-attention-"))
    precisions = ["f32", "bf16"] if openvino_session.available() and openvino_session.bf16_supported() else \
        ["f32"] if openvino_session.available() else []
    for form in FORMS:
        path = folder / f"{form.replace(' ', '-')}.onnx"
        onnx.save(build(form), path)
        ort_session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        runs[f"{form}, ORT"] = lambda feed, s=ort_session, f=form: s.run(None, feed_of(f, feed))[0]
        for precision in precisions:
            ov_session = openvino_session.OpenVINOSession(path, threads, precision)
            runs[f"{form}, OV {precision}"] = lambda feed, s=ov_session, f=form: s.run(["out"], feed_of(f, feed))[0]
    return runs


def markdown(result: dict) -> str:
    labels = result["labels"]
    lines = ["# Window attention: a Loop over windows or windows batched", "",
             (f"Produced by `python -m bench.window_attention --threads {result['threads']}`, {result['started']} – "
              f"{result['finished']}. Machine: {describe(result['machine'])} (load average "
              f"{result['load_average_start']} at start). One window attention at Qwen2.5-VL-3B dims ({HEADS} heads "
              f"x {HEAD_DIM}, windows of {WINDOW} x {WINDOW} patches) on one frame, {result['threads']} thread(s), "
              f"medians of {result['reps']} rounds interleaved across forms and engines (seconds; '1 run': its first run "
              f"took over {SLOW_S:.0f} s and was not repeated). Peak RSS of the "
              f"whole run: {result['peak_rss_mib']:.0f} MiB."), "",
             "| frame | patches | windows | " + " | ".join(labels) + " |", "|---|---:|---:|" + "---:|" * len(labels)]
    for r in result["points"]:
        lines.append(f"| {r['frame']} | {r['num_patches']} | {r['windows']} | "
                     + " | ".join(f"{r['median_s'][label]:.4f}" + (" (1 run)" if label in r["one_run"] else "")
                                  for label in labels) + " |")
    lines += ["", result["decision"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.window_attention", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)

    result = {"machine": machine(), "threads": args.threads, "reps": args.reps, "load_average_start": load_average(),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "points": []}
    runs = sessions(args.threads)
    result["labels"] = list(runs)
    rng = np.random.default_rng(0)
    for frame, (h, w) in FRAMES.items():
        n = h * w
        feed = {x: rng.standard_normal((1, n, HEADS * HEAD_DIM), dtype=np.float32) for x in ("query", "key", "value")}
        feed["grid_thw"] = np.array([[1, h, w]], np.int64)
        outs, first = {}, {}
        for label, run in runs.items():
            start = time.perf_counter()
            outs[label] = run(feed)
            first[label] = time.perf_counter() - start
        reference = outs[f"{FORMS[0]}, ORT"]
        diffs = {label: float(np.abs(out - reference).max()) for label, out in outs.items()}
        # a form that took more than SLOW_S once is not repeated: its one run is its figure
        slow = {label: t for label, t in first.items() if t > SLOW_S}
        timed = interleaved({label: (lambda run=run, feed=feed: run(feed)) for label, run in runs.items()
                             if label not in slow}, args.reps)
        medians = {label: timed[label]["median_s"] if label in timed else slow[label] for label in runs}
        windows = -(-h // WINDOW) * -(-w // WINDOW)
        result["points"].append({"frame": frame, "num_patches": n, "windows": windows, "max_abs_diff": diffs,
                                 "median_s": medians, "one_run": sorted(slow)})
        print(f"[window_attention] {frame}: {medians} (max abs diff against the ORT loop {diffs})", flush=True)
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    result["peak_rss_mib"] = peak_rss_mib()
    engines = sorted({label.split(", ", 1)[1] for label in runs})
    ratios = {engine: [p["median_s"][f"{FORMS[0]}, {engine}"] / p["median_s"][f"{FORMS[1]}, {engine}"]
                       for p in result["points"]] for engine in engines}
    result["decision"] = ("Loop / batched, per engine (frames " + ", ".join(FRAMES) + "): "
                          + "; ".join(f"{engine} " + ", ".join(f"{r:.2f}×" for r in rs) for engine, rs in ratios.items())
                          + ". The export ships the windows batched (builders/qwen_vl/window_attention.py).")
    write_results(args.out, "window-attention", result, markdown(result), "window_attention")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
