"""Parity metrics of one output against its reference (numpy only), shared by every stage."""

import numpy as np


def compare(output: np.ndarray, reference: np.ndarray, tolerance: float | None = None) -> dict:
    """{shape, max_abs, max_rel, cosine, scale[, limit, ok]} of `output` against `reference`.

    max_abs = max |out - ref|; max_rel = max_abs / max |ref| (relative to the output's scale); cosine of
    the flattened tensors (float64). With a tolerance: ok when max_abs <= tolerance * max(1, max |ref|).
    A shape mismatch gives {shape, expected_shape, ok: False}.
    """
    if output.shape != reference.shape:
        return {"shape": list(output.shape), "expected_shape": list(reference.shape), "ok": False}
    a, b = output.ravel().astype(np.float64), reference.ravel().astype(np.float64)
    max_abs = float(np.abs(a - b).max()) if a.size else 0.0
    scale = float(np.abs(b).max()) if b.size else 0.0
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    record = {
        "shape": list(output.shape),
        "max_abs": max_abs,
        "max_rel": max_abs / scale if scale else max_abs,
        "cosine": float(a @ b / denom) if denom else 1.0,
        "scale": scale,
    }
    if tolerance is not None:
        record["limit"] = tolerance * max(1.0, scale)
        record["ok"] = max_abs <= record["limit"]
    return record
