"""Parity of an ONNX model against the eager PyTorch model, case by case (numpy metrics)."""

from collections.abc import Callable

import numpy as np

from vlm_vision_onnx.core.errors import one_line
from vlm_vision_onnx.core.parity import compare
from vlm_vision_onnx.core.progress import say


def validate(
    run: Callable[[dict[str, np.ndarray]], list],
    reference: Callable[[dict[str, np.ndarray]], list],
    cases: list[tuple[str, dict[str, np.ndarray]]],
    output_names: list[str],
    tolerance: float,
    facts: Callable[[dict[str, np.ndarray]], dict] = lambda inputs: {},
) -> list[dict]:
    """Run every (name, {input: array}) case through both; one record per case ({case, **facts, outputs, ok})."""
    records = []
    for index, (name, inputs) in enumerate(cases, 1):
        try:
            outputs = run(inputs)
            error = None
        except Exception as err:  # noqa: BLE001 -- a graph baked to another layout fails here: record it
            outputs, error = None, f"{type(err).__name__}: {one_line(str(err))}"
        expected = reference(inputs)
        record = {"case": name, **facts(inputs)}
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
