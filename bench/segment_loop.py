"""`python -m bench.segment_loop`: the segment attention's Loop with steps of varying size or of a fixed size.

One attention at Qwen3-VL-2B dims (16 heads x 64, width 1024) and Qwen2.5-VL-3B's windows (16 heads x 80,
windows of 8 x 8 patches, each handed to the Loop as a frame of its own: the Loop over windows shipped until
2026-11-28; the windows now run batched, bench/window_attention.py) on q/k/v [1, N, width], in the forms:
  sequence loop        the lowering shipped until 2026-11-26: one unmasked MultiHeadAttention per segment, each
                       step's [1, rows, C] inserted into a sequence (SequenceInsert) and concatenated after.
                       OpenVINO's CPU Loop sizes such an output as trip count x the last step's size: wrong
                       results, heap corruption or a crash whenever the segments differ in size
                       (`bench/openvino_loop_bug.py`).
  fixed loop, Q=...    the shipped lowering (builders/qwen_vl/segment_attention.py): a segment's query rows in
                       chunks of Q = min(longest segment, chunk) rows against all its keys, each step's output
                       padded to [1, Q, C] (a Loop scan output of one size), the padding dropped after (Compress).
                       Shown at the chunks of CHUNK_ROWS (contrib: the default export; standard: `--ops
                       standard` before its lowering) and one between.
Both are O(N) in memory (no N x N tensor; the fixed form adds at most Q padding rows per segment). Time: one
thread, medians of --reps rounds interleaved across the forms, same input. Writes bench/results/segment-loop.json
and .md. `tests/test_segment_attention.py` checks that the forms compute the same.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import onnx
import onnxscript
from onnx import TensorProto, helper
from onnxscript import BOOL, FLOAT, INT64
from onnxscript import opset18 as op
from onnxscript.values import Opset

from bench.timing import interleaved, load_average, write_results
from builders.qwen_vl import segment_attention as seg
from vlm_vision_onnx.core.machine import describe, machine

ROOT = Path(__file__).resolve().parents[1]
_msft = Opset("com.microsoft", 1)
SEQUENCE = "sequence loop"
#: name -> (heads, head dim, window, grid_thw): frames of Qwen3-VL-2B (patch 16) and Qwen2.5-VL-3B's windows (patch 14).
CASES = {
    "448x448": (16, 64, 0, [[1, 28, 28]]),
    "448x448 + 336x336": (16, 64, 0, [[1, 28, 28], [1, 21, 21]]),
    "video 4 x 448x448": (16, 64, 0, [[2, 28, 28]]),
    "1024x1024": (16, 64, 0, [[1, 64, 64]]),
    "1024x1024 windows": (16, 80, 8, [[1, 74, 74]]),
}
CHUNKS = (seg.CHUNK_ROWS["contrib"], seg.CHUNK_ROWS["standard"], 4096)


@onnxscript.script(Opset("bench_segment", 1), default_opset=op)
def SequenceLoop(query: FLOAT, key: FLOAT, value: FLOAT, starts: INT64, ends: INT64, num_heads: int,
                 scale: float) -> FLOAT:
    """[1, N, C] x 3, segment rows [starts[s], ends[s]) -> [1, N, C]: the former lowering's Loop."""

    @onnxscript.graph()
    def segment_step(i: INT64, cond: BOOL, done):
        at = op.Unsqueeze(i, [0])
        after = op.Add(at, [1])
        start, end = op.Slice(starts, at, after), op.Slice(ends, at, after)
        attended = _msft.MultiHeadAttention(op.Slice(query, start, end, [1]), op.Slice(key, start, end, [1]),
                                            op.Slice(value, start, end, [1]), num_heads=num_heads, scale=scale)
        return op.Identity(cond), op.SequenceInsert(done, attended)

    outputs = op.Loop(op.Size(starts), op.Constant(value=True), op.SequenceEmpty(dtype=FLOAT.dtype),
                      body=segment_step)
    return op.ConcatFromSequence(outputs, axis=1)


SequenceLoop.function_ir.opset_imports["com.microsoft"] = 1


def build(form: str, heads: int, head_dim: int) -> onnx.ModelProto:
    """One call of the form: query, key, value [1, N, width], grid_thw [I, 3] (fixed forms) or starts, ends [S]
    (the sequence loop) -> out [1, N, width]."""
    width = heads * head_dim
    names = ["query", "key", "value"]
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, "N", width]) for x in names]
    attrs = {"num_heads": heads, "scale": head_dim ** -0.5}
    if form == SEQUENCE:
        proto = SequenceLoop.to_function_proto()
        bounds = ["starts", "ends"]
        inputs += [helper.make_tensor_value_info(x, TensorProto.INT64, ["S"]) for x in bounds]
    else:
        proto = seg.SEGMENT_ATTENTION.to_function_proto()
        bounds = ["grid_thw"]
        inputs.append(helper.make_tensor_value_info("grid_thw", TensorProto.INT64, ["I", 3]))
        attrs.update(chunk=int(form.rsplit("=", 1)[1]))
    node = helper.make_node(proto.name, [*names, *bounds], ["out"], domain=proto.domain, **attrs)
    graph = helper.make_graph([node], "segment_loop", inputs,
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    imports = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1),
               helper.make_opsetid(proto.domain, 1)]
    return helper.make_model(graph, opset_imports=imports, functions=[proto], ir_version=10)


