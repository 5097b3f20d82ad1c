"""The torch side of the family protocol: what the generic export command (`builders.vision`) needs.

The torch-free side (I/O contract, layouts, passes, release and processing facts) is the family's
declared object in `families/` (`families.base.Family`); its `builder` names the module holding the
functions below (`builders.phi4_mm.family`), or `module:NAME`, an entry of that module's `BUILDERS` (the
Qwen generations share one: `builders.qwen_vl.family:qwen2.5-vl`); `load` resolves either. The registry
`families.FAMILIES` is the only one. Generic code passes inputs as `{name: array}` in the I/O contract's
input order, never as positional model-specific tuples.
An *example* is whatever the family exports and validates around (Qwen3-VL: a grid_thw array;
Phi-4-multimodal: a list of image sizes); generic code only hands it back to the family.
"""

import importlib
from typing import Any, Protocol

import numpy as np
import torch

from builders.config import ModelConfig
from builders.onnx_export import IOSpec

Inputs = dict[str, np.ndarray]


class Family(Protocol):
    NAME: str

    def build(self, config: ModelConfig, checkpoint: str | None, seed: int) -> tuple[torch.nn.Module, dict]:
        """The eager module (random weights under `seed`, or the checkpoint's) and report facts
        (`weights`: random | checkpoint, plus `seed` or `checkpoint`). UsageError on a bad config or checkpoint."""

    def example(self, config: ModelConfig, module: torch.nn.Module, items: list[str] | None) -> Any:
        """The export example: from `--example-grid` items when given (UsageError if the family has none
        or they are bad), else the config's."""

    def trace_memory_bytes(self, module: torch.nn.Module, example: Any) -> int:
        """Rough peak bytes of exporting and validating at `example` (checked against free memory)."""

    def io_spec(self, module: torch.nn.Module) -> IOSpec:
        """Input and output names, symbolic dims (only where they really vary)."""

    def export_module(self, module: torch.nn.Module, ops: str = "contrib") -> torch.nn.Module:
        """The module the exporters trace: forward(*inputs in io_spec order) -> outputs in order. `ops`
        (`--ops`: contrib | standard): the graph the export is lowered to afterwards, for a family whose
        traced form depends on it (the Qwen segment attention's step size)."""

    def example_inputs(self, module: torch.nn.Module, example: Any, seed: int) -> dict[str, torch.Tensor]:
        """Random inputs of the example, by input name."""

    def validation_cases(self, module: torch.nn.Module, example: Any, seed: int) -> list[tuple[str, Inputs]]:
        """(case name, inputs) of every parity layout, same-size-other-layout cases included."""

    def reference(self, module: torch.nn.Module):
        """inputs -> the eager model's outputs (list of arrays, in output order)."""

    def pytorch_run(self, module: torch.nn.Module, dtype: torch.dtype):
        """inputs -> outputs (float32 arrays, output order) of the model as a PyTorch user runs it: cast to
        `dtype`, transformers' fastest correct attention (sdpa); `module` is changed in place. What
        `bench.cpu_race` races against."""

    def case_facts(self, inputs: Inputs) -> dict:
        """What a report records of a case's inputs: the torch-free family's `case_layout`, from which
        later stages rebuild inputs of the same layout."""

    def metadata(self, module: torch.nn.Module, example: Any) -> dict:
        """ONNX metadata_props later stages read (family, export example, sizes)."""


def of_config(config: ModelConfig) -> Family:
    """The torch side of the family a config names (UsageError naming the known ones when it names none)."""
    from vlm_vision_onnx.families import family

    return load(family(config.family, f"config {config.path}").builder)


def load(builder: str) -> Family:
    """The torch side a family's `builder` string names: a module, or `module:NAME` (its `BUILDERS[NAME]`)."""
    module_name, _, name = builder.partition(":")
    module = importlib.import_module(module_name)
    return module.BUILDERS[name] if name else module
