"""`python -m bench.ov_attention_kernels`: which kernels run one attention in OpenVINO's CPU plugin, and how fast.

One attention at Qwen3-VL-2B dims (16 heads x 64) on one frame of N patches, q/k/v [1, N, 1024] (the export's
batched attention, the If branch taken when every segment has one size), in the forms OpenVINO could run it:
  fused MHA (what runs)   com.microsoft MultiHeadAttention through the ONNX frontend (`attention_model`), its
                          ScaledDotProductAttention written as MatMul(q * scale, k, transpose_b) - Softmax - MatMul
                          (`core.openvino_attention.untranspose_keys`, as every OpenVINO session of the runtime
                          compiles it): the CPU plugin fuses them, the key's transpose included, into one MHA
                          `Subgraph` (snippets)
  fused MHA, k^T apart    the same without that rewrite (what ran before it): the plugin's own decomposition of the
                          op transposes k to [B, H, D, S] in a reference Transpose node before the same `Subgraph`
  snippets off            the same model with SNIPPETS_MODE=DISABLE: two oneDNN MatMuls (their kernel names the
                          ISA: brgemm_avx512_amx_bf16 on AMX) around a Softmax, the N x N scores in memory
  SDPA op                 opset13 ScaledDotProductAttention built directly: whether the CPU plugin keeps it as its
                          own node (its transformation pipeline decomposes it outside LLM-shaped stateful models:
                          "optimized only for LLM models") and what it then runs
  SDPA op, KV-cache form  the same behind an LLM's KV cache (ReadValue -> Gather(beam_idx) -> Concat -> SDPA, the
                          Concat into Assign; the cache empty, reset before every run): the pattern the plugin's
                          StatefulSDPAFusion keeps as its own ScaledDotProductAttentionWithKVCache node
  PyTorch sdpa            torch.nn.functional.scaled_dot_product_attention on [1, 16, N, width/16] (the reference)
  ..., AMX off            (bf16 on an AMX CPU) the fused MHA and snippets-off forms again in a child process with
                          oneDNN capped below AMX (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16): the profile labels a
                          snippets `Subgraph` by its host ISA (`jit_avx512_bf16`) whether or not its matrix
                          products run on AMX, so only the time lost without AMX tells
at f32 and bf16, interleaved medians of --reps runs after a warm run; OpenVINO's per-op profile (PERF_COUNT) of a
second compile. FLOP: 4 N^2 x width (QK^T and PV). `--width 2048` runs 16 heads of 128 instead of 64: the same
N x N scores through the softmax, twice the matrix products, which tells which of the two the time follows.
Writes bench/results/ov-attention-kernels[-SUFFIX].json/.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from bench.runtime_worker import second_run_profile
from bench.timing import interleaved, write_results
from vlm_vision_onnx.core import cpu
from vlm_vision_onnx.core.machine import describe, machine

ROOT = Path(__file__).resolve().parents[1]
TAG = "ov-attention"
HEADS, WIDTH = 16, 1024  # Qwen3-VL-2B's vision tower
NO_AMX_ISA = "AVX512_CORE_BF16"  # oneDNN's ISA cap for the AMX-off rows: AVX-512 with BF16, no AMX
AMX_GAIN = 1.5  # the MHA node's slow-down without AMX that says it ran on AMX (amx_verdict)
FUSED, SNIPPETS_OFF = "fused MHA (what runs)", "snippets off"  # the forms `without_amx` times again
KEY_APART = "fused MHA, k^T apart"
AMX_OFF = ", AMX off"  # the label suffix of their rows


def attention_model(frames: int, rows: int, heads: int = HEADS, width: int = WIDTH) -> bytes:
    """An ONNX model of one com.microsoft MultiHeadAttention on q, k, v [frames, rows, width] -> o, as the export's
    batched attention runs it (scale head_dim^-0.5)."""
    from onnx import TensorProto, helper

    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [frames, rows, width]) for n in "qkv"]
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["o"], domain="com.microsoft", num_heads=heads,
                            scale=(width // heads) ** -0.5)
    graph = helper.make_graph([node], "attention", inputs, [helper.make_tensor_value_info("o", TensorProto.FLOAT,
                                                                                           None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft",
                                                                                                     1)])
    return model.SerializeToString()


def sdpa_model(rows: int, heads: int = HEADS, width: int = WIDTH, kv_cache: bool = False):
    """An OpenVINO model of one opset13 ScaledDotProductAttention on q, k, v [1, rows, width] -> [1, rows, width]
    (heads split and merged by Reshape/Transpose around it). `kv_cache`: k and v each appended to an empty state
    variable [1, heads, 0, head_dim] first, as an LLM's KV cache (with its `beam_idx` [1] int32 input, feed 0), so the
    CPU plugin keeps the op as its own node; call `reset_state()` before every run or the cache grows."""
    import openvino
    from openvino import opset13 as ops

    head = width // heads
    params = [ops.parameter([1, rows, width], np.float32, name=n) for n in "qkv"]
    q, k, v = (ops.transpose(ops.reshape(p, [1, rows, heads, head], False), [0, 2, 1, 3]) for p in params)
    sinks, variables = [], []
    if kv_cache:
        from openvino.op.util import Variable, VariableInfo

        beam = ops.parameter([-1], np.int32, name="beam_idx")
        params.append(beam)
        empty = ops.broadcast(ops.constant(np.float32(0)), ops.constant(np.array([1, heads, 0, head], np.int64)))
        cached = []
        for name, current in (("k", k), ("v", v)):
            info = VariableInfo()
            info.data_shape, info.data_type = openvino.PartialShape([1, heads, -1, head]), openvino.Type.f32
            info.variable_id = f"past_{name}"
            variables.append(Variable(info))
            past = ops.gather(ops.read_value(empty, variables[-1]), beam, ops.constant(np.int64(0)))
            cached.append(ops.concat([past, current], 2))
            sinks.append(ops.assign(cached[-1], variables[-1]))
        k, v = cached
    out = ops.reshape(ops.transpose(ops.scaled_dot_product_attention(q, k, v, causal=False), [0, 2, 1, 3]),
                      [1, rows, width], False)
    return openvino.Model([out.output(0)], sinks, params, variables, "sdpa-kv-cache" if kv_cache else "sdpa")


def sdpa_kept(compiled) -> bool:
    """Whether a compiled model runs a ScaledDotProductAttention node of the CPU plugin's own (its runtime model's
    layer types; the KV-cache form's node is reported as `ScaledDotProductAttention`)."""
    return any(op.get_rt_info()["layerType"].astype(str).startswith("ScaledDotProductAttention")
               for op in compiled.get_runtime_model().get_ops())


