"""Parity metrics of outputs against references, and a session run at every layout: one tolerance rule for every stage.

The rule: an output matches when max |out - ref| <= tolerance * max(1, max |ref|) (float outputs;
integer outputs must be equal). Per-token cosine: cosine of each row (token) of a 2-D output against
the reference row; the minimum over rows says how the worst token fares.
"""

import numpy as np

from vlm_vision_onnx.core.session import outputs as owned_outputs

DEFAULT_TOLERANCE = 1e-4


def compare(output: np.ndarray, reference: np.ndarray, tolerance: float | None = None) -> dict:
    """{shape, max_abs, max_rel, cosine, min_token_cosine, scale[, limit, ok]} of `output` vs `reference`.

    max_abs = max |out - ref|; max_rel = max_abs / max |ref|; cosine of the flattened tensors (float64);
    min_token_cosine over the rows of [tokens, hidden] outputs (the flattened cosine for other ranks).
    With a tolerance: ok when max_abs <= tolerance * max(1, max |ref|) and every value is finite.
    A shape mismatch gives {shape, expected_shape, ok: False}.
    """
    if output.shape != reference.shape:
        return {"shape": list(output.shape), "expected_shape": list(reference.shape), "ok": False}
    if not np.issubdtype(reference.dtype, np.floating):
        equal = bool(np.array_equal(output, reference))
        return {"shape": list(output.shape), "equal": equal, **({"ok": equal} if tolerance is not None else {})}
    a, b = output.astype(np.float64), reference.astype(np.float64)
    finite = bool(np.isfinite(a).all())
    max_abs = float(np.abs(a - b).max()) if a.size else 0.0
    scale = float(np.abs(b).max()) if b.size else 0.0
    record = {
        "shape": list(output.shape),
        "max_abs": max_abs,
        "max_rel": max_abs / scale if scale else max_abs,
        "cosine": _cosine(a.ravel(), b.ravel()),
        "min_token_cosine": min_token_cosine(a, b),
        "scale": scale,
    }
    if not finite:
        record["nonfinite"] = int((~np.isfinite(a)).sum())
    if tolerance is not None:
        record["limit"] = tolerance * max(1.0, scale)
        record["ok"] = finite and max_abs <= record["limit"]
    return record


#: The cosine a row (or output) with a NaN or infinity gets: the worst there is, so that non-finite outputs never
#: pass a cosine floor.
NONFINITE_COSINE = -1.0


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return NONFINITE_COSINE
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denom) if denom else 1.0


def token_cosines(output: np.ndarray, reference: np.ndarray) -> np.ndarray:
    """Cosine of each pair of matching rows of 2-D arrays [tokens, hidden] -> [tokens] (float64); a row holding
    NaN or infinity gets NONFINITE_COSINE, a zero row 1."""
    a, b = output.astype(np.float64), reference.astype(np.float64)
    norms = np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)
    dots = (a * b).sum(axis=1)
    cos = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), 1.0)
    finite = np.isfinite(a).all(axis=1) & np.isfinite(b).all(axis=1)
    return np.where(finite, cos, NONFINITE_COSINE)


def min_token_cosine(output: np.ndarray, reference: np.ndarray) -> float:
    """Smallest cosine between matching rows of 2-D outputs [tokens, hidden] (flattened otherwise); a row holding
    NaN or infinity counts as NONFINITE_COSINE, a zero row as 1."""
    if output.ndim != 2 or not output.size:
        return _cosine(output.ravel().astype(np.float64), reference.ravel().astype(np.float64))
    return float(token_cosines(output, reference).min())


def compare_all(outputs: dict[str, np.ndarray], references: dict[str, np.ndarray],
                tolerance: float | None) -> dict[str, dict]:
    """{output name: compare(...)} for every reference output (a missing output is not ok)."""
    return {name: compare(outputs[name], ref, tolerance) if name in outputs else {"missing": True, "ok": False}
            for name, ref in references.items()}


def case_record(case: str, outputs: dict[str, dict], **facts) -> dict:
    """One validation case: {case, **facts, outputs, ok}; ok when every output with a limit is ok."""
    return {"case": case, **facts, "outputs": outputs, "ok": all(o.get("ok", True) for o in outputs.values())}


def worst(records: list[dict]) -> dict:
    """{max_abs, min_cosine, min_token_cosine} over every case and output that has them."""
    values = [o for r in records for o in r["outputs"].values() if "max_abs" in o]
    if not values:
        return {"max_abs": None, "min_cosine": None, "min_token_cosine": None}
    return {"max_abs": max(o["max_abs"] for o in values), "min_cosine": min(o["cosine"] for o in values),
            "min_token_cosine": min(o["min_token_cosine"] for o in values)}


def run_all(session, inputs: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
    """A session's outputs (in output order) for every feed."""
    return [owned_outputs(session, feed) for feed in inputs]


def check(session, layouts: list[dict], inputs: list[dict[str, np.ndarray]],
          reference: list[list[np.ndarray]], tolerance: float | None) -> list[dict]:
    """Run `session` at every layout's feed against the reference outputs there (see `check_outputs`)."""
    names = [o.name for o in session.get_outputs()]
    return check_outputs(names, layouts, run_all(session, inputs), reference, tolerance)


def check_outputs(names: list[str], layouts: list[dict], outputs: list[list[np.ndarray]],
                  reference: list[list[np.ndarray]], tolerance: float | None) -> list[dict]:
    """One `case_record` per layout, {case, **layout facts, outputs: {name: compare(...)}, ok}, of
    `outputs` (per layout, in output order `names`) against `reference`."""
    records = []
    for layout, produced, ref in zip(layouts, outputs, reference):
        compared = compare_all(dict(zip(names, produced)), dict(zip(names, ref)), tolerance)
        records.append(case_record(layout["case"], compared, **{k: v for k, v in layout.items() if k != "case"}))
    return records
