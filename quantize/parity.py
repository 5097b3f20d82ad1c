"""Parity of a candidate model against reference outputs at the validation layouts (ONNX Runtime).

Per output: max abs diff, cosine similarity (flattened, float64) and whether
max abs diff <= tolerance * max(1, max |reference|) (the export stage's rule).
"""

import tempfile
from pathlib import Path

import numpy as np
import onnx_ir as ir
import onnxruntime as ort

from quantize import layouts as layouts_mod
from quantize import model_io
from runtime import parity, session

# Above this many bytes a model goes to ORT through a temp file instead of a serialized string.
IN_MEMORY_LIMIT = 1536 * 1024 * 1024
SEED = 0


def open_session(model: ir.Model | Path, threads: int = 0) -> ort.InferenceSession:
    """A CPU session for an in-memory model or a model file (`threads` 0: ORT's default)."""
    if isinstance(model, Path):
        return session.open_session(model, threads or None)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    weights = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    if weights < IN_MEMORY_LIMIT:
        data = model_io.to_proto(model).SerializeToString()
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    with tempfile.TemporaryDirectory(prefix="parity-") as tmp:
        path = Path(tmp) / "model.onnx"
        model_io.save(model, path)
        options.add_session_config_entry("session.use_ort_model_bytes_directly", "0")
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def layout_inputs(layouts: list[dict], patch_dim: int) -> list[dict[str, np.ndarray]]:
    """Deterministic random inputs for every layout (seed = SEED + index)."""
    return [layouts_mod.random_inputs(lay["grid_thw"], patch_dim, SEED + i) for i, lay in enumerate(layouts)]


def run_all(session: ort.InferenceSession, inputs: list[dict]) -> list[list[np.ndarray]]:
    return [session.run(None, feed) for feed in inputs]


def compare(reference: list[np.ndarray], candidate: list[np.ndarray], names: list[str],
            tolerance: float | None) -> dict[str, dict]:
    """{output name: runtime.parity.compare(candidate, reference, tolerance)}."""
    return {name: parity.compare(got, ref, tolerance) for name, ref, got in zip(names, reference, candidate)}


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
    """(largest max abs diff, smallest cosine) over all layouts and outputs."""
    values = [o for r in records for o in r["outputs"].values() if "max_abs" in o]
    return max(o["max_abs"] for o in values), min(o["cosine"] for o in values)
