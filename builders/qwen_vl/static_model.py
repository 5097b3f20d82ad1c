"""The export wrapper of a static Qwen vision encoder: one grid, known at export (`--static WIDTHxHEIGHT`).

`StaticVisionEncoder(visual, grid)`: forward(pixel_values [N, C*Tp*P*P]) -> (image_features, *deepstack), each
[N / merge**2, out_hidden], for N = t*h*w of that one grid. There is no `grid_thw` input: the grid is the model's
(ONNX metadata `static_grid_thw`) and every grid-dependent tensor is computed once here, by transformers' own
helpers run eagerly (`transformers.vision_utils`: rotary position ids [N, 2], the position table's taps [N, 4],
Qwen2.5-VL's window order [N / merge**2] and window boundaries), and handed to the tower through its precompute
keyword arguments: the trace sees them as constants, and the ONNX holds them (or what they fold into: the rotary
cos/sin tables, the interpolated position embedding) as constants. Attention runs as batched MatMul + Softmax
per frame or window (`static_attention`).
"""

from __future__ import annotations

import torch
from transformers import vision_utils

from builders.qwen_vl.generations import TorchGeneration
from builders.qwen_vl.static_attention import PLAN_ATTR, Plan, static_attention_patch


def precomputed(visual: torch.nn.Module, generation: TorchGeneration, grid_thw: torch.Tensor) -> dict:
    """The tower's precompute keyword arguments for `grid_thw` int64 [I, 3], computed eagerly by transformers'
    helpers (the same code the eager model runs), plus the attention boundaries."""
    config = visual.config
    merge = config.spatial_merge_size
    found = {"position_ids": vision_utils.get_vision_position_ids(grid_thw, merge),
             "cu_seqlens": vision_utils.get_vision_cu_seqlens(grid_thw)}
    if generation.position_table:
        found["interp_indices"], found["interp_weights"] = vision_utils.get_vision_interpolation_indices_and_weights(
            grid_thw, num_grid_per_side=visual.num_grid_per_side, mode=visual.interpolation_mode,
            align_corners=visual.interpolation_align_corners, spatial_merge_size=merge)
    if generation.facts.windows:
        found["window_index"], found["cu_window_seqlens"] = vision_utils.get_vision_window_index(
            grid_thw, spatial_merge_size=merge, window_size=config.window_size, patch_size=config.patch_size)
    return found


class StaticVisionEncoder(torch.nn.Module):
    """pixel_values float32 [N, C*Tp*P*P] of one fixed grid -> (image_features, *deepstack_embeds)."""

    def __init__(self, visual: torch.nn.Module, generation: TorchGeneration, grid_thw: list[list[int]]):
        super().__init__()
        self.visual = visual
        self.generation = generation
        self.grid_thw = torch.tensor(grid_thw, dtype=torch.int64)
        with torch.no_grad():
            self.precomputed = precomputed(visual, generation, self.grid_thw)
        frames = Plan.from_boundaries(self.precomputed["cu_seqlens"])
        windows = (Plan.from_boundaries(self.precomputed["cu_window_seqlens"])
                   if generation.facts.windows else frames)
        full = set(getattr(visual.config, "fullatt_block_indexes", ()) or ()) if generation.facts.windows else None
        for index, block in enumerate(visual.blocks):
            setattr(block.attn, PLAN_ATTR, frames if full is None or index in full else windows)

    @property
    def num_patches(self) -> int:
        return int(self.grid_thw.prod(dim=1).sum())

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with static_attention_patch(self.generation):
            out = self.visual(pixel_values, grid_thw=self.grid_thw, return_dict=True, **dict(self.precomputed))
        return (out.pooler_output, *getattr(out, "deepstack_features", ()))
