"""Build the Phi-4-multimodal image embedding (random weights or a checkpoint) and its export wrapper."""

from pathlib import Path

import numpy as np
import torch
from huggingface_hub.errors import StrictDataclassError
from transformers.models.phi4_multimodal.configuration_phi4_multimodal import (
    Phi4MultimodalConfig,
    Phi4MultimodalVisionConfig,
)
from transformers.models.phi4_multimodal.modeling_phi4_multimodal import Phi4MultimodalImageEmbedding

from builders import checkpoint as ckpt
from builders.config import ModelConfig, check_values
from builders.phi4_mm.hd_merge import patch_position_ids, token_sources
from builders.phi4_mm.patcher import bidirectional_attention
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.phi4_mm import crops

# Where the image embedding lives in a Phi4MultimodalForCausalLM state dict.
IMAGE_EMBED_PREFIXES = ("model.embed_tokens_extend.image_embed.",)
# `vision` keys of a config file: the vision config's, plus the projection width (the LM's hidden size).
OUT_HIDDEN = "out_hidden_size"
INIT_STD = 0.02  # random builds: std of every weight matrix (the usual initializer_range)
VISION_KEYS = set(Phi4MultimodalVisionConfig.__annotations__) | {OUT_HIDDEN}


def embedding_config(values: dict, where: str | Path = "") -> Phi4MultimodalConfig:
    """Phi4MultimodalConfig from a config file's `vision` mapping, rejecting unknown keys and bad values."""
    unknown = sorted(set(values) - VISION_KEYS)
    if unknown:
        raise UsageError(f"config {where}: unknown vision config key {unknown[0]!r}; "
                         f"allowed: {', '.join(sorted(VISION_KEYS))}")
    check_values(values, {**Phi4MultimodalVisionConfig().to_dict(), OUT_HIDDEN: 3072}, where)
    vision = {k: v for k, v in values.items() if k != OUT_HIDDEN}
    try:
        config = Phi4MultimodalConfig(vision_config=vision, **({"hidden_size": values[OUT_HIDDEN]}
                                                               if OUT_HIDDEN in values else {}))
    except (TypeError, ValueError) as err:
        raise UsageError(f"config {where}: bad vision config: {str(err).splitlines()[0]}") from None
    return _checked(config, where)


def _checked(config: Phi4MultimodalConfig, where: str | Path) -> Phi4MultimodalConfig:
    """The I/O contract fixes the crop geometry (448-pixel crops of 32 x 32 patches); the widths and the
    feature layer must fit; the reference runs eager attention."""
    v = config.vision_config
    if (v.image_size, v.crop_size, v.patch_size) != (crops.CROP, crops.CROP, crops.PATCH):
        raise UsageError(f"config {where}: image_size, crop_size, patch_size must be {crops.CROP}, {crops.CROP}, "
                         f"{crops.PATCH} (the processor's crop geometry), got {v.image_size}, {v.crop_size}, "
                         f"{v.patch_size}")
    if v.hidden_size % v.num_attention_heads:
        raise UsageError(f"config {where}: hidden_size {v.hidden_size} is not a multiple of "
                         f"num_attention_heads {v.num_attention_heads}")
    if not -v.num_hidden_layers - 1 <= v.feature_layer <= v.num_hidden_layers:
        raise UsageError(f"config {where}: feature_layer {v.feature_layer} is not a hidden state of "
                         f"{v.num_hidden_layers} layers (-{v.num_hidden_layers + 1}..{v.num_hidden_layers})")
    v._attn_implementation = "eager"  # the reference: eager attention (sdpa would run causal, see patcher)
    return config


