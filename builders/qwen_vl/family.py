"""What the generic export command needs to know about a Qwen vision encoder, for every generation.

One `QwenBuilder` per generation (`builders.family.Family` protocol); the registry's `builder` names each
as `builders.qwen_vl.family:<family>` (e.g. `builders.qwen_vl.family:qwen2.5-vl`, an entry of `BUILDERS`).
"""

import json

import numpy as np
import torch

from builders import checkpoint as ckpt
from builders.config import ModelConfig
from builders.onnx_export import IOSpec
from builders.qwen_vl import layouts
from builders.qwen_vl.generations import TORCH_GENERATIONS, TorchGeneration
from builders.qwen_vl.model import (
    VISION_PREFIXES,
    VisionEncoder,
    build_from_checkpoint,
    build_random,
    reference_outputs,
)
from builders.qwen_vl.static_model import StaticVisionEncoder
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families import FAMILIES
from vlm_vision_onnx.families.qwen_vl import contract
from vlm_vision_onnx.families.static_size import StaticSize


def patch_dim(visual) -> int:
    """Row length of pixel_values: channels * temporal patch * patch * patch (1536 at patch 16, 1176 at 14)."""
    c = visual.config
    return c.in_channels * c.temporal_patch_size * c.patch_size * c.patch_size


def merge_size(visual) -> int:
    return visual.config.spatial_merge_size


