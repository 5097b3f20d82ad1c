"""ONNX Runtime session for an exported encoder (torch-free)."""

from pathlib import Path

import numpy as np
import onnxruntime as ort


def open_session(path: str | Path, threads: int | None = None) -> ort.InferenceSession:
    """A CPU session; `threads` sets intra-op threads (None: ORT's default, all cores)."""
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def run(session: ort.InferenceSession, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """All outputs, in the graph's output order."""
    return session.run(None, inputs)
