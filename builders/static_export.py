"""`python -m builders.vision --static WIDTHxHEIGHT`: a family's torch side at one static size.

`StaticBuilder` wraps a family's builder (`builders.family.Family`) and satisfies the same protocol, so the
export command runs unchanged: the example is the static grid, the module the family's static wrapper, the I/O
contract its static inputs with no symbolic dim, and the validation cases that one size (random pixels under
two seeds). The size is checked against the family's patch grid when the builder is made, before any work
(`families.static_size`). After the exporter, constants are folded (onnxscript's optimizer, with size limits
high enough for the position tables) and the graph must pass `core.static_graph.problems`, else the export fails.

A family opts in on its builder with `static_grid(config, checkpoint, size)` (the example, or UsageError),
`static_module(module, example)` (the module to trace), `static_input_names` (inputs kept), `static_fixed(example)`
(the inputs the graph no longer takes, {name: array}: the reference and the report's case facts add them back) and
`static_metadata(example)` (what the model records of its one layout: Qwen's `static_grid_thw`, Phi-4's
`static_image_sizes`).
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxscript.optimizer

from builders.config import ModelConfig
from builders.onnx_export import IOSpec
from vlm_vision_onnx.core import static_graph
from vlm_vision_onnx.core.errors import CheckFailed, UsageError
from vlm_vision_onnx.families.static_size import StaticSize

#: Random-pixel seeds of the validation cases (offsets from --seed).
CASE_SEEDS = (0, 1)
#: onnxscript's constant folding limits (elements): past the position table of a 2B tower (2304 x 1024).
FOLD_LIMIT = 1 << 26


class StaticBuilder:
    """The torch side of `family` at one static size (the `builders.family.Family` protocol)."""

    def __init__(self, family, config: ModelConfig, checkpoint: str | None, size: StaticSize):
        if not hasattr(family, "static_grid"):
            raise UsageError(f"--static: {config.family} has no static form (docs/npu.md says why)")
        self.family, self.size, self.NAME = family, size, family.NAME
        self.grid = family.static_grid(config, checkpoint, size)  # UsageError off the grid: before any work
        self.inputs = list(family.static_input_names)

    def build(self, config, checkpoint, seed):
        return self.family.build(config, checkpoint, seed)

    def example(self, config, module, items):
        if items:
            raise UsageError("--example-grid and --static exclude each other: the static size is the example")
        return self.grid

    def trace_memory_bytes(self, module, example) -> int:
        return self.family.trace_memory_bytes(module, example)

    def io_spec(self, module) -> IOSpec:
        """The family's names, only the static inputs, no symbolic dim."""
        spec = self.family.io_spec(module)
        return IOSpec(self.inputs, spec.output_names, {name: {} for name in self.inputs + spec.output_names})

    def export_module(self, module, ops: str = "standard"):
        return self.family.static_module(module, self.grid)

    def example_inputs(self, module, example, seed: int) -> dict:
        found = self.family.example_inputs(module, example, seed)
        return {name: found[name] for name in self.inputs}

    def full_inputs(self, module, seed: int) -> dict[str, np.ndarray]:
        """The family's whole inputs at the static size (random pixels under `seed`), as numpy."""
        return {name: t.numpy() for name, t in self.family.example_inputs(module, self.grid, seed).items()}

    def validation_cases(self, module, example, seed: int) -> list[tuple[str, dict[str, np.ndarray]]]:
        """(name, static inputs) at the size, random pixels under seed + each of CASE_SEEDS; `reference` and
        `case_facts` add back what the graph no longer takes (`self.grid`)."""
        return [(f"static {self.size.name} seed {seed + offset}",
                 {n: a for n, a in self.full_inputs(module, seed + offset).items() if n in self.inputs})
                for offset in CASE_SEEDS]

    def _whole(self, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return {**inputs, **self.family.static_fixed(self.grid)}

    def reference(self, module):
        run = self.family.reference(module)
        return lambda inputs: run(self._whole(inputs))

    def case_facts(self, inputs: dict[str, np.ndarray]) -> dict:
        return self.family.case_facts(self._whole(inputs))

    def metadata(self, module, example) -> dict:
        return {**self.family.metadata(module, example), "ops": "standard", "static_size": self.size.name,
                **self.family.static_metadata(example), "static_inputs": json.dumps(self.inputs)}

    def exporter(self, export_fn):
        """`export_fn` followed by constant folding and the static check (CheckFailed naming what is not static)."""

        def export(module, args, spec, opset) -> onnx.ModelProto:
            model = fold(export_fn(module, args, spec, opset))
            found = static_graph.problems(model, limit=3)
            if found:
                raise CheckFailed(f"the --static {self.size.name} export is not static: {'; '.join(found)}")
            return model

        return export


def fold(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every subgraph of constants folded (rotary tables, position embedding, window order's inverse): onnxscript's
    optimizer, then `fold_rest` for what it leaves (torch.export's argsort of the window order is a TopK on an
    initializer), then the optimizer again."""
    model = onnxscript.optimizer.optimize(model, input_size_limit=FOLD_LIMIT, output_size_limit=FOLD_LIMIT)
    if fold_rest(model):
        model = onnxscript.optimizer.optimize(model, input_size_limit=FOLD_LIMIT, output_size_limit=FOLD_LIMIT)
    return model


def fold_rest(model: onnx.ModelProto) -> int:
    """Replace, in graph order, each standard node whose inputs are all initializers (at most FOLD_LIMIT elements)
    by initializers holding its outputs, computed by the ONNX reference evaluator; returns the nodes folded."""
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    known = {t.name: t for t in model.graph.initializer}
    opsets = [o for o in model.opset_import if o.domain in ("", "ai.onnx")]
    kept, folded = [], 0
    for node in model.graph.node:
        inputs = [name for name in node.input if name]
        small = sum(int(np.prod(known[n].dims)) for n in inputs if n in known) <= FOLD_LIMIT
        if (node.domain not in ("", "ai.onnx") or not inputs or not all(n in known for n in inputs) or not small
                or any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.attribute)):
            kept.append(node)
            continue
        graph = onnx.helper.make_graph([node], "fold", [], [onnx.helper.make_tensor_value_info(o, 0, None)
                                                            for o in node.output if o],
                                       [known[n] for n in dict.fromkeys(inputs)])
        values = ReferenceEvaluator(onnx.helper.make_model(graph, opset_imports=opsets)).run(None, {})
        for name, value in zip([o for o in node.output if o], values):
            known[name] = numpy_helper.from_array(np.asarray(value), name)
            model.graph.initializer.append(known[name])
        folded += 1
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return folded