def feeds(form: str, grid: list[list[int]], window: int, width: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The form's inputs: q/k/v [1, N, width] random under `seed` (the same for every form), then its bounds."""
    rng = np.random.default_rng(seed)
    n = sum(t * h * w for t, h, w in grid)
    feed = {x: rng.standard_normal((1, n, width), dtype=np.float32) for x in ("query", "key", "value")}
    if form == SEQUENCE:
        ends = np.cumsum(seg.segment_sizes(grid, window))
        feed["starts"], feed["ends"] = np.concatenate([[0], ends[:-1]]).astype(np.int64), ends.astype(np.int64)
    elif window:  # each window a frame of its own (the Loop over windows shipped until 2026-11-28)
        feed["grid_thw"] = np.array([[1, 1, size] for size in seg.segment_sizes(grid, window)], np.int64)
    else:
        feed["grid_thw"] = np.array(grid, np.int64)
    return feed


def markdown(result: dict) -> str:
    forms = result["forms"]
    lines = ["# Segment attention: a Loop with steps of varying size or of a fixed size", "",
             (f"Produced by `python -m bench.segment_loop`, {result['started']} – {result['finished']}. Machine: "
              f"{describe(result['machine'])} (load average {result['load_average_start']} at start). One attention "
              f"on q/k/v [1, N, width], {result['threads']} thread, medians of {result['reps']} rounds interleaved "
              "across the forms (seconds; ratio to the sequence loop)."), "",
             "| case | patches | " + " | ".join(forms) + " |", "|---|---:|" + "---:|" * len(forms)]
    for p in result["points"]:
        base = p["median_s"][SEQUENCE]
        cells = [f"{p['median_s'][f]:.4f}" + ("" if f == SEQUENCE else f" ({p['median_s'][f] / base:.3f}×)")
                 for f in forms]
        lines.append(f"| {p['case']} | {p['num_patches']} | " + " | ".join(cells) + " |")
    lines += ["", result["decision"]]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.segment_loop", description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    import onnxruntime as ort

    forms = [SEQUENCE, *(f"fixed loop, Q={c}" for c in CHUNKS)]
    result = {"machine": machine(), "threads": args.threads, "reps": args.reps, "forms": forms,
              "load_average_start": load_average(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "points": []}
    options = ort.SessionOptions()
    options.intra_op_num_threads = args.threads
    for case, (heads, head_dim, window, grid) in CASES.items():
        sessions = {f: ort.InferenceSession(build(f, heads, head_dim).SerializeToString(), options,
                                            providers=["CPUExecutionProvider"]) for f in forms}
        inputs = {f: feeds(f, grid, window, heads * head_dim) for f in forms}
        outs = {f: s.run(None, inputs[f])[0] for f, s in sessions.items()}
        diff = max(float(np.abs(outs[f] - outs[SEQUENCE]).max()) for f in forms)
        timed = interleaved({f: (lambda s=s, feed=inputs[f]: s.run(None, feed)) for f, s in sessions.items()},
                            args.reps)
        medians = {f: t["median_s"] for f, t in timed.items()}
        result["points"].append({"case": case, "grid_thw": grid, "window": window, "num_patches": inputs[SEQUENCE]["query"].shape[1],
                                 "max_abs_diff": diff, "median_s": medians})
        print(f"[segment_loop] {case}: {medians} (max abs diff {diff:.2e})", flush=True)
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    result["decision"] = decision(result)
    write_results(args.out, "segment-loop", result, markdown(result), "segment_loop")
    return 0


def decision(result: dict) -> str:
    """What the run says about the shipped chunks (forms[1]: contrib's, forms[2]: standard's)."""
    forms, points = result["forms"], result["points"]
    ratio = lambda p, f: p["median_s"][f] / p["median_s"][SEQUENCE]
    shipped = [ratio(p, forms[1]) for p in points]
    large = max(points, key=lambda p: p["num_patches"] if not p["window"] else 0)
    return (f"The default export's form ({forms[1]}) takes {min(shipped):.3f}–{max(shipped):.3f}× the sequence "
            "loop's time on the attention alone (the padding and the Compress after are copies of the segment's "
            "rows). It ships because every runtime sizes its Loop output right: OpenVINO does not size the "
            f"sequence loop's (bench/openvino_loop_bug.py). Shorter steps cost time on a large frame ({forms[2]}: "
            f"{ratio(large, forms[2]):.3f}× at {large['case']}), so the default chunks only frames past 16,384 "
            "patches; the standard-ops export takes 1,024 rows for the memory of its explicit scores. At the "
            "whole model: docs/runtime-onnxruntime.md (bench.runtimes, the baseline rows).")


if __name__ == "__main__":
    raise SystemExit(main())