def build_random(config: ModelConfig, seed: int) -> Phi4MultimodalImageEmbedding:
    """The image embedding at the config's dimensions with the model's own initialisation under `seed`.

    Except two things: the model draws its attention and MLP weights from normal(0, 1), which makes a
    27-layer tower chaotic (a 1-ulp difference grows to 10-40% relative error at published dims, so no
    parity check means anything): every matrix is drawn from normal(0, INIT_STD) instead. And it
    initialises both separators to zero, which would hide a misplaced separator: normal(0, 1) here.
    Inference only: no parameter requires grad (otherwise the TorchScript
    trace keeps every layer's activations for backward: 3x the export's peak memory).
    """
    torch.manual_seed(seed)
    embed = Phi4MultimodalImageEmbedding(embedding_config(config.vision, config.path)).float().eval()
    with torch.no_grad():
        for param in embed.parameters():
            if param.dim() >= 2:  # the model's own init draws attention/MLP weights from N(0, 1): chaotic
                param.normal_(0.0, INIT_STD)
        embed.sub_img_feature_extensor.normal_()
        embed.global_img_feature_extensor.normal_()
    return embed.requires_grad_(False)


def build_from_checkpoint(checkpoint: str) -> tuple[Phi4MultimodalImageEmbedding, Path]:
    """The image embedding of a Phi4MultimodalForCausalLM `save_pretrained` folder (only its weights)."""
    folder, raw = ckpt.checkpoint_config(checkpoint, IMAGE_EMBED_PREFIXES)
    config_path = folder / "config.json"
    if raw.get("model_type") != "phi4_multimodal":
        raise UsageError(f"checkpoint {folder}: config.json has model_type {raw.get('model_type')!r}, "
                         "not 'phi4_multimodal'")
    if isinstance(raw.get("vision_config"), dict):
        check_values(raw["vision_config"], Phi4MultimodalVisionConfig().to_dict(), config_path, "vision_config.")
    try:
        config = Phi4MultimodalConfig.from_dict(raw)
    except (TypeError, ValueError, AttributeError, KeyError, StrictDataclassError) as err:  # a field of the wrong type
        raise UsageError(f"checkpoint {folder}: bad config.json: {str(err).splitlines()[0]}") from None
    config = _checked(config, config_path)
    v = config.vision_config
    ckpt.check_dims(ckpt.header_shapes(folder, IMAGE_EMBED_PREFIXES),
                    ("vision_config.num_hidden_layers", v.num_hidden_layers),
                    {"vision_config.hidden_size": v.hidden_size, "vision_config.intermediate_size": v.intermediate_size},
                    "layers", config_path)
    state, _ = ckpt.load_prefixed_state_dict(folder, IMAGE_EMBED_PREFIXES)
    with torch.device("meta"):
        embed = Phi4MultimodalImageEmbedding(config)
    embed = embed.to_empty(device="cpu").float()
    ckpt.load_into(embed, state, folder)
    return embed.eval().requires_grad_(False), folder


def feature_depth(embed: Phi4MultimodalImageEmbedding) -> int:
    """Encoder layers that `hidden_states[feature_layer]` runs (hidden_states[0] is the embeddings)."""
    layers = len(embed.img_processor.encoder.layers)
    return embed.layer_idx if embed.layer_idx >= 0 else layers + 1 + embed.layer_idx


