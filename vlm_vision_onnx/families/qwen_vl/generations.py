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

from vlm_vision_onnx.families.shipping import GenaiType, Shipping, int4_flags, int8_nbits_flags

#: OpenAI CLIP's normalisation, Qwen2-VL's and Qwen2.5-VL's image_mean / image_std.
CLIP_MEAN = [0.48145466, 0.4578275, 0.40821073]
CLIP_STD = [0.26862954, 0.26130258, 0.27577711]


@dataclass(frozen=True)
class Generation:
    """One Qwen vision generation as the torch-free stages see it.

    `family`: registry key (`qwen2.5-vl`); `shipping`: what the pipeline ships of it and how it is tested
    (`families.shipping.Shipping`: tiny config, quantize flags, sweep points, genai type); `model_type`: the checkpoint's config.json `model_type`
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
    shipping: Shipping
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

#: The sweep measures each point at these validation cases (of the generation's layouts; the shipped stages of `make
#: export` check every layout): the key size, a mixed-size pack, a video, a mixed image + video pack and the export
#: example (5 of 14; Qwen2.5-VL: of 16). Bounds the sweep's cost, one stage per point at 2B dims.
_SWEEP_CASES = ("image 448x448", "pack 448x448 + 336x336", "video t=2 256x256", "pack image + video t=2 + image",
                "export example")
#: onnxruntime-genai 0.18's Qwen types; it has no qwen2_vl type.
_GENAI_QWEN3 = GenaiType("qwen3_vl", "qwen3_vl_image_processor", {"qwen3_vl": 1})

# INT4 sweep points (`int4_matmuls`): the same shares of each tower's MatMuls as Qwen3-VL's 24/48/72/96 of 104
# (Qwen2-VL-2B 130, Qwen2.5-VL-3B 162, Qwen3.5 110).
# Qwen2-VL's INT8 runs its merger (LayerNorm'd concat of 4 patches, 5120 wide, through a 2-layer MLP) by 8-bit
# MatMulNBits too: at Qwen2-VL-2B dims (random weights, 2026-11-28, AMD EPYC Zen 4; `python -m quantize int8
# build/qwen2-vl-2b/optimized OUT --shipped [--nbits-for merger]`, the stages' reports) the held-out photos go from
# 0.99797 (under the floor of `--engine auto`) to 0.99835, the validation layouts from 0.99794 to 0.99835; 645.3 MiB.
QWEN2_VL = Generation(
    family="qwen2-vl", title="Qwen2-VL vision encoder", model_type="qwen2_vl", processor=_QWEN2,
    out_hidden_key="hidden_size", width_key="embed_dim", video_budget="frame",
    shipping=Shipping(tiny_config="qwen2-vl-tiny", int4_matmuls=(30, 60, 90, 120), sweep_cases=_SWEEP_CASES,
                      flags={"int8": int8_nbits_flags("merger")}, int8_nbits_for=("merger",),
                      genai="onnxruntime-genai 0.18 has no qwen2_vl model type (its Qwen pipelines: qwen2_5_vl, "
                            "qwen3_vl, qwen3_5): it cannot run a Qwen2-VL package"))
# Qwen2.5-VL-3B at published dims (Intel Xeon with AMX, sweep of 2026-11-26 05:31-05:53,
# bench/results/sweep-qwen2.5-vl-3b.md; docs/quantization.md): with 72 of its 162 MatMuls at 8 bits INT4 reaches
# 0.92743 and with 112 0.95570; 150 reach 0.98984 (stress 0.99386, 25.2% of fp32, 1.29x: the speed floor is missed).
# Its INT8 keeps the default flags (4.57x, 0.98463: the 0.998 floor is missed; the only INT8 point reaching it,
# nbits, is slower than fp32 on that CPU). Its sweep adds dynamic INT8 with the down projections (and the attention
# projections) by MatMulNBits.
QWEN2_5_VL = Generation(
    family="qwen2.5-vl", title="Qwen2.5-VL vision encoder", model_type="qwen2_5_vl", processor=_QWEN2, windows=True,
    video_budget="frame",
    shipping=Shipping(tiny_config="qwen2.5-vl-tiny", int4_matmuls=(37, 75, 112, 150), sweep_cases=_SWEEP_CASES,
                      flags={"int4": int4_flags(150)}, int8_nbits_for=("down_proj", r"down_proj|attn\.proj"),
                      genai=GenaiType("qwen2_5_vl", "qwen2_5_image_processor", {"qwen2_5_vl": 1})))
# Qwen3-VL's INT8 runs its four mergers' MatMuls (the main merger and the three deepstack mergers: a LayerNorm'd
# concat of 4 patches, 4096 wide, through a 2-layer MLP into the language model's space) by 8-bit MatMulNBits, whose
# activations are quantized per token and block of 32 instead of one scale per tensor. Qwen3-VL-2B at published dims
# (random weights, 2026-11-27, AMD EPYC Zen 3, AVX2 only): with the default flags the INT8 reaches min per-token
# cosine 0.99782 on the held-out photos (`quantize/photo_check.py`), under the 0.998 floor with which `--engine auto`
# takes a variant, so the default path ran fp32; the figures with the mergers by MatMulNBits: docs/quantization.md
# ("Qwen3-VL ships --nbits-for merger").
# Keeping the mergers float instead would hold their 100.7 M weights in fp32 (+300 MB).
# ov-int8 by default for Qwen3-VL only (`Shipping.ov_int8`): at published dims its ov-int8 meets the 0.998 floor on
# held-out photos (0.99816; AMD EPYC Zen 4, 2026-11-27) and `--engine auto` runs it first on AVX-512 BF16 CPUs, with
# AMX or without (runtime/path_choice.py). Qwen3.5 (0.99789) and Qwen2-VL-2B (0.9979955) miss that floor on photos,
# Qwen2.5-VL-3B's stress search did not finish in 49 minutes, Phi-4-multimodal's in 8-minute trials (its INT8 misses
# the floor on photos too, 0.99786): their packages would carry 550-740 MiB the default never runs
# (docs/quantization.md); `make export OV_INT8=1` builds it for them.
QWEN3_VL = Generation(
    family="qwen3-vl", title="Qwen3-VL vision encoder", model_type="qwen3_vl", processor=_QWEN3, deepstack=True,
    shipping=Shipping(tiny_config="qwen3-vl-tiny", int4_matmuls=(24, 48, 72, 96), sweep_cases=_SWEEP_CASES,
                      flags={"int8": int8_nbits_flags("merger")}, int8_nbits_for=("merger",),
                      genai=_GENAI_QWEN3, ov_int8=True))
# Qwen3.5's tower has Qwen3-VL's main merger and ships its INT8 the same way. At its published dims (random
# weights, 2026-11-28, AMD EPYC Zen 4; `python -m quantize int8 build/qwen3.5/optimized OUT --shipped [--nbits-for
# merger]`, the stage's reports) the held-out photos go from 0.99795 (every MatMul dynamic: under the floor of
# `--engine auto`) to 0.99833, the validation layouts from 0.99814 to 0.99857; 451.7 MiB (26.1% of fp32).
# Its genai type reads Qwen3-VL's processor.
QWEN3_5 = Generation(
    family="qwen3.5", title="Qwen3.5 vision encoder", model_type="qwen3_5", processor=_QWEN3,
    shipping=Shipping(tiny_config="qwen3.5-tiny", int4_matmuls=(25, 51, 76, 101), sweep_cases=_SWEEP_CASES,
                      flags={"int8": int8_nbits_flags("merger")}, int8_nbits_for=("merger",),
                      genai=GenaiType("qwen3_5", "qwen3_vl_image_processor", {"qwen3_vl": 1})))

GENERATIONS: dict[str, Generation] = {g.family: g for g in (QWEN2_VL, QWEN2_5_VL, QWEN3_VL, QWEN3_5)}
#: checkpoint config.json model_type -> family name (Phi-4-multimodal's is added by the registry).
BY_MODEL_TYPE = {g.model_type: g.family for g in GENERATIONS.values()}
