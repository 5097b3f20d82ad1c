"""What the optimize and int4 stages share: input checks, reference outputs, the report skeleton."""

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx_ir as ir

from core import onnx_io
from core import report as reports
from core.errors import UsageError
from core.parity import DEFAULT_TOLERANCE
from core.session import open_session
from quantize import layouts as layouts_mod
from quantize import parity


@dataclass
class StageInput:
    """The input model, its metadata, the layouts to check and ORT's outputs there (the reference)."""

    path: Path
    model: ir.Model
    metadata: dict[str, str]
    layouts: list[dict]
    inputs: list[dict[str, np.ndarray]]
    reference: list[list[np.ndarray]]
    tolerance: float
    timings: dict[str, float] = field(default_factory=dict)


def read_input(path: str | Path, threads: int) -> StageInput:
    """Load IN, check it is an encoder with the I/O contract, and run it at every layout.

    The checks and the reference run read the graph alone; the weights are loaded into memory only
    after the reference session is gone (one copy of the weights in memory at a time)."""
    model_file = onnx_io.model_path(path)
    graph = onnx_io.read_proto(model_file)  # no weights
    initializers = {t.name for t in graph.graph.initializer}
    inputs_info = [v for v in graph.graph.input if v.name not in initializers]
    names = [v.name for v in inputs_info]
    if names != ["pixel_values", "grid_thw"]:
        raise UsageError(f"{model_file} has inputs {names}, expected ['pixel_values', 'grid_thw'] "
                         f"(a Qwen3-VL vision encoder from `python -m builders.vision`)")
    metadata = {p.key: p.value for p in graph.metadata_props}
    layouts = layouts_mod.layouts_for(model_file, metadata)
    patch_dim = int(metadata.get("patch_dim", inputs_info[0].type.tensor_type.shape.dim[1].dim_value))
    del graph
    inputs = parity.layout_inputs(layouts, patch_dim)
    reference = parity.run_all(open_session(model_file, threads), inputs)
    tolerance = float(reports.read_beside(model_file).get("tolerance", DEFAULT_TOLERANCE))
    model = onnx_io.load(model_file, in_memory=True)
    return StageInput(model_file, model, metadata, layouts, inputs, reference, tolerance)


def report_header(stage: str, source: StageInput) -> dict:
    return {"stage": stage, "input": str(source.path), "model": source.metadata.get("model"),
            "weights": source.metadata.get("weights")}


def report_footer(timings: dict[str, float]) -> dict:
    return reports.footer(timings)


def op_counts(model: ir.Model) -> dict[str, int]:
    """{op type (domain-qualified unless standard): count}, nodes inside Loop/If bodies included."""
    counts: dict[str, int] = {}
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        key = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}.{node.op_type}"
        counts[key] = counts.get(key, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def name_nodes(model: ir.Model) -> None:
    """Give every unnamed node a unique name (the quantizer's --exclude and reports go by name)."""
    taken = {node.name for node in model.graph if node.name}
    for i, node in enumerate(model.graph):
        if not node.name:
            name = f"{node.op_type}_{i}"
            while name in taken:
                name += "_"
            node.name = name
            taken.add(name)
