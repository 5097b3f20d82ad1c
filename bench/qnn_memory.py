"""`python -m bench.qnn_memory [--static build/qwen3-vl-2b/static-448x448/export]`: where `quantize qnn` spends memory.

Each measurement runs in a child process of its own, its peak resident memory read back (`ru_maxrss`):
- `opset 21, weights in memory`: ONNX's version converter on the whole model, as ONNX Runtime's quantizer runs it on a
  model below opset 21 for 16-bit QDQ; `opset 21, graph alone`: `quantize.qnn.at_opset` (weights loaded after);
- one calibration photo through ONNX Runtime's MinMax calibration model (a ReduceMin and a ReduceMax per tensor,
  written by its `create_calibrator`) in ONNX Runtime's default execution order, in PRIORITY_BASED order
  (`quantize.qnn.reductions_run_early`), and the model without the reductions;
- the whole stage, `python -m quantize qnn` in such a process (`--no-stage`: left out).
Results: bench/results/qnn-memory.md and .json. Run it alone: nothing else should hold memory or CPU.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from core.machine import describe, machine

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PREPARED = "prepared.name"  # the file in the work folder naming `quantize.qnn.prepare_fp32`'s model


def child(kind: str, work: Path, static: Path) -> None:
    """One measurement in this (child) process; prints its peak resident GiB."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from quantize import qnn

    if kind == "prepare":
        prepare(work, static)
    elif kind == "stage":
        from quantize import __main__ as quantize_cli

        if quantize_cli.main(["qnn", str(static), str(work / "qnn")]) != 0:
            raise SystemExit("quantize qnn failed")
    elif kind == "convert-whole":
        onnx.version_converter.convert_version(onnx.load(str(static / "model.onnx")), qnn.QDQ_OPSET)
    elif kind == "convert-graph":
        qnn.at_opset(static / "model.onnx", qnn.QDQ_OPSET)
    else:
        options = qnn.calibration_options(priority=kind == "calibrate-priority")
        model = work / ((work / PREPARED).read_text() if kind == "plain" else "augmented.onnx")
        session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
        session.run(None, {"pixel_values": np.load(work / "feed.npy")})
    print(json.dumps({"peak_gib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}))


def prepare(work: Path, static: Path) -> None:
    """The stage's fp32 model as it quantizes it (`quantize.qnn.prepare_fp32`), one calibration photo's
    pixel_values, and ONNX Runtime's MinMax calibration model of it."""
    import numpy as np
    from onnxruntime.quantization import QuantType
    from onnxruntime.quantization.calibrate import CalibrationMethod, create_calibrator
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    from quantize import calibration, qnn

    prepared, metadata = qnn.prepare_fp32(static / "model.onnx", work)
    (work / PREPARED).write_text(prepared.name)  # the children's "plain" run opens it
    feeds = qnn.photo_feeds(qnn.CALIBRATION[:1], metadata)
    np.save(work / "feed.npy", feeds[0]["pixel_values"])
    config = get_qnn_qdq_config(str(prepared), calibration.reader(feeds),
                                activation_type=getattr(QuantType, qnn.ACTIVATIONS),
                                weight_type=getattr(QuantType, qnn.WEIGHTS), per_channel=True)
    create_calibrator(prepared, config.op_types_to_quantize, augmented_model_path=str(work / "augmented.onnx"),
                      calibrate_method=CalibrationMethod.MinMax, use_external_data_format=True)


LABELS = {"convert-whole": "opset 18 -> 21, weights in memory (ONNX Runtime's quantizer)",
          "convert-graph": "opset 18 -> 21, graph alone, weights after (quantize.qnn.at_opset)",
          "plain": "one photo, the model without calibration outputs",
          "calibrate-default": "one photo, MinMax calibration model, default execution order",
          "calibrate-priority": "one photo, MinMax calibration model, PRIORITY_BASED (quantize.qnn)",
          "stage": "python -m quantize qnn, the whole stage"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.qnn_memory", description=__doc__.splitlines()[0])
    parser.add_argument("--static", type=Path, default=ROOT / "build" / "qwen3-vl-2b" / "static-448x448" / "export")
    parser.add_argument("--no-stage", action="store_true", help="leave out the whole stage's run")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "WORK"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], Path(args.child[1]), args.static)
        return 0
    if not (args.static / "model.onnx").is_file():
        print(f"error: {args.static}/model.onnx not found: make export MODEL=qwen3-vl STATIC=448x448", file=sys.stderr)
        return 2
    found = {"started": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": machine(), "static": str(args.static),
             "rows": []}
    with tempfile.TemporaryDirectory(prefix="qnn-memory-") as tmp:
        work = Path(tmp)
        # Every step runs in a child, the preparation too: Linux keeps a parent's peak resident memory in a child
        # it forks (and across exec), so a parent that had held the model would floor every figure at its own.
        subprocess.run([sys.executable, "-m", "bench.qnn_memory", "--static", str(args.static), "--child", "prepare",
                        str(work)], check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        kinds = ["convert-whole", "convert-graph", "plain", "calibrate-default", "calibrate-priority"]
        for kind in kinds + ([] if args.no_stage else ["stage"]):
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "bench.qnn_memory", "--static", str(args.static), "--child",
                                   kind, str(work)], capture_output=True, text=True, check=True, cwd=ROOT)
            peak = json.loads(done.stdout.strip().splitlines()[-1])["peak_gib"]
            found["rows"].append({"kind": kind, "peak_gib": round(peak, 2), "s": round(time.perf_counter() - started)})
            print(f"{LABELS[kind]}: {peak:.2f} GiB", flush=True)
    found["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / "qnn-memory.json").write_text(json.dumps(found, indent=1) + "\n")
    head = (f"`python -m bench.qnn_memory` ({found['started']} – {found['finished']}, {describe(found['machine'])}) "
            f"on `{args.static}`: peak resident memory of each step in a process of its own (`ru_maxrss`).")
    lines = ["# Where `quantize qnn` spends memory", "", head, "", "| step | peak GiB | s |", "|---|---:|---:|"]
    lines += [f"| {LABELS[r['kind']]} | {r['peak_gib']:.2f} | {r['s']} |" for r in found["rows"]]
    (args.results / "qnn-memory.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
