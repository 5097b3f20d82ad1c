"""The machine's measured fp32 GEMM peak: one large MatMul in ONNX Runtime (MLAS, the kernel the
encoder's MatMuls run on) and in numpy, median of interleaved repetitions."""

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
    """{threads: {'ort_gflops': median, 'numpy_gflops': median (1 thread numpy = BLAS threads unset)}}."""
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