def key_padding_bias(keys: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """bool [B, S] (True = real patch) -> additive bias [B, 1, 1, S]: 0 on real patches, the dtype's
    lowest value on padded ones (as the eager bidirectional mask).

    Written as BERT's extended mask, (1 - mask[:, None, None, :]) * lowest, which ONNX Runtime's
    Attention fusion recognises and keeps as the fused op's mask input (AttentionMaskFormat.AttentionMask).
    """
    extended = keys.unsqueeze(1).unsqueeze(2).to(dtype)
    return (1.0 - extended) * torch.finfo(dtype).min


class ImageFeatures(torch.nn.Module):
    """The export graph: (pixel_values [I, C, 3, 448, 448], image_attention_mask [I, C, 32, 32],
    image_sizes int64 [I, 2]) -> image_features [num_image_tokens, out_hidden].

    The eager image embedding's features without its scatter into inputs_embeds: the encoder's
    `hidden_states[feature_layer]` of every crop (padded patches masked out of attention), AvgPool 2,
    the HD merge of `hd_merge.token_sources` (one gather), then the projection.
    """

    def __init__(self, embed: Phi4MultimodalImageEmbedding):
        super().__init__()
        self.embed = embed
        self.depth = feature_depth(embed)
        self.per_side = embed.img_processor.embeddings.num_patches_per_side
        n = self.per_side
        # The eager bucketize boundaries, computed once in eager so both sides use identical values.
        self.register_buffer("boundaries", torch.arange(1 / n, 1.0, 1 / n), persistent=False)

    def forward(self, pixel_values: torch.Tensor, image_attention_mask: torch.Tensor,
                image_sizes: torch.Tensor) -> torch.Tensor:
        return self.features(pixel_values.flatten(0, 1), *self.layout(image_attention_mask, image_sizes))

    def layout(self, image_attention_mask: torch.Tensor, image_sizes: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """What the pack's crop layout decides: (patch positions int64 [B, S], attention bias float32 [B, 1, 1, S],
        the HD merge's source rows int64 [T]) from image_attention_mask [I, C, 32, 32] and image_sizes [I, 2]
        (B = I * C crops, S = 32 * 32 patches)."""
        mask = image_attention_mask.flatten(0, 1) != 0  # [B, 32, 32]
        positions = patch_position_ids(mask, self.boundaries, self.per_side)
        bias = key_padding_bias(mask.reshape(mask.shape[0], -1), self.embed.sub_img_feature_extensor.dtype)
        return positions, bias, token_sources(image_attention_mask, image_sizes, self.embed.crop_size, self.side)

    def features(self, pixels: torch.Tensor, positions: torch.Tensor, bias: torch.Tensor,
                 rows: torch.Tensor) -> torch.Tensor:
        """pixels [B, 3, 448, 448] and the layout's (positions, bias, rows) -> image_features [T, out_hidden]."""
        embed, vision = self.embed, self.embed.img_processor
        hidden = vision.embeddings.patch_embedding(pixels).flatten(2).transpose(1, 2)  # [B, S, D]
        hidden = hidden + vision.embeddings.position_embedding(positions)
        with bidirectional_attention():
            for layer in vision.encoder.layers[: self.depth]:
                hidden = layer(hidden, bias)
        pooled = self.pool(hidden)  # [B * side * side, D]
        source = torch.cat([pooled, embed.sub_img_feature_extensor.reshape(1, -1),
                            embed.global_img_feature_extensor.reshape(1, -1)])
        features = source[rows]  # [T, D]
        return embed.img_projection_down(torch.nn.functional.gelu(embed.img_projection_up(features)))

    @property
    def side(self) -> int:
        """Pooled tokens per crop side (16)."""
        return (self.per_side + 1) // 2

    def pool(self, hidden: torch.Tensor) -> torch.Tensor:
        """[B, S, D] -> [B * side * side, D]: AvgPool 2 over each crop's patch grid (as get_img_features)."""
        embed, dim = self.embed, hidden.shape[-1]
        grid = hidden.reshape(-1, self.per_side, self.per_side, dim).permute(0, 3, 1, 2)
        if getattr(embed, "img_processor_padding", None) is not None:
            grid = embed.img_processor_padding(grid)
        return embed.image_token_compression(grid).permute(0, 2, 3, 1).reshape(-1, dim)


@torch.no_grad()
def reference_outputs(embed: Phi4MultimodalImageEmbedding, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """The unpatched eager image embedding (per-image loops, eager attention) on one pack.

    It scatters into inputs_embeds at image-token positions: with a prompt of only image tokens the
    result is image_features [num_image_tokens, out_hidden] in scatter order.
    """
    tokens = crops.num_tokens(crops.check_inputs(inputs))
    image_token = embed.config.vision_config.image_token_id
    out = embed(
        input_ids=torch.full((1, tokens), image_token, dtype=torch.int64),
        inputs_embeds=torch.zeros(1, tokens, embed.config.hidden_size),
        image_pixel_values=torch.from_numpy(inputs["pixel_values"]),
        image_sizes=torch.from_numpy(inputs["image_sizes"]),
        image_attention_mask=torch.from_numpy(inputs["image_attention_mask"]),
    )
    return [out[0].numpy()]
