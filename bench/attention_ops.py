"""`python -m bench.attention_ops`: which ONNX Runtime attention to run per frame segment, measured.

One attention at Qwen3-VL 2B dims (16 heads x 64) on one frame of N patches, q/k/v [1, N, 1024], in
three forms, each point in its own process (time: median of --reps runs after one warm run; peak RSS):
  loop + MultiHeadAttention   the shipped lowering (builders/qwen_vl/segment_attention.py)
  loop + Attention (opset 23) the same Loop with the standard ONNX Attention op in the body
  MultiHeadAttention + bias   the former packed form: one call with a [1, 1, N, N] additive bias
The forms run under an address-space cap (--max-memory-gib): one that needs N x N memory fails at
large N instead of exhausting the shared machine. Writes bench/results/attention-ops.json and .md.
"""

import argparse
import copy
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from bench.scale_point import rss_mib
from bench.timing import load_average
from core.machine import describe, machine
from core.report import peak_rss_mib
from core.session import ORT_ERRORS

ROOT = Path(__file__).resolve().parents[1]
HEADS, HEAD_DIM = 16, 64
FORMS = ["loop + MultiHeadAttention", "loop + Attention (opset 23)", "MultiHeadAttention + bias"]
SIZES = [4096, 8464, 16384]


def _segment_function(standard: bool) -> onnx.FunctionProto:
    from builders.qwen_vl.segment_attention import SEGMENT_ATTENTION  # the shipped lowering

    function = SEGMENT_ATTENTION.to_function_proto()
    if not standard:
        return function
    function = copy.deepcopy(function)
    loop = next(n for n in function.node if n.op_type == "Loop")
    body = next(a.g for a in loop.attribute if a.name == "body")
    for node in body.node:
        if node.op_type == "MultiHeadAttention":
            node.domain, node.op_type = "", "Attention"
            for attr in node.attribute:
                if attr.name == "num_heads":
                    attr.name = "q_num_heads"
            heads = next(a for a in node.attribute if a.name == "q_num_heads")
            kv = node.attribute.add()
            kv.CopyFrom(heads)
            kv.name = "kv_num_heads"
    for entry in function.opset_import:
        if entry.domain == "":
            entry.version = 23
    return function


def build(form: str, width: int = HEADS * HEAD_DIM) -> onnx.ModelProto:
    names = ["query", "key", "value"]
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, "N", width]) for x in names]
    scale = HEAD_DIM ** -0.5
    if form == "MultiHeadAttention + bias":
        inputs.append(helper.make_tensor_value_info("bias", TensorProto.FLOAT, [1, 1, "N", "N"]))
        node = helper.make_node("MultiHeadAttention", [*names, "", "", "bias"], ["out"], domain="com.microsoft",
                                num_heads=HEADS, scale=scale)
        functions, opset = [], 18
    else:
        standard = form.startswith("loop + Attention")
        inputs.append(helper.make_tensor_value_info("grid_thw", TensorProto.INT64, ["I", 3]))
        function = _segment_function(standard)
        from builders.qwen_vl.segment_attention import CHUNK_ROWS

        node = helper.make_node(function.name, [*names, "grid_thw"], ["out"], domain=function.domain,
                                num_heads=HEADS, scale=scale, chunk=CHUNK_ROWS["contrib"])
        functions, opset = [function], 23 if standard else 18
    graph = helper.make_graph([node], "attention", inputs, [helper.make_tensor_value_info("out", TensorProto.FLOAT,
                                                                                          None)])
    imports = [helper.make_opsetid("", opset), helper.make_opsetid("com.microsoft", 1)]
    imports += [helper.make_opsetid(f.domain, 1) for f in functions]
    return helper.make_model(graph, opset_imports=imports, functions=functions, ir_version=10)


def run_point(model: Path, n: int, reps: int, threads: int) -> dict:
    """In this process (torch-free): load, feed one frame of n patches, time; {median_s, peak_rss_mib, ...}."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    feed = {x: rng.standard_normal((1, n, HEADS * HEAD_DIM), dtype=np.float32) for x in ("query", "key", "value")}
    if "bias" in {i.name for i in session.get_inputs()}:
        feed["bias"] = np.zeros((1, 1, n, n), np.float32)
    else:
        side = round(n ** 0.5)
        feed["grid_thw"] = np.array([[1, side, n // side]], np.int64)
    loaded = rss_mib()
    session.run(None, feed)
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        session.run(None, feed)
        times.append(time.perf_counter() - start)
    return {"median_s": float(np.median(times)), "times_s": [round(t, 4) for t in times],
            "rss_loaded_mib": round(loaded, 1), "peak_rss_mib": round(peak_rss_mib(), 1)}


def child(model: Path, n: int, args) -> dict:
    command = [sys.executable, "-m", "bench.attention_ops", "--child", str(model), str(n), "--reps", str(args.reps),
               "--threads", str(args.threads), "--max-memory-gib", str(args.max_memory_gib)]
    done = subprocess.run(command, check=False, capture_output=True, text=True, cwd=ROOT)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return json.loads(lines[-1]) if lines else {"error": f"exit {done.returncode}: "
                                                         f"{' '.join(done.stderr.split())[-300:]}"}


def markdown(result: dict) -> str:
    rows = result["points"]
    lines = ["# Attention per segment: which ONNX Runtime op", "",
             (f"Produced by `python -m bench.attention_ops`, {result['started']} – {result['finished']}. Machine: "
             f"{describe(result['machine'])}, shared with other jobs (load average {result['load_average_start']}"
             f" at start). One attention at 2B dims ({HEADS} heads x {HEAD_DIM}), one frame of N patches, "
             f"{result['threads']} thread(s), each point in its own process, median of {result['reps']} runs; "
             f"address space capped at {result['max_memory_gib']} GiB."), "",
             "| N | form | s | peak RSS (MiB) |", "|---:|---|---:|---:|"]
    for r in rows:
        measured = (f"{r['median_s']:.3f} | {r['peak_rss_mib']:.0f}" if "median_s" in r
                    else f"fails | {r.get('peak_rss_mib', 0):.0f}")
        lines.append(f"| {r['num_patches']} | {r['form']} | {measured} |")
    errors = [f"{r['form']} at {r['num_patches']}: {r['error'][:160]}" for r in rows if r.get("error")]
    lines += ["", "Failures: " + ("; ".join(errors) if errors else "none") + "."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.attention_ops", description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "N"), help=argparse.SUPPRESS)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-memory-gib", type=float, default=12.0)
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    if args.child:
        import resource

        cap = int(args.max_memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
        try:
            record = run_point(Path(args.child[0]), int(args.child[1]), args.reps, args.threads)
        except (MemoryError, *ORT_ERRORS) as err:  # allocation failure under the cap
            record = {"error": " ".join(str(err).split())[:300], "peak_rss_mib": round(peak_rss_mib(), 1)}
        print(json.dumps(record), flush=True)
        return 0
    result = {"machine": machine(), "threads": args.threads, "reps": args.reps, "max_memory_gib": args.max_memory_gib,
              "load_average_start": load_average(), "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "points": []}
    models = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, form in enumerate(FORMS):
            models[form] = Path(tmp) / f"form{i}.onnx"
            onnx.save(build(form), str(models[form]))
        for n in (int(s) for s in args.sizes.split(",")):
            for form in FORMS:
                record = child(models[form], n, args)
                result["points"].append({"form": form, "num_patches": n, **record})
                print(f"[attention_ops] {n} {form}: {record.get('error') or record['median_s']}", flush=True)
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "attention-ops.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "attention-ops.md").write_text(markdown(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
