"""Parity of an ONNX model against the eager PyTorch model, case by case (numpy metrics)."""

from collections.abc import Callable

import numpy as np

from core.parity import compare
from core.progress import say


def validate(
    run: Callable[[np.ndarray, np.ndarray], list],
    reference: Callable[[np.ndarray, np.ndarray], list],
    cases: list,
    output_names: list[str],
    tolerance: float,
) -> list[dict]:
    """Run every (name, pixel_values, grid_thw) case through both; one record per case."""
    records = []
    for index, (name, pixel_values, grid_thw) in enumerate(cases, 1):
        try:
            outputs = run(pixel_values, grid_thw)
            error = None
        except Exception as err:  # noqa: BLE001 -- a graph baked to another grid fails here: record it
            outputs, error = None, f"{type(err).__name__}: {str(err).splitlines()[0][:300]}"
        expected = reference(pixel_values, grid_thw)
        record = {"case": name, "grid_thw": grid_thw.tolist(), "num_patches": int(pixel_values.shape[0])}
        if error:
            record.update(ok=False, error=error)
        else:
            record["outputs"] = {n: compare(o, r, tolerance) for n, o, r in zip(output_names, outputs, expected)}
            record["ok"] = all(m["ok"] for m in record["outputs"].values())
        records.append(record)
        worst = max((m.get("max_abs", float("inf")) for m in record.get("outputs", {}).values()),
                    default=float("inf"))
        say(f"  case {index}/{len(cases)} {name}: {'ok' if record['ok'] else 'FAIL'} (max abs diff {worst:.2e})")
    return records
