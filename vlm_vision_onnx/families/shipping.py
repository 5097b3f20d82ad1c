"""What the pipeline ships of a family and how it is tested and measured, torch-free: one `Shipping` per family,
declared with the family (`families/qwen_vl/generations.py`, `families/phi4_mm/__init__.py`) as `Family.shipping`.

The one home of: the family's tiny test config; the flags `make export` runs each quantize stage with (`flags`;
`python -m quantize STAGE IN OUT --shipped` reads them from IN's family, `bench.shipped`, `bench.sweep --shipped`
and `bench.export_bench` from the model's config); the quantization sweep's family points (`int4_matmuls`,
`int8_nbits_for`) and cases; whether and how onnxruntime-genai runs it (`genai`: a `GenaiType`, or the one-line
reason no genai package is made); whether `make export` builds the OpenVINO INT8 variant by default (`ov_int8`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: The INT8 and INT4 points of `make export` for every family that declares no other, chosen by `make bench`'s sweep
#: at 2B dims (bench/results/sweep.md, docs/quantization.md "How sweep points are chosen"; rule: of the shippable
#: points, the fastest meeting every floor of bench.sweep.FLOORS, else of those meeting the most; ties within 5% to
#: the more accurate for INT8 and to the smaller file for INT4). Run of 2026-11-25 (AMD EPYC with AVX-512 VNNI, one
#: thread, 448x448; sweep of 12:01-13:28): INT8 dynamic 7-bit with the outlier split is 2.67x fp32 at min per-token
#: cosine 0.99830 (random) / 0.99844 (realistic stress): every floor met. INT4 block 128 asymmetric level 4 with the
#: 72 most sensitive of its 104 MatMuls at 8 bits is 1.72x, 22.6% of fp32, 0.98515 / 0.99287: every floor met (with
#: VNNI the 8-bit MatMulNBits kernel is as fast as the 4-bit one; 96 at 8 bits is as fast and more accurate, 0.99853,
#: but 26.5% of fp32, larger than the INT8 variant). The OpenVINO INT8 stage takes its own defaults.
DEFAULT_FLAGS: dict[str, tuple[str, ...]] = {
    "int8": ("--method", "dynamic", "--reduce-range", "--outliers", "exclude"),
    "int4": ("--block-size", "128", "--asymmetric", "--accuracy-level", "4", "--int8-matmuls", "72"),
    "ov-int8": (),
}


def int8_nbits_flags(pattern: str) -> tuple[str, ...]:
    """The default INT8 point with the MatMuls matching `pattern` by 8-bit MatMulNBits (`--nbits-for`)."""
    return (*DEFAULT_FLAGS["int8"], "--nbits-for", pattern)


def int4_flags(int8_matmuls: int) -> tuple[str, ...]:
    """The shipped INT4 point with `int8_matmuls` of the most sensitive MatMuls at 8 bits instead of DEFAULT_FLAGS'."""
    return (*DEFAULT_FLAGS["int4"][:-1], str(int8_matmuls))


@dataclass(frozen=True)
class GenaiType:
    """A family's onnxruntime-genai 0.18.0 package: `type` (genai_config.json `model.type`), the
    onnxruntime-extensions `processor` name and its Normalize flags (`normalize`: genai's processor computes the
    transformers processor's values only with them). The checkpoint it is made from is the generation's
    `architecture` (`families.qwen_vl.generations.Generation`).

    genai 0.18 runs the Qwen vision-language models through one C++ path (`MultiModalLanguageModel` with
    `QwenVisionState`) for its types `qwen3_vl`, `qwen2_5_vl` and `qwen3_5`: it feeds the vision model the
    processor's `pixel_values` [num_patches, 3*2*P*P] and `image_grid_thw` [num_images, 3] and reads
    `image_features`, computing no window index or rotary tensor itself (Qwen2.5-VL's windows are inside the
    exported graph). Found by reading its 0.18 binary and Python builder and loading packages (docs/genai.md).
    """

    type: str
    processor: str
    normalize: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Shipping:
    """What the pipeline ships of one family, declared with it (keyword arguments).

    `tiny_config`: configs/NAME.yaml of its tiny test model (random weights; the tests and `make export
    MODEL=NAME` build it in seconds); `flags`: {quantize stage: its flags} where they differ from DEFAULT_FLAGS,
    with the measurement that chose them beside the declaration; `int4_matmuls`: the sweep's INT4 mixed-precision
    points (how many of the MatMuls, the most sensitive first, go to 8 bits); `int8_nbits_for`: the sweep's extra INT8
    points, dynamic 7-bit with the MatMuls matching each pattern by MatMulNBits; `sweep_cases`: the validation cases
    the sweep measures each point at; `genai`: its onnxruntime-genai package type, or why none is made (one line);
    `ov_int8`: whether `make export` builds the OpenVINO INT8 variant by default (`quantize ov-int8 --if-shipped`):
    only where `--engine auto` ranks it first and it meets the floor on held-out photos at published dims, so that the
    package ships what its default path runs and no file the default never runs (the measurement beside it).
    """

    tiny_config: str
    genai: GenaiType | str
    int4_matmuls: tuple[int, ...]
    sweep_cases: tuple[str, ...]
    flags: dict[str, tuple[str, ...]] = field(default_factory=dict)
    int8_nbits_for: tuple[str, ...] = ()
    ov_int8: bool = False

    def __post_init__(self):
        unknown = set(self.flags) - set(DEFAULT_FLAGS)
        if unknown:
            raise ValueError(f"Shipping.flags names no quantize stage with shipped flags: {sorted(unknown)} "
                             f"(known: {', '.join(DEFAULT_FLAGS)})")

    def stage_flags(self, stage: str) -> list[str]:
        """The flags `make export` runs quantize STAGE with for this family."""
        return list(self.flags.get(stage, DEFAULT_FLAGS[stage]))

    @property
    def genai_type(self) -> GenaiType | None:
        return self.genai if isinstance(self.genai, GenaiType) else None
