"""Which families onnxruntime-genai 0.18.0 runs, and what each one's package names (torch-free).

genai 0.18 runs the Qwen vision-language models through one C++ path (`MultiModalLanguageModel` with
`QwenVisionState`) for its types `qwen3_vl`, `qwen2_5_vl` and `qwen3_5`: it feeds the vision model the
processor's `pixel_values` [num_patches, 3*2*P*P] and `image_grid_thw` [num_images, 3] and reads
`image_features`, computing no window index or rotary tensor itself (Qwen2.5-VL's windows are inside the
exported graph). Found by reading its 0.18 binary and Python builder and loading packages (docs/genai.md).
It has no `qwen2_vl` type; Phi-4-multimodal's `phi4mm` pipeline is not made here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from families.qwen_vl.generations import GENERATIONS


@dataclass(frozen=True)
class GenaiType:
    """One family's genai package: `type` (genai_config.json `model.type`), the onnxruntime-extensions
    `processor` name and its Normalize flags (`normalize`: genai's processor computes the transformers
    processor's values only with them). The checkpoint it is made from is the generation's `architecture`."""

    family: str
    type: str
    processor: str
    normalize: dict = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        return GENERATIONS[self.family].architecture


TYPES: dict[str, GenaiType] = {t.family: t for t in (
    GenaiType("qwen3-vl", "qwen3_vl", "qwen3_vl_image_processor", {"qwen3_vl": 1}),
    GenaiType("qwen2.5-vl", "qwen2_5_vl", "qwen2_5_image_processor", {"qwen2_5_vl": 1}),
    GenaiType("qwen3.5", "qwen3_5", "qwen3_vl_image_processor", {"qwen3_vl": 1}),
)}
#: Why each other family gets no genai package (one line, exit 2).
NOT_MADE = {
    "qwen2-vl": "onnxruntime-genai 0.18 has no qwen2_vl model type (its Qwen pipelines: qwen2_5_vl, qwen3_vl, "
                "qwen3_5): it cannot run a Qwen2-VL package",
    "phi-4-mm": "the genai package is made for the Qwen generations genai runs (qwen2.5-vl, qwen3-vl, qwen3.5); "
                "onnxruntime-genai's phi4mm pipeline: see docs/genai.md",
}
