"""The table of variants: every kind of model file a release package can hold, the stage of `make export` that makes
it and the runtime it is made for. The one home of these facts: `release.stages` (which stage folders become which
package files), the model card, `bench` and the tests read them here; `tests/test_variants.py` checks that the
Makefile's export step runs each stage as the table says.

A package holds fp32 (the optimized stage, else surgery, else the raw export) and one file per other stage present
in the build, named with the onnx-community / transformers.js dtype suffixes (`vision_encoder_int8.onnx`, `_q4`,
`_fp16`, `_q4f16`); the OpenVINO INT8 stage is an IR (model.xml + model.bin) that becomes
`openvino/vision_encoder_int8.xml` + `.bin`, which only OpenVINO runs. Static buckets for NPUs are another table
(`release.stages.STATIC_STAGES`).
"""

from __future__ import annotations

from dataclasses import dataclass

BASE_NAME = "vision_encoder"
#: What a variant is made for: `any` runtime, ONNX Runtime's CPU EP, ONNX Runtime's WebGPU EP, or OpenVINO alone.
TARGETS = ("any", "onnxruntime", "webgpu", "openvino")


@dataclass(frozen=True)
class VariantKind:
    """One kind of package file.

    `name`: the variant's name (transformers.js dtype: fp32, int8, q4, fp16, q4f16; ov-int8); `stage`: its stage
    folder in a build (`build/NAME/<stage>/`); `command`: the `python -m quantize COMMAND` that makes the stage from
    the optimized stage; `flags`: the Makefile variable that replaces the family's shipped flags of the command
    (`--shipped`; "" where the command has none); `switch`: the Makefile variable that makes `make export` build it
    ("" = always); `made_for`: one of TARGETS; `suffix`: its file name's suffix after BASE_NAME; `ir`: an OpenVINO IR;
    `by_family`: without its switch `make export` builds it for the families that ship it
    (`quantize COMMAND --if-shipped`: `families.shipping.Shipping.ov_int8`), SWITCH=1 for every family, SWITCH=0 never.
    """

    name: str
    stage: str
    command: str
    flags: str
    switch: str
    made_for: str
    suffix: str
    ir: bool = False
    by_family: bool = False

    def __post_init__(self):
        if self.made_for not in TARGETS:
            raise ValueError(f"variant {self.name}: made_for {self.made_for!r} is none of {TARGETS}")

    @property
    def folder(self) -> str:
        """The package folder of its file: onnx/, or openvino/ for an IR."""
        return "openvino" if self.ir else "onnx"

    @property
    def file(self) -> str:
        return f"{BASE_NAME}{self.suffix}{'.xml' if self.ir else '.onnx'}"

    @property
    def model_file(self) -> str:
        """Its stage folder's model file."""
        return "model.xml" if self.ir else "model.onnx"


#: In the package's order (fp32 first).
VARIANTS: dict[str, VariantKind] = {v.name: v for v in (
    VariantKind("fp32", "optimized", "optimize", flags="", switch="", made_for="any", suffix=""),
    VariantKind("fp16", "fp16", "fp16", flags="", switch="FP16", made_for="webgpu", suffix="_fp16"),
    VariantKind("int8", "int8", "int8", flags="INT8_FLAGS", switch="", made_for="onnxruntime", suffix="_int8"),
    VariantKind("q4", "int4", "int4", flags="INT4_FLAGS", switch="", made_for="onnxruntime", suffix="_q4"),
    VariantKind("q4f16", "q4f16", "q4f16", flags="", switch="FP16", made_for="webgpu", suffix="_q4f16"),
    VariantKind("ov-int8", "ov-int8", "ov-int8", flags="OV_INT8_FLAGS", switch="OV_INT8", made_for="openvino",
                suffix="_int8", ir=True, by_family=True),
)}
#: Stage folder -> its variant.
BY_STAGE: dict[str, VariantKind] = {v.stage: v for v in VARIANTS.values()}
#: The stages every `make export` builds for every family (no switch), fp32's optimized first: what bench measures by
#: default.
ALWAYS: tuple[str, ...] = tuple(v.stage for v in VARIANTS.values() if not v.switch)
#: The quantized stages every `make export` builds (int8, int4).
QUANTIZED: tuple[str, ...] = ALWAYS[1:]


def package_path(stage: str) -> str:
    """The package file of the variant a stage folder becomes: `onnx/vision_encoder_q4.onnx` for int4."""
    kind = BY_STAGE[stage]
    return f"{kind.folder}/{kind.file}"
