"""Build a Qwen vision tower (random weights or a checkpoint) of any generation, and its export wrapper."""

import math
from pathlib import Path

import numpy as np
import torch
from huggingface_hub.errors import StrictDataclassError

from builders import checkpoint as ckpt
from builders.config import ModelConfig, check_values
from builders.qwen_vl import grid, segment_attention, window_attention
from builders.qwen_vl.generations import TORCH_GENERATIONS, TorchGeneration
from builders.qwen_vl.patcher import CHUNK_ATTR, GRID_KWARG, WINDOW_ATTR, segment_attention_patch
from builders.qwen_vl.segment_attention import CHUNK_ROWS
from vlm_vision_onnx.core.errors import UsageError

# Where the vision tower lives in a *ForConditionalGeneration state dict (transformers 5 layout first, then the
# flat layout of older saves).
VISION_PREFIXES = ("model.visual.", "visual.")


def generation_of(visual: torch.nn.Module) -> TorchGeneration:
    """The generation whose tower class `visual` is."""
    for generation in TORCH_GENERATIONS.values():
        if type(visual) is generation.vision_model:
            return generation
    raise TypeError(f"{type(visual).__name__} is not a Qwen vision tower")


def vision_config(generation: TorchGeneration, values: dict, where: str | Path = "vision"):
    """The generation's vision config from a config file's `vision` mapping, rejecting unknown keys."""
    cls = generation.facts.vision_config_class()
    known = set(cls.__annotations__)
    unknown = sorted(set(values) - known)
    if unknown:
        raise UsageError(f"config {where}: unknown vision config key {unknown[0]!r} for {generation.facts.title}; "
                         f"allowed: {', '.join(sorted(known))}")
    check_values(values, cls().to_dict(), where)
    try:
        config = cls(**values)
    except (TypeError, ValueError) as err:
        raise UsageError(f"config {where}: bad vision config: {str(err).splitlines()[0]}") from None
    check_consistent(generation, config, where)
    return _eager(config)


