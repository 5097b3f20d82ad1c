"""What differs between the Qwen vision generations, torch-free: one declared `Generation` each.

The four towers share the I/O contract (pixel_values [N, C*Tp*P*P], grid_thw [I, 3] -> merged tokens),
the grid math, the per-segment attention and the processor class (transformers' Qwen2VLImageProcessor).
What differs is declared here; the torch side (`builders/qwen_vl/generations.py`) adds the model classes.

| generation | patch | norm / MLP | attention | position | extra outputs |
|---|---|---|---|---|---|
| Qwen2-VL   | 14 | LayerNorm, QuickGELU | full, per frame | 2D RoPE | - |
| Qwen2.5-VL | 14 | RMSNorm, SwiGLU | windows of `window_size` px, full in `fullatt_block_indexes` | 2D RoPE | - |
| Qwen3-VL   | 16 | LayerNorm, GELU | full, per frame | 2D RoPE + interpolated table | DeepStack |
| Qwen3.5    | 16 | LayerNorm, GELU | full, per frame | 2D RoPE + interpolated table | - |
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: OpenAI CLIP's normalisation, Qwen2-VL's and Qwen2.5-VL's image_mean / image_std.
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


@dataclass(frozen=True)
class Generation:
    """One Qwen vision generation as the torch-free stages see it.

    `family`: registry key (`qwen2.5-vl`); `model_type`: the checkpoint's config.json `model_type`
    (`qwen2_5_vl`), the one a package's config.json names so that transformers.js picks its class;
    `processor`: the published preprocessor_config.json settings (Qwen2VLImageProcessor keys);
    `deepstack`: DeepStack outputs after image_features; `windows`: window attention (Qwen2.5-VL);
    `out_hidden_key` / `width_key`: the vision config keys of the features' width and the tower's (Qwen2-VL
    calls them `hidden_size` and `embed_dim`); `video_budget`: the video processor's pixel budget, the whole
    clip's (Qwen3VLVideoProcessor) or each frame's (Qwen2VLVideoProcessor, `preprocess_video`).
    """

    family: str
    title: str
    model_type: str
    processor: dict = field(default_factory=dict)
    deepstack: bool = False
    windows: bool = False
    out_hidden_key: str = "out_hidden_size"
    width_key: str = "hidden_size"
    video_budget: str = "clip"

    def vision_config_class(self):
        """transformers' vision config class of the generation (torch-free)."""
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        return CONFIG_MAPPING[self.model_type].sub_configs["vision_config"]

    def model_config_class(self):
        """transformers' config class of the whole model (what a checkpoint's config.json holds)."""
        from transformers.models.auto.configuration_auto import CONFIG_MAPPING

        return CONFIG_MAPPING[self.model_type]

    @property
    def architecture(self) -> str:
        """The whole model's class name, a checkpoint's config.json `architectures` entry
        (`Qwen2_5_VLForConditionalGeneration`)."""
        return self.model_config_class().__name__.removesuffix("Config") + "ForConditionalGeneration"

    @property
    def patch(self) -> int:
        return self.processor["patch_size"]

    @property
    def pixel_bounds(self) -> tuple[int, int]:
        """(min_pixels, max_pixels) of the published processor."""
        return self.processor["min_pixels"], self.processor["max_pixels"]


def _settings(patch: int, min_pixels: int, max_pixels: int, mean: list, std: list) -> dict:
    return {"patch_size": patch, "temporal_patch_size": 2, "merge_size": 2, "min_pixels": min_pixels,
            "max_pixels": max_pixels, "image_mean": mean, "image_std": std}


# Qwen2-VL / Qwen2.5-VL-*-Instruct preprocessor_config.json: patch 14, CLIP normalisation, 56*56 to 3584*3584 pixels.
_QWEN2 = _settings(14, 3136, 12845056, CLIP_MEAN, CLIP_STD)
# Qwen3-VL-*-Instruct preprocessor_config.json: patch 16, mean = std = 0.5, 256*256 to 4096*4096 pixels. Qwen3.5 uses
# Qwen3-VL's processor (its published preprocessor_config.json could not be checked here: Qwen3-VL's is used).
_QWEN3 = _settings(16, 65536, 16777216, [0.5, 0.5, 0.5], [0.5, 0.5, 0.5])

QWEN2_VL = Generation("qwen2-vl", "Qwen2-VL vision encoder", "qwen2_vl", _QWEN2, out_hidden_key="hidden_size",
                      width_key="embed_dim", video_budget="frame")
QWEN2_5_VL = Generation("qwen2.5-vl", "Qwen2.5-VL vision encoder", "qwen2_5_vl", _QWEN2, windows=True,
                        video_budget="frame")
QWEN3_VL = Generation("qwen3-vl", "Qwen3-VL vision encoder", "qwen3_vl", _QWEN3, deepstack=True)
QWEN3_5 = Generation("qwen3.5", "Qwen3.5 vision encoder", "qwen3_5", _QWEN3)

GENERATIONS: dict[str, Generation] = {g.family: g for g in (QWEN2_VL, QWEN2_5_VL, QWEN3_VL, QWEN3_5)}
#: checkpoint config.json model_type -> family name (Phi-4-multimodal's is added by the registry).
BY_MODEL_TYPE = {g.model_type: g.family for g in GENERATIONS.values()}