def runner(request, feeds: dict):
    """A no-argument function running a compiled form's `request` once on q/k/v `feeds` and returning its outputs:
    its state reset first and `beam_idx` fed where the form has them (the KV-cache form), decided here once."""
    names = {name for port in request.model_inputs for name in port.get_names()}
    full = {**feeds, **({"beam_idx": np.zeros(1, np.int32)} if "beam_idx" in names else {})}

    def run() -> dict:
        request.reset_state()
        return request.infer(full)

    return run


def compile_cpu(model, precision: str, threads: int, extra: dict, profile: bool = False):
    """`model` (ONNX bytes or an openvino.Model) compiled for the CPU at `precision` on `threads`, with `extra`
    properties, and OpenVINO's profiler on when `profile`."""
    import openvino

    core = openvino.Core()
    if isinstance(model, bytes):
        model = core.read_model(model, b"")
    return core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": precision, "INFERENCE_NUM_THREADS": threads,
                                             "PERF_COUNT": profile, **extra})


def untransposed(model: bytes):
    """The ONNX `model` read by OpenVINO, its attention rewritten as every runtime session compiles it
    (`core.openvino_attention.untranspose_keys`)."""
    import openvino

    from vlm_vision_onnx.core import openvino_attention

    read = openvino.Core().read_model(model, b"")
    openvino_attention.untranspose_keys(read)
    return read


def forms(rows: int, width: int = WIDTH) -> dict:
    """{label: (model, extra CPU properties)} of the OpenVINO forms at `rows` (HEADS heads of width / HEADS)."""
    mha = lambda: attention_model(1, rows, HEADS, width)
    return {FUSED: (untransposed(mha()), {}), KEY_APART: (mha(), {}),
            SNIPPETS_OFF: (mha(), {"SNIPPETS_MODE": "DISABLE"}), "SDPA op": (sdpa_model(rows, HEADS, width), {}),
            "SDPA op, KV-cache form": (sdpa_model(rows, HEADS, width, kv_cache=True), {})}


