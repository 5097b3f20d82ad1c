"""`python -m bench.openvino_loop_bug`: the minimal reproducer of OpenVINO's CPU Loop bug, to report upstream.

A Loop whose step slices a different number of rows of x each iteration, inserts them into a sequence
(`SequenceInsert`) and concatenates the sequence after (`ConcatFromSequence`): six standard ops, opset 18.
ONNX Runtime and the ONNX reference evaluator return x itself. OpenVINO's CPU plugin (2026.4.1) sizes the
collected output as trip count x the last iteration's size: with rows [0, 6) then [6, 10) of a [10, 4] input
it crashes (SIGSEGV) or corrupts its heap; other sizes give `Eltwise shape infer ... mismatch` downstream or
wrong shapes. The former segment attention of the Qwen exports had exactly this form (a step per frame of its
own size); the shipped one pads every step to one size (builders/qwen_vl/segment_attention.py).

Each runtime runs in its own process (a crash must not take this one down); prints one line per runtime and
writes the model to --out (default: a temporary folder) for the bug report.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto as T
from onnx import helper as h

#: x [10, 4] and the rows of each Loop step: 6 then 4.
ROWS = 10
STARTS, ENDS = [0, 6], [6, 10]


def model() -> onnx.ModelProto:
    """x [N, 4], starts [S], ends [S], n (= S) -> y = concat(x[starts[i]:ends[i]] for i < n) [N, 4]."""
    body = h.make_graph(
        [h.make_node("Unsqueeze", ["i", "axes0"], ["at"]),
         h.make_node("Add", ["at", "one"], ["after"]),
         h.make_node("Slice", ["starts", "at", "after"], ["s"]),
         h.make_node("Slice", ["ends", "at", "after"], ["e"]),
         h.make_node("Slice", ["x", "s", "e"], ["rows"]),
         h.make_node("SequenceInsert", ["seq_in", "rows"], ["seq_out"]),
         h.make_node("Identity", ["cond"], ["cond_out"])],
        "step", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond", T.BOOL, []),
                 h.make_tensor_sequence_value_info("seq_in", T.FLOAT, None)],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_sequence_value_info("seq_out", T.FLOAT, None)],
        [h.make_tensor("axes0", T.INT64, [1], [0]), h.make_tensor("one", T.INT64, [1], [1])])
    graph = h.make_graph(
        [h.make_node("SequenceEmpty", [], ["empty"], dtype=T.FLOAT),
         h.make_node("Loop", ["n", "true", "empty"], ["seq"], body=body),
         h.make_node("ConcatFromSequence", ["seq"], ["y"], axis=0)],
        "loop_of_varying_rows",
        [h.make_tensor_value_info("x", T.FLOAT, ["N", 4]), h.make_tensor_value_info("starts", T.INT64, ["S"]),
         h.make_tensor_value_info("ends", T.INT64, ["S"]), h.make_tensor_value_info("n", T.INT64, [])],
        [h.make_tensor_value_info("y", T.FLOAT, ["N", 4])], [h.make_tensor("true", T.BOOL, [], [True])])
    proto = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)], ir_version=9)
    onnx.checker.check_model(proto, full_check=True)
    return proto


def feeds() -> dict[str, np.ndarray]:
    return {"x": np.arange(ROWS * 4, dtype=np.float32).reshape(ROWS, 4), "starts": np.array(STARTS, np.int64),
            "ends": np.array(ENDS, np.int64), "n": np.array(len(STARTS), np.int64)}


_CHILD = """
import sys, numpy as np
from bench.openvino_loop_bug import feeds
runtime, path = sys.argv[1], sys.argv[2]
if runtime == "onnxruntime":
    import onnxruntime as ort
    y = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, feeds())[0]
elif runtime == "reference":
    import onnx
    from onnx.reference import ReferenceEvaluator
    y = ReferenceEvaluator(onnx.load(path)).run(None, feeds())[0]
else:
    import openvino as ov
    y = list(ov.Core().compile_model(path, "CPU")(feeds()).values())[0]
x = feeds()["x"]
print("right" if y.shape == x.shape and np.array_equal(y, x) else f"wrong: shape {list(y.shape)}, expected {list(x.shape)}")
"""


def run(runtime: str, path: Path) -> str:
    """'right', 'wrong: ...', 'crashed: ...' or 'failed: ...' of one runtime on the model, in a child process."""
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run([sys.executable, "-c", _CHILD, runtime, str(path)], capture_output=True, text=True,
                          cwd=root, timeout=300, check=False)  # a crash is the outcome reported
    if done.returncode < 0:
        return f"crashed: signal {-done.returncode}"
    if done.returncode != 0:
        lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
        return f"failed: {lines[-1] if lines else f'exit {done.returncode}'}"
    return done.stdout.strip().splitlines()[-1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.openvino_loop_bug", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder to keep loop.onnx in (default: a temporary one)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.out or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / "loop.onnx"
        onnx.save(model(), path)
        for runtime in ("onnxruntime", "reference", "openvino"):
            print(f"{runtime}: {run(runtime, path)}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