class QwenBuilder:
    """The torch side of one Qwen generation's family."""

    def __init__(self, generation: TorchGeneration):
        self.generation = generation
        self.NAME = generation.family
        # What a report records of a case: the torch-free family's layout facts (later stages rebuild inputs).
        self.case_facts = FAMILIES[generation.family].case_layout

    def build(self, config: ModelConfig, checkpoint: str | None, seed: int) -> tuple[torch.nn.Module, dict]:
        """The eager vision tower and facts for the report (`weights`: random | checkpoint)."""
        if checkpoint:
            visual, folder = build_from_checkpoint(self.generation, checkpoint)
            return visual, {"weights": "checkpoint", "checkpoint": str(folder)}
        return build_random(config, seed), {"weights": "random", "seed": seed}

    def trace_memory_bytes(self, visual, grid_thw: np.ndarray) -> int:
        """Rough peak bytes of exporting and validating at `grid_thw`: the largest frame's attention scores
        (heads x n x n float32, in the eager reference) plus the activations of every patch (N x MLP width,
        a few live copies) on top of the weights."""
        c = visual.config
        frames = grid_thw[:, 1] * grid_thw[:, 2]
        patches = int((grid_thw[:, 0] * frames).sum())
        largest = int(frames.max())
        weights = sum(p.numel() for p in visual.parameters()) * 4
        mlp = getattr(c, "intermediate_size", None) or getattr(c, self.generation.facts.width_key) * c.mlp_ratio
        return weights + c.num_heads * largest * largest * 4 + patches * mlp * 4 * 4

    def io_spec(self, visual) -> IOSpec:
        """The I/O contract of the design: names and symbolic dims."""
        outputs = contract.output_names(len(getattr(visual.config, "deepstack_visual_indexes", ())))
        axes = {"pixel_values": {0: contract.DIM_PATCHES}, "grid_thw": {0: contract.DIM_IMAGES}}
        axes.update({name: {0: contract.DIM_TOKENS} for name in outputs})
        # N = sum(t*h*w) with h, w multiples of the merge size: torch.export needs to know N % merge**2 == 0.
        multiple = {contract.DIM_PATCHES: visual.config.spatial_merge_size**2}
        return IOSpec(list(contract.INPUT_NAMES), outputs, axes, multiple)

    def export_module(self, visual, ops: str = "contrib") -> torch.nn.Module:
        return VisionEncoder(visual, ops).eval()

    def example(self, config: ModelConfig, visual, items: list[str] | None) -> np.ndarray:
        """The export grid_thw int64 [I, 3]: `--example-grid T,H,W` items, else the config's."""
        if items:
            try:
                grid = [[int(v) for v in item.split(",")] for item in items]
            except ValueError:
                raise UsageError(f"--example-grid takes T,H,W integers, got {items}") from None
        else:
            grid = config.example_grid_thw
        return contract.check_grid(grid, merge_size(visual))

    #: What a static export (`--static`, `builders.static_export`) takes: the grid is the model's, not an input.
    static_input_names = ("pixel_values",)

    def static_grid(self, config: ModelConfig, checkpoint: str | None, size: StaticSize) -> np.ndarray:
        """grid_thw int64 [1, 3] of a static size; UsageError naming the nearest valid sizes when it is off the
        patch grid. Reads only config files (the checkpoint's config.json, else the config's vision keys, else
        the generation's defaults): before any work."""
        values = dict(self.generation.facts.vision_config_class()().to_dict())
        values.update(config.vision)
        if checkpoint:
            values.update(ckpt.checkpoint_config(checkpoint, VISION_PREFIXES)[1].get("vision_config") or {})
        merge = int(values["spatial_merge_size"])
        grid = size.grid(int(values["patch_size"]), merge, int(values["temporal_patch_size"]))
        return contract.check_grid([grid], merge)

    def static_module(self, visual, grid_thw: np.ndarray) -> torch.nn.Module:
        return StaticVisionEncoder(visual, self.generation, np.asarray(grid_thw).tolist()).eval()

    @staticmethod
    def static_fixed(grid_thw: np.ndarray) -> dict[str, np.ndarray]:
        """What a static model no longer takes: its grid_thw int64 [1, 3]."""
        return {"grid_thw": np.asarray(grid_thw, dtype=np.int64)}

    @staticmethod
    def static_metadata(grid_thw: np.ndarray) -> dict[str, str]:
        return {"static_grid_thw": json.dumps(np.asarray(grid_thw).tolist())}

    def example_inputs(self, visual, grid_thw: np.ndarray, seed: int) -> dict[str, torch.Tensor]:
        """Random pixels for the example grid: {pixel_values [N, patch_dim], grid_thw [I, 3]} as torch tensors."""
        pixels, grid = layouts.random_pixels(grid_thw, patch_dim(visual), np.random.default_rng(seed))
        return {"pixel_values": torch.from_numpy(pixels), "grid_thw": torch.from_numpy(grid)}

    def validation_cases(self, visual, grid_thw: np.ndarray, seed: int) -> list[tuple[str, dict[str, np.ndarray]]]:
        """(name, {pixel_values, grid_thw}) of every layout of `layouts.validation_cases`."""
        c = visual.config
        cases = layouts.validation_cases(grid_thw.tolist(), c.patch_size, c.spatial_merge_size,
                                         c.temporal_patch_size, c.in_channels, seed, self.generation.facts,
                                         self.window_patches(visual))
        return [(name, {"pixel_values": pixels, "grid_thw": grid}) for name, pixels, grid in cases]

    def window_patches(self, visual) -> int:
        """The attention window's side in patches (Qwen2.5-VL: window_size 112 pixels / patch 14 = 8); 0 for a
        generation without windows."""
        c = visual.config
        return c.window_size // c.patch_size if self.generation.facts.windows else 0

    def reference(self, visual):
        """{pixel_values, grid_thw} -> eager outputs, numpy."""
        return lambda inputs: reference_outputs(visual, inputs["pixel_values"], inputs["grid_thw"])

    def pytorch_run(self, visual, dtype: torch.dtype):
        """{pixel_values, grid_thw} -> outputs (float32) of transformers' tower at `dtype` with sdpa attention."""
        visual.config._attn_implementation = "sdpa"
        return self.reference(visual.to(dtype))

    def metadata(self, visual, grid_thw: np.ndarray) -> dict:
        """Facts later stages read from the ONNX (surgery reads the export grid)."""
        c = visual.config
        patches = contract.num_patches(grid_thw)
        return {
            "family": self.generation.family,
            "export_grid_thw": json.dumps(grid_thw.tolist()),
            "export_num_patches": patches,
            "export_num_tokens": patches // c.spatial_merge_size**2,
            "spatial_merge_size": c.spatial_merge_size,
            "patch_dim": patch_dim(visual),
            "out_hidden_size": getattr(c, self.generation.facts.out_hidden_key),
            "deepstack_visual_indexes": json.dumps(list(getattr(c, "deepstack_visual_indexes", ()))),
            **({"window_patches": self.window_patches(visual)} if self.generation.facts.windows else {}),
        }


#: family name -> its builder; the registry's `builder` string `builders.qwen_vl.family:NAME` names one.
BUILDERS: dict[str, QwenBuilder] = {name: QwenBuilder(g) for name, g in TORCH_GENERATIONS.items()}