def openvino_forms(feeds: dict, precision: str, threads: int, labels=None) -> tuple[dict, dict]:
    """The OpenVINO forms at `precision` (all, or those in `labels`) compiled for `feeds` (`inputs`): ({"OpenVINO
    LABEL": a no-argument runner on `feeds`}, {"OpenVINO LABEL": {profile, sdpa_kept}}), the profile that of a
    second compile's second run."""
    _, rows, width = feeds["q"].shape
    runners, facts = {}, {}
    for label, (model, extra) in forms(rows, width).items():
        if labels is not None and label not in labels:
            continue
        request = compile_cpu(model, precision, threads, extra).create_infer_request()
        runners[f"OpenVINO {label}"] = runner(request, feeds)
        profiled = compile_cpu(model, precision, threads, extra, profile=True)
        request = profiled.create_infer_request()
        facts[f"OpenVINO {label}"] = {"profile": second_run_profile(request, runner(request, feeds))[:4],
                                      "sdpa_kept": sdpa_kept(profiled)}
    return runners, facts


def openvino_runs(rows: int, precision: str, threads: int, reps: int, labels=None, width: int = WIDTH) -> dict:
    """`openvino_forms` timed, interleaved: {"OpenVINO LABEL": {median_s, times_s, profile, sdpa_kept}}."""
    runners, facts = openvino_forms(inputs(rows, width), precision, threads, labels)
    return {label: {**r, **facts[label]} for label, r in interleaved(runners, reps).items()}


def inputs(rows: int, width: int = WIDTH) -> dict:
    """q, k, v [1, rows, width] float32, the same in every process."""
    return {n: np.random.default_rng(i).standard_normal((1, rows, width), dtype=np.float32)
            for i, n in enumerate("qkv")}


def without_amx(rows: int, threads: int, reps: int, width: int = WIDTH) -> dict:
    """The fused MHA and snippets-off forms in bf16, timed in a child process whose oneDNN is capped below AMX
    (ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16, which OpenVINO's CPU plugin honours for its own kernels too): the rows
    "... , AMX off". Since the plugin labels every snippets `Subgraph` by its host ISA (`jit_avx512_bf16`, AMX
    or not), only this comparison shows whether the fused attention's matrix products run on AMX."""
    done = subprocess.run([sys.executable, "-m", "bench.ov_attention_kernels", "--child", str(rows), str(threads),
                           str(reps), str(width), FUSED, SNIPPETS_OFF], check=True, capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, "ONEDNN_MAX_CPU_ISA": NO_AMX_ISA})
    return {f"{label}{AMX_OFF}": r for label, r in json.loads(done.stdout.splitlines()[-1]).items()}


def measure(rows: int, precision: str, threads: int, reps: int, width: int = WIDTH) -> dict:
    """Every form at `rows` and `precision`: {label: {median_s, times_s, tflops, profile, sdpa_kept}}; in bf16 on
    an AMX CPU also the `without_amx` rows (their own process, right after; not interleaved with the rest)."""
    import torch

    feeds = inputs(rows, width)
    runners, facts = openvino_forms(feeds, precision, threads)
    torch.set_num_threads(threads)
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    q, k, v = (torch.from_numpy(a).view(1, rows, HEADS, width // HEADS).transpose(1, 2).to(dtype)
               for a in feeds.values())
    runners["PyTorch sdpa"] = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)
    results = {label: {**r, **facts.get(label, {"profile": [], "sdpa_kept": None})}
               for label, r in interleaved(runners, reps).items()}
    if precision == "bf16" and cpu.has("amx_bf16"):
        results.update(without_amx(rows, threads, reps, width))
    flop = 4 * rows * rows * width
    return {label: {**r, "tflops": flop / r["median_s"] / 1e12} for label, r in results.items()}


def subgraph_seconds(profile: list[dict]) -> float:
    """Seconds of the `Subgraph` nodes (snippets: the fused MHA) in a profile from `second_run_profile`."""
    return sum(op["seconds"] for op in profile if op["type"] == "Subgraph")


