"""What the optimize and int4 stages share: input checks, reference outputs, the report skeleton."""

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx_ir as ir

from vlm_vision_onnx.core import onnx_io, parity, stage_outputs
from vlm_vision_onnx.core import report as reports
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.parity import DEFAULT_TOLERANCE
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.families import Family, check_graph_inputs, of_model
from vlm_vision_onnx.families import validation as layouts_mod


@dataclass
class StageInput:
    """The input model, its family and metadata, the layouts to check and ORT's outputs there (the reference)."""

    path: Path
    model: ir.Model
    family: Family
    metadata: dict[str, str]
    layouts: list[dict]
    inputs: list[dict[str, np.ndarray]]
    reference: list[list[np.ndarray]]
    tolerance: float
    timings: dict[str, float] = field(default_factory=dict)
    #: "run here", or where the reference outputs were read from (`core.stage_outputs`)
    reference_from: str = "run here"


def read_input(path: str | Path, threads: int) -> StageInput:
    """Load IN, check it is an encoder of a known family with that family's inputs, and run it at every
    layout of its own report (else the family's defaults), unless the stage that wrote IN kept its outputs
    there for this very model and these inputs (`core.stage_outputs`).

    The checks and the reference run read the graph alone; the weights are loaded into memory only
    after the reference session is gone (one copy of the weights in memory at a time)."""
    model_file = onnx_io.model_path(path)
    graph = onnx_io.read_proto(model_file)  # no weights
    metadata = {p.key: p.value for p in graph.metadata_props}
    family = of_model(metadata, model_file)
    names = onnx_io.input_names(graph)
    static = json.loads(metadata.get("static_inputs", "null"))  # a --static export takes only these (the grid is its)
    if names != (static or list(family.input_names)):
        raise UsageError(f"{model_file} has inputs {names}, but a {family.name} encoder takes "
                         f"{list(family.input_names)} (export it with `python -m builders.vision`)")
    check_graph_inputs(family, graph.graph, model_file)
    del graph
    layouts = layouts_mod.layouts_for(model_file, metadata, family)
    inputs = layouts_mod.layout_inputs(family, layouts, metadata)
    if static:
        inputs = [{name: feed[name] for name in static} for feed in inputs]
    reference = stage_outputs.read(model_file, inputs)
    reference_from = f"{model_file.with_name(stage_outputs.FILE)} (written by IN's stage, fingerprints match)"
    if reference is None:
        reference, reference_from = parity.run_all(open_session(model_file, threads), inputs), "run here"
    else:
        say(f"reference outputs at the {len(layouts)} layouts: those IN's stage kept ({stage_outputs.FILE})")
    tolerance = float(reports.read_beside(model_file).get("tolerance", DEFAULT_TOLERANCE))
    model = onnx_io.load(model_file, in_memory=True)
    return StageInput(model_file, model, family, metadata, layouts, inputs, reference, tolerance,
                      reference_from=reference_from)


def report_header(stage: str, source: StageInput) -> dict:
    """The start of a quantize stage's report: what it read, and the input's I/O contract and tolerance
    (with the per-case `validation` records, the report is self-contained)."""
    return {"stage": stage, "input": str(source.path), "model": source.metadata.get("model"),
            "family": source.family.name, "weights": source.metadata.get("weights"),
            "io": {"inputs": list(source.family.input_names), "outputs": source.family.output_names(source.metadata),
                   "dims": source.family.dims},
            "tolerance": source.tolerance, "reference_outputs": source.reference_from}


def report_footer(timings: dict[str, float]) -> dict:
    return reports.footer(timings)


def size_record(files: dict[str, int], input_files: dict[str, int]) -> dict:
    """{files, input_files, size_ratio} of a stage's report: bytes per file of its model and of its input's."""
    return {"files": files, "input_files": input_files, "size_ratio": sum(files.values()) / sum(input_files.values())}


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
