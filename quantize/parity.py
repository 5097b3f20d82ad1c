"""Parity of a candidate model against reference outputs at the validation layouts (ONNX Runtime).

Per output: max abs diff, cosine similarity (flattened, float64) and whether
max abs diff <= tolerance * max(1, max |reference|) (the export stage's rule).
"""

import numpy as np
import onnxruntime as ort

from core import parity
from quantize import layouts as layouts_mod

SEED = 0


def layout_inputs(layouts: list[dict], patch_dim: int) -> list[dict[str, np.ndarray]]:
    """Deterministic random inputs for every layout (seed = SEED + index)."""
    return [layouts_mod.random_inputs(lay["grid_thw"], patch_dim, SEED + i) for i, lay in enumerate(layouts)]


def run_all(session: ort.InferenceSession, inputs: list[dict]) -> list[list[np.ndarray]]:
    return [session.run(None, feed) for feed in inputs]


def compare(reference: list[np.ndarray], candidate: list[np.ndarray], names: list[str],
            tolerance: float | None) -> dict[str, dict]:
    """{output name: core.parity.compare(candidate, reference, tolerance)}."""
    return parity.compare_all(dict(zip(names, candidate)), dict(zip(names, reference)), tolerance)


def check(session: ort.InferenceSession, layouts: list[dict], inputs: list[dict],
          reference: list[list[np.ndarray]], tolerance: float | None) -> list[dict]:
    """One record per layout: {case, grid_thw, num_patches, outputs: compare(...), ok}."""
    names = [o.name for o in session.get_outputs()]
    records = []
    for layout, feed, ref in zip(layouts, inputs, reference):
        outputs = compare(ref, session.run(None, feed), names, tolerance)
        records.append({"case": layout["case"], "grid_thw": layout["grid_thw"],
                        "num_patches": int(feed["pixel_values"].shape[0]), "outputs": outputs,
                        "ok": all(o.get("ok", True) for o in outputs.values())})
    return records


def worst(records: list[dict]) -> tuple[float, float]:
    """(largest max abs diff, smallest cosine) over all layouts and outputs (see core.parity.worst)."""
    found = parity.worst(records)
    return found["max_abs"], found["min_cosine"]
