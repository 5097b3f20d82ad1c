"""The machine's measured fp32 GEMM peak: one large MatMul in ONNX Runtime (MLAS, the kernel the
encoder's MatMuls run on), median of repetitions. `python -m bench.gemm_peak` also measures torch's
(MKL / oneDNN) for comparison: torch eager rows of the benchmark run on that kernel."""

import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper


def matmul_session(threads: int) -> ort.InferenceSession:
    """A one-node model C = A @ B, A [M, K], B [K, N] both inputs (no constant pre-packing)."""
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])], "gemm",
        [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["M", "K"]),
         helper.make_tensor_value_info("b", TensorProto.FLOAT, ["K", "N"])],
        [helper.make_tensor_value_info("c", TensorProto.FLOAT, ["M", "N"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def measure(threads: list[int], size: int = 2048, reps: int = 5, seed: int = 0) -> dict:
    """{threads: {size, seconds (median), gflops (median), best_gflops}} for ORT's MatMul."""
    rng = np.random.default_rng(seed)
    a, b = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
    flops = 2.0 * size**3
    result = {}
    for t in threads:
        session = matmul_session(t)
        session.run(None, {"a": a, "b": b})  # warm-up
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            session.run(None, {"a": a, "b": b})
            times.append(time.perf_counter() - start)
        result[t] = {"size": size, "seconds": float(np.median(times)),
                     "gflops": flops / float(np.median(times)) / 1e9,
                     "best_gflops": flops / min(times) / 1e9}
    return result


def measure_torch(threads: list[int], size: int = 2048, reps: int = 5) -> dict:
    """The same product with torch.matmul (imported here: only this command needs torch)."""
    import torch

    a, b = torch.randn(size, size), torch.randn(size, size)
    result = {}
    for t in threads:
        torch.set_num_threads(t)
        torch.matmul(a, b)
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            torch.matmul(a, b)
            times.append(time.perf_counter() - start)
        result[t] = {"size": size, "seconds": float(np.median(times)),
                     "gflops": 2.0 * size**3 / float(np.median(times)) / 1e9}
    return result


if __name__ == "__main__":
    import json

    from vlm_vision_onnx.core.errors import Parser

    Parser(prog="python -m bench.gemm_peak", description="Measure this machine's fp32 GEMM peak (GFLOP/s) in "
           "ONNX Runtime and torch at 1 and 2 threads; prints JSON.").parse_args()
    print(json.dumps({"onnxruntime": measure([1, 2]), "torch": measure_torch([1, 2])}, indent=1))
