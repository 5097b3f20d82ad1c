"""Build the Qwen3-VL vision tower (random weights or a checkpoint) and its export wrapper."""

import math
from pathlib import Path

import numpy as np
import torch
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLConfig, Qwen3VLVisionConfig
from transformers.models.qwen3_vl.modeling_qwen3_vl import Qwen3VLVisionModel, Qwen3VLVisionRotaryEmbedding

from builders import checkpoint as ckpt
from builders.config import ModelConfig, check_values
from builders.qwen3_vl import grid
from builders.qwen3_vl.patcher import GRID_KWARG, segment_attention_patch
from builders.qwen3_vl.segment_attention import TRANSLATION_TABLE
from core.errors import UsageError

# Where the vision tower lives in a Qwen3VLForConditionalGeneration state dict (transformers 5 layout
# first, then the flat layout of older saves).
VISION_PREFIXES = ("model.visual.", "visual.")
VISION_KEYS = set(Qwen3VLVisionConfig.__annotations__)


def vision_config(values: dict, where: str | Path = "vision") -> Qwen3VLVisionConfig:
    """Qwen3VLVisionConfig from a config file's `vision` mapping, rejecting unknown keys."""
    unknown = sorted(set(values) - VISION_KEYS)
    if unknown:
        raise UsageError(f"unknown vision config key {unknown[0]!r}; allowed: {', '.join(sorted(VISION_KEYS))}")
    check_values(values, Qwen3VLVisionConfig().to_dict(), where)
    try:
        config = Qwen3VLVisionConfig(**values)
    except (TypeError, ValueError) as err:
        raise UsageError(f"config {where}: bad vision config: {str(err).splitlines()[0]}") from None
    check_consistent(config, where)
    return _eager(config)


def check_consistent(config: Qwen3VLVisionConfig, where: str | Path) -> None:
    """Dimensions that must agree (heads divide the width, rotary halves, DeepStack layers exist)."""
    prefix = f"config {where}: vision."
    if config.hidden_size % config.num_heads:
        raise UsageError(f"{prefix}num_heads {config.num_heads} does not divide hidden_size {config.hidden_size}")
    if (config.hidden_size // config.num_heads) % 4:
        raise UsageError(f"{prefix}hidden_size / num_heads = {config.hidden_size // config.num_heads} must be a "
                         "multiple of 4 (2D rotary embedding splits each head in four)")
    bad = [i for i in config.deepstack_visual_indexes if not 0 <= i < config.depth]
    if bad:
        raise UsageError(f"{prefix}deepstack_visual_indexes {list(config.deepstack_visual_indexes)}: {bad[0]} is "
                         f"not a layer of a depth-{config.depth} tower (0..{config.depth - 1})")
    side = math.isqrt(config.num_position_embeddings)
    if side * side != config.num_position_embeddings:
        raise UsageError(f"{prefix}num_position_embeddings {config.num_position_embeddings} must be a square "
                         "(a side x side position grid)")


def _eager(config: Qwen3VLVisionConfig) -> Qwen3VLVisionConfig:
    # The reference runs the model's own per-frame eager attention (see DESIGN: eager is the reference).
    config._attn_implementation = "eager"
    return config


def build_random(config: ModelConfig, seed: int) -> Qwen3VLVisionModel:
    """The tower at the config's dimensions with the model's own initialisation under `seed`."""
    vision = vision_config(config.vision, config.path)
    torch.manual_seed(seed)
    return Qwen3VLVisionModel(vision).float().eval()


def build_from_checkpoint(checkpoint: str) -> tuple[Qwen3VLVisionModel, Path]:
    """The tower of a Qwen3VLForConditionalGeneration checkpoint, loading only the vision weights."""
    folder, raw = ckpt.checkpoint_config(checkpoint, VISION_PREFIXES)
    config_path = folder / "config.json"
    if not isinstance(raw.get("vision_config"), dict):
        raise UsageError(f"checkpoint {folder}: config.json has no vision_config mapping (not a Qwen3-VL checkpoint?)")
    check_values(raw["vision_config"], Qwen3VLVisionConfig().to_dict(), config_path, "vision_config.")
    try:
        vision = Qwen3VLConfig(**raw).vision_config
    except (TypeError, ValueError) as err:
        raise UsageError(f"checkpoint {config_path}: bad config: {str(err).splitlines()[0]}") from None
    check_consistent(vision, config_path)
    state, _ = ckpt.load_prefixed_state_dict(folder, VISION_PREFIXES)
    with torch.device("meta"):
        model = Qwen3VLVisionModel(_eager(vision))
    model = model.to_empty(device="cpu").float()
    # inv_freq is a non-persistent buffer, absent from checkpoints: recompute what __init__ computes.
    inv_freq, _ = Qwen3VLVisionRotaryEmbedding.compute_axial_rope_parameters(vision)
    model.rotary_pos_emb.inv_freq.copy_(inv_freq)
    model.rotary_pos_emb.original_inv_freq.copy_(inv_freq)
    ckpt.load_into(model, state, folder)
    return model.eval(), folder


class VisionEncoder(torch.nn.Module):
    """The export graph: (pixel_values [N, 1536], grid_thw int64 [I, 3]) -> (image_features, *deepstack).

    Every grid-dependent tensor is computed by `grid` and handed to the tower through its precompute
    keyword arguments; attention runs per frame segment (see `patcher`, `segment_attention`). Outputs
    are [N / merge**2, out_hidden] each. `onnx_translation_table` is the torch.export exporter's
    lowering of the custom attention op (the TorchScript one is registered globally on import).
    """

    onnx_translation_table = TRANSLATION_TABLE

    def __init__(self, visual: Qwen3VLVisionModel):
        super().__init__()
        self.visual = visual
        self.merge = visual.config.spatial_merge_size
        self.side = visual.num_grid_per_side

    def forward(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> tuple[torch.Tensor, ...]:
        layout = grid.patch_layout(grid_thw, pixel_values.shape[0], self.merge)
        indices, weights = grid.interpolation_taps(layout, self.side)
        with segment_attention_patch():
            out = self.visual(
                pixel_values,
                grid_thw=grid_thw,
                position_ids=grid.rotary_position_ids(layout),
                interp_indices=indices,
                interp_weights=weights,
                cu_seqlens=grid.image_boundaries(grid_thw),
                return_dict=True,
                **{GRID_KWARG: grid_thw},
            )
        return (out.pooler_output, *out.deepstack_features)


@torch.no_grad()
def reference_outputs(visual: Qwen3VLVisionModel, pixel_values: np.ndarray, grid_thw: np.ndarray) -> list:
    """The unpatched eager model (per-frame attention, Python loops) on one pack: numpy outputs."""
    out = visual(torch.from_numpy(pixel_values), grid_thw=torch.from_numpy(grid_thw), return_dict=True)
    return [t.numpy() for t in (out.pooler_output, *out.deepstack_features)]