def check_consistent(generation: TorchGeneration, config, where: str | Path) -> None:
    """Dimensions that must agree (heads divide the width, rotary quarters, DeepStack and full-attention layers
    exist, a square position table, windows of whole merge blocks)."""
    prefix = f"config {where}: vision."
    width_key = generation.facts.width_key
    width = getattr(config, width_key)
    if width % config.num_heads:
        raise UsageError(f"{prefix}num_heads {config.num_heads} does not divide {width_key} {width}")
    if (width // config.num_heads) % 4:
        raise UsageError(f"{prefix}{width_key} / num_heads = {width // config.num_heads} must be a multiple of 4 "
                         "(2D rotary embedding splits each head in four)")
    for key in ("deepstack_visual_indexes", "fullatt_block_indexes"):
        layers = list(getattr(config, key, ()))
        bad = [i for i in layers if not 0 <= i < config.depth]
        if bad:
            raise UsageError(f"{prefix}{key} {layers}: {bad[0]} is not a layer of a depth-{config.depth} tower "
                             f"(0..{config.depth - 1})")
    if generation.position_table:
        side = math.isqrt(config.num_position_embeddings)
        if side * side != config.num_position_embeddings:
            raise UsageError(f"{prefix}num_position_embeddings {config.num_position_embeddings} must be a square "
                             "(a side x side position grid)")
    if generation.facts.windows:
        block = config.patch_size * config.spatial_merge_size
        if config.window_size < block or config.window_size % block:
            raise UsageError(f"{prefix}window_size {config.window_size} must be a positive multiple of patch_size x "
                             f"spatial_merge_size = {block} pixels (windows of whole merged tokens)")


def _eager(config):
    # The reference runs the model's own per-frame eager attention (see DESIGN: eager is the reference).
    config._attn_implementation = "eager"
    return config


def build_random(config: ModelConfig, seed: int) -> torch.nn.Module:
    """The tower of the config's family at its dimensions, with the model's own initialisation under `seed`."""
    generation = TORCH_GENERATIONS[config.family]
    vision = vision_config(generation, config.vision, config.path)
    torch.manual_seed(seed)
    return generation.vision_model(vision).float().eval()


def build_from_checkpoint(generation: TorchGeneration, checkpoint: str) -> tuple[torch.nn.Module, Path]:
    """The tower of a *ForConditionalGeneration checkpoint of the generation, loading only the vision weights."""
    folder, raw = ckpt.checkpoint_config(checkpoint, VISION_PREFIXES)
    config_path = folder / "config.json"
    if not isinstance(raw.get("vision_config"), dict):
        raise UsageError(f"checkpoint {folder}: config.json has no vision_config mapping (not a "
                         f"{generation.facts.title.removesuffix(' vision encoder')} checkpoint?)")
    check_values(raw["vision_config"], generation.facts.vision_config_class()().to_dict(), config_path,
                 "vision_config.")
    try:
        vision = generation.facts.model_config_class()(**raw).vision_config
    except (TypeError, ValueError, AttributeError, KeyError, StrictDataclassError) as err:  # a field of the wrong type
        raise UsageError(f"checkpoint {config_path}: bad config: {str(err).splitlines()[0]}") from None
    check_consistent(generation, vision, config_path)
    widths = {k: getattr(vision, k) for k in ("hidden_size", "embed_dim", "intermediate_size", "out_hidden_size")
              if isinstance(getattr(vision, k, None), int)}
    ckpt.check_dims(ckpt.header_shapes(folder, VISION_PREFIXES), ("vision_config.depth", vision.depth),
                    {f"vision_config.{k}": v for k, v in widths.items()}, "blocks", config_path)
    state, _ = ckpt.load_prefixed_state_dict(folder, VISION_PREFIXES)
    with torch.device("meta"):
        model = generation.vision_model(_eager(vision))
    model = model.to_empty(device="cpu").float()
    # inv_freq is a non-persistent buffer, absent from checkpoints: recompute what __init__ computes.
    inv_freq, _ = generation.rotary_embedding.compute_axial_rope_parameters(vision)
    model.rotary_pos_emb.inv_freq.copy_(inv_freq)
    model.rotary_pos_emb.original_inv_freq.copy_(inv_freq)
    ckpt.load_into(model, state, folder)
    return model.eval(), folder


#: torch.export's lowering of the attention ops (frames and windows).
TRANSLATION_TABLE = {**segment_attention.TRANSLATION_TABLE, **window_attention.TRANSLATION_TABLE}


class VisionEncoder(torch.nn.Module):
    """The export graph: (pixel_values [N, C*Tp*P*P], grid_thw int64 [I, 3]) -> (image_features, *deepstack).

    Every grid-dependent tensor is computed by `grid` and handed to the tower through its precompute
    keyword arguments: rotary position ids [N, 2], the position table's taps [N, 4] (Qwen3-VL, Qwen3.5), the
    window permutation [N / merge**2] (Qwen2.5-VL). Attention runs per frame segment, or per window in the
    window blocks (see `patcher`, `segment_attention`, `window_attention`). Outputs are [N / merge**2, out_hidden] each.
    `onnx_translation_table` is the torch.export exporter's lowering of the custom attention ops (the
    TorchScript one is registered globally on import).
    """

    onnx_translation_table = TRANSLATION_TABLE

    def __init__(self, visual: torch.nn.Module, ops: str = "contrib"):
        super().__init__()
        self.visual = visual
        self.generation = generation_of(visual)
        config = visual.config
        self.merge = config.spatial_merge_size
        self.window = 0
        for block in visual.blocks:
            setattr(block.attn, CHUNK_ATTR, CHUNK_ROWS[ops])  # the Loop's step (segment_attention.CHUNK_ROWS)
        if self.generation.facts.windows:
            # window side in patches; the full-attention blocks attend per frame (window 0)
            self.window = config.window_size // config.patch_size
            for index, block in enumerate(visual.blocks):
                setattr(block.attn, WINDOW_ATTR, 0 if index in config.fullatt_block_indexes else self.window)

    def forward(self, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> tuple[torch.Tensor, ...]:
        layout = grid.patch_layout(grid_thw, pixel_values.shape[0], self.merge)
        boundaries = grid.image_boundaries(grid_thw)
        precomputed = {"position_ids": grid.rotary_position_ids(layout), "cu_seqlens": boundaries}
        if self.generation.position_table:
            indices, weights = grid.interpolation_taps(layout, self.visual.num_grid_per_side)
            precomputed.update(interp_indices=indices, interp_weights=weights)
        if self.window:
            # cu_window_seqlens is only there so that the tower does not compute its own with Python loops: the
            # segment attention derives the windows from grid_thw itself.
            precomputed.update(window_index=grid.window_order(layout, self.merge, self.window),
                               cu_window_seqlens=boundaries)
        with segment_attention_patch(self.generation):
            out = self.visual(pixel_values, grid_thw=grid_thw, return_dict=True, **precomputed,
                              **{GRID_KWARG: grid_thw})
        return (out.pooler_output, *getattr(out, "deepstack_features", ()))


@torch.no_grad()
def reference_outputs(visual: torch.nn.Module, pixel_values: np.ndarray, grid_thw: np.ndarray) -> list:
    """The unpatched eager model (per-frame attention, Python loops) on one pack: numpy float32 outputs (the
    patch embedding casts the pixels to the model's dtype)."""
    out = visual(torch.from_numpy(pixel_values), grid_thw=torch.from_numpy(grid_thw), return_dict=True)
    return [t.float().numpy() for t in (out.pooler_output, *getattr(out, "deepstack_features", ()))]
