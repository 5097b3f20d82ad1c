"""`python -m bench.window_attention`: Qwen2.5-VL's window attention, a Loop over windows or padded windows batched.

One window attention at Qwen2.5-VL-3B dims (16 heads x 80, width 1280, windows of 8 x 8 patches) on one frame
of each size (448x448, 1024x1024 and 2048x2048 through the processor: 32 x 32, 74 x 74, 146 x 146 patches; the
last two cut windows at the edges), q/k/v [1, N, 1280] in window order, in two forms:
  loop over windows    the shipped lowering (builders/qwen_vl/segment_attention.py, window=8): one unmasked
                       MultiHeadAttention per window, inside a Loop
  padded windows       every window gathered into [S, 64, 1280] (S windows, 64 rows; rows past a cut window's
                       size repeat its first row), ONE MultiHeadAttention over the batch of windows with a key
                       padding mask [S, 64], the valid rows gathered back
Both are O(N) in memory (no N x N tensor). Time: one thread, medians of --reps rounds interleaved across the
forms, same input; peak RSS of the process is recorded once at the end. Writes bench/results/window-attention.json
and .md. The test `tests/test_window_attention_bench.py` checks that both forms compute the same.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import onnx
import onnxscript
from onnx import TensorProto, helper
from onnxscript import FLOAT, INT64
from onnxscript import opset18 as op
from onnxscript.values import Opset

from bench.timing import interleaved, load_average, write_results
from core.machine import describe, machine
from core.report import peak_rss_mib

ROOT = Path(__file__).resolve().parents[1]
HEADS, HEAD_DIM, WINDOW = 16, 80, 8
#: One frame per size (pixels of the photo) and its grid in patches (Qwen2.5-VL's processor, patch 14).
FRAMES = {"448x448": (32, 32), "1024x1024": (74, 74), "2048x2048": (146, 146)}
FORMS = ("loop over windows", "padded windows")
_msft = Opset("com.microsoft", 1)
DOMAIN = "bench_window"


@onnxscript.script(Opset(DOMAIN, 1), default_opset=op)
def PaddedWindows(query: FLOAT, key: FLOAT, value: FLOAT, grid_thw: INT64, num_heads: int, scale: float,
                  window: int) -> FLOAT:
    """[1, N, C] x 3 in window order, grid_thw [I, 3] -> [1, N, C]: the windows padded to window**2 rows, one
    masked MultiHeadAttention over all of them. Window sizes as the shipped function derives them."""
    t = op.Gather(grid_thw, 0, axis=1)
    h = op.Gather(grid_thw, 1, axis=1)
    w = op.Gather(grid_thw, 2, axis=1)
    side = op.Constant(value_int=window)
    across_h = op.Div(op.Sub(op.Add(h, side), 1), side)
    across_w = op.Div(op.Sub(op.Add(w, side), 1), side)
    per_frame = op.Mul(across_h, across_w)
    per_image = op.Mul(t, per_frame)
    segments = op.ReduceSum(per_image, keepdims=0)
    segment = op.Range(0, segments, 1)
    image_ends = op.CumSum(per_image, 0)
    image = op.ReduceSum(op.Cast(op.GreaterOrEqual(op.Unsqueeze(segment, [1]), op.Unsqueeze(image_ends, [0])),
                                 to=INT64.dtype), [1], keepdims=0)
    local = op.Sub(segment, op.Gather(op.Sub(image_ends, per_image), image))
    frame_windows = op.Gather(per_frame, image)
    in_frame = op.Sub(local, op.Mul(op.Div(local, frame_windows), frame_windows))
    row = op.Div(in_frame, op.Gather(across_w, image))
    col = op.Sub(in_frame, op.Mul(row, op.Gather(across_w, image)))
    rows = op.Min(side, op.Sub(op.Gather(h, image), op.Mul(row, side)))
    cols = op.Min(side, op.Sub(op.Gather(w, image), op.Mul(col, side)))
    size = op.Mul(rows, cols)  # [S]
    starts = op.Sub(op.CumSum(size, 0), size)  # [S]
    slots = op.Range(0, op.Mul(side, side), 1)  # [W*W]
    valid = op.Less(op.Unsqueeze(slots, [0]), op.Unsqueeze(size, [1]))  # [S, W*W]
    rows_of = op.Where(valid, op.Add(op.Unsqueeze(starts, [1]), op.Unsqueeze(slots, [0])),
                       op.Unsqueeze(starts, [1]))  # [S, W*W] padded slots repeat the window's first row
    q = op.Gather(op.Squeeze(query, [0]), rows_of, axis=0)  # [S, W*W, C]
    k = op.Gather(op.Squeeze(key, [0]), rows_of, axis=0)
    v = op.Gather(op.Squeeze(value, [0]), rows_of, axis=0)
    mask = op.Cast(valid, to=6)  # int32 [S, W*W]: 1 = a real row
    attended = _msft.MultiHeadAttention(q, k, v, None, mask, num_heads=num_heads, scale=scale)  # [S, W*W, C]
    flat = op.Reshape(attended, op.Concat(op.Constant(value_ints=[-1]), op.Shape(query, start=2), axis=0))
    kept = op.Reshape(op.NonZero(op.Reshape(valid, [-1])), [-1])  # [N] slots holding real rows, in order
    return op.Unsqueeze(op.Gather(flat, kept, axis=0), [0])


PaddedWindows.function_ir.opset_imports["com.microsoft"] = 1


def build(form: str, width: int = HEADS * HEAD_DIM, heads: int = HEADS) -> onnx.ModelProto:
    """One call of the form's function: query, key, value [1, N, width], grid_thw [I, 3] -> out [1, N, width]."""
    from builders.qwen_vl.segment_attention import SEGMENT_ATTENTION  # the shipped lowering

    function = SEGMENT_ATTENTION if form == FORMS[0] else PaddedWindows
    proto = function.to_function_proto()
    names = ["query", "key", "value"]
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, "N", width]) for x in names]
    inputs.append(helper.make_tensor_value_info("grid_thw", TensorProto.INT64, ["I", 3]))
    from builders.qwen_vl.segment_attention import CHUNK_ROWS

    chunk = {"chunk": CHUNK_ROWS["contrib"]} if form == FORMS[0] else {}
    node = helper.make_node(proto.name, [*names, "grid_thw"], ["out"], domain=proto.domain, num_heads=heads,
                            scale=(width // heads) ** -0.5, window=WINDOW, **chunk)
    graph = helper.make_graph([node], "window_attention", inputs,
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    imports = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1),
               helper.make_opsetid(proto.domain, 1)]
    return helper.make_model(graph, opset_imports=imports, functions=[proto], ir_version=10)


def markdown(result: dict) -> str:
    lines = ["# Window attention: a Loop over windows or padded windows batched", "",
             (f"Produced by `python -m bench.window_attention`, {result['started']} – {result['finished']}. Machine: "
              f"{describe(result['machine'])} (load average {result['load_average_start']} at start). One window "
              f"attention at Qwen2.5-VL-3B dims ({HEADS} heads x {HEAD_DIM}, windows of {WINDOW} x {WINDOW} patches) "
              f"on one frame, {result['threads']} thread, medians of {result['reps']} rounds interleaved across the "
              f"forms. Peak RSS of the whole run: {result['peak_rss_mib']:.0f} MiB."), "",
             "| frame | patches | windows | loop over windows (s) | padded windows (s) | padded / loop |",
             "|---|---:|---:|---:|---:|---:|"]
    for r in result["points"]:
        loop, padded = r["median_s"][FORMS[0]], r["median_s"][FORMS[1]]
        lines.append(f"| {r['frame']} | {r['num_patches']} | {r['windows']} | {loop:.4f} | {padded:.4f} | "
                     f"{padded / loop:.2f}× |")
    lines += ["", result["decision"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.window_attention", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    import onnxruntime as ort

    result = {"machine": machine(), "threads": args.threads, "reps": args.reps, "load_average_start": load_average(),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "points": []}
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    sessions = {form: ort.InferenceSession(build(form).SerializeToString(), options,
                                           providers=["CPUExecutionProvider"]) for form in FORMS}
    rng = np.random.default_rng(0)
    for frame, (h, w) in FRAMES.items():
        n = h * w
        feed = {x: rng.standard_normal((1, n, HEADS * HEAD_DIM), dtype=np.float32) for x in ("query", "key", "value")}
        feed["grid_thw"] = np.array([[1, h, w]], np.int64)
        outs = {form: s.run(None, feed)[0] for form, s in sessions.items()}
        diff = float(np.abs(outs[FORMS[0]] - outs[FORMS[1]]).max())
        timed = interleaved({form: (lambda s=s, feed=feed: s.run(None, feed)) for form, s in sessions.items()}, args.reps)
        medians = {form: t["median_s"] for form, t in timed.items()}
        windows = -(-h // WINDOW) * -(-w // WINDOW)
        result["points"].append({"frame": frame, "num_patches": n, "windows": windows, "max_abs_diff": diff,
                                 "median_s": medians})
        print(f"[window_attention] {frame}: {medians} (max abs diff {diff:.2e})", flush=True)
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    result["peak_rss_mib"] = peak_rss_mib()
    ratios = [p["median_s"][FORMS[1]] / p["median_s"][FORMS[0]] for p in result["points"]]
    faster = FORMS[0] if np.median(ratios) >= 1 else FORMS[1]
    result["decision"] = (f"Faster at the median frame: **{faster}** (padded / loop {min(ratios):.2f}–"
                          f"{max(ratios):.2f}×). The export ships the loop over windows "
                          "(builders/qwen_vl/segment_attention.py): one lowering for frames and windows.")
    write_results(args.out, "window-attention", result, markdown(result), "window_attention")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