def amx_verdict(fused: dict, capped: dict) -> str:
    """One sentence from the fused MHA's rows with and without AMX: whether its `Subgraph` ran on AMX. The MHA's
    node time (profile) decides, not the run's wall time, which also holds the transposes around it; 1.5x is past
    this node's run-to-run spread on shared cores (up to a quarter, AMX Xeon, 2026-11-29) and under what AMX's tiles
    gave there (2.75x at 784 patches, 4.0x at 4096: bench/results/ov-attention-kernels-amx.md)."""
    ratio = subgraph_seconds(capped["profile"]) / max(subgraph_seconds(fused["profile"]), 1e-9)
    verdict = ("so with AMX its matrix products run on AMX tiles, whatever its label says" if ratio >= AMX_GAIN else
               "too little to say that its matrix products run on AMX here")
    return (f"AMX off (a child process, oneDNN capped at {NO_AMX_ISA}, timed right after the rest): the fused MHA's "
            f"`Subgraph` node takes {ratio:.2f}x as long (profile; the whole run "
            f"{capped['median_s'] / fused['median_s']:.2f}x), {verdict}.")


def markdown(result: dict) -> str:
    width = result.get("width", WIDTH)
    lines = ["# One attention in OpenVINO's CPU plugin: kernels and speed", "",
             (f"`{result['command']}` on {describe(result['machine'])}; CPU flags: {', '.join(result['cpu_flags'])}; "
              f"{result['started']} - {result['finished']}. One attention, {HEADS} heads x {width // HEADS}, q/k/v "
              f"[1, N, {width}]; medians of interleaved runs (each round in an order of its own); TFLOP/s of QK^T "
              f"and PV (4 N^2 x {width} FLOP)."), ""]
    for case, by_label in result["cases"].items():
        lines += [f"## {case}", "", "| form | median s | TFLOP/s | SDPA node kept | OpenVINO kernels (profile, s) |",
                  "|---|---:|---:|---|---|"]
        for label, r in by_label.items():
            ops = "; ".join(f"{o['type']} {o['exec']} {o['seconds']:.4f}" for o in r["profile"])
            kept = "" if r["sdpa_kept"] is None else ("yes" if r["sdpa_kept"] else "no")
            lines.append(f"| {label} | {r['median_s']:.4f} | {r['tflops']:.2f} | {kept} | {ops} |")
        fused, capped = by_label.get(f"OpenVINO {FUSED}"), by_label.get(f"OpenVINO {FUSED}{AMX_OFF}")
        if fused and capped:
            lines += ["", amx_verdict(fused, capped)]
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ov_attention_kernels", description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="784,4096", help="patches per frame, comma-separated (448^2: 784, "
                                                           "1024^2: 4096)")
    parser.add_argument("--width", type=int, default=WIDTH, help=f"q/k/v width: {HEADS} heads of WIDTH/{HEADS} "
                        f"(default {WIDTH}: Qwen3-VL-2B's heads of {WIDTH // HEADS})")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--suffix", default="")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)  # ROWS THREADS REPS WIDTH LABEL...: without_amx's
    args = parser.parse_args(argv)
    if args.child:  # one line of JSON: openvino_runs in bf16 on the labelled forms (its parent sets the ISA cap)
        rows, threads, reps, width, *labels = args.child
        print(json.dumps(openvino_runs(int(rows), "bf16", int(threads), int(reps), labels, int(width))))
        return 0
    from vlm_vision_onnx.core import openvino_session

    precisions = ("f32", "bf16") if openvino_session.bf16_supported() else ("f32",)
    result = {"command": "python -m bench.ov_attention_kernels " + " ".join(argv if argv is not None else sys.argv[1:]),
              "machine": machine(), "cpu_flags": [f for f in ("avx512f", "avx512_bf16", "amx_bf16", "amx_int8")
                                                  if cpu.has(f)],
              "width": args.width, "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "cases": {}}
    for rows in (int(r) for r in args.rows.split(",")):
        for precision in precisions:
            result["cases"][f"N = {rows}, {precision}"] = measure(rows, precision, args.threads, args.reps, args.width)
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    write_results(args.out, "ov-attention-kernels" + (f"-{args.suffix}" if args.suffix else ""), result,
                  markdown(result), TAG)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
