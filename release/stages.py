"""The stage folders of one build (`build/NAME/<stage>/`: model.onnx [+ data] and report.json) and
which of them become the package's variants.

fp32: the optimized stage when present (the fastest fp32 graph, validated against its input), else
surgery, else the raw export. Other variants: every fp16 or quantized stage present, named with the
onnx-community / transformers.js dtype suffixes (`vision_encoder_fp16.onnx`, `vision_encoder_int8.onnx`,
`vision_encoder_q4.onnx`, `vision_encoder_q4f16.onnx`); `config.json` lists them (`CONFIG_KEY`, `list_in_config`).
The ov-int8 stage is an OpenVINO IR (model.xml + model.bin, `quantize/ov_int8.py`): its variant `ov-int8` is
`openvino/vision_encoder_int8.xml` + `.bin`, which only OpenVINO runs (not listed under CONFIG_KEY, an ONNX list).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from core import onnx_io
from core.errors import UsageError

#: Stage folders in pipeline order (fp16, int8 and int4 each read the optimized stage; q4f16 reads it and int4's
#: recipe).
STAGES = ("export", "surgery", "optimized", "int8", "int4", "fp16", "q4f16", "ov-int8")
#: fp32 candidates, preferred first.
FP32_STAGES = ("optimized", "surgery", "export")
#: Quantized stage -> variant suffix (transformers.js dtype names: `int8` -> `_int8`, `q4` -> `_q4`).
QUANTIZED = {"int8": "int8", "int4": "q4"}
#: Every stage that becomes a variant besides fp32 -> its suffix, in package order (dtype `fp16` -> `_fp16`).
VARIANT_STAGES = {"fp16": "fp16", **QUANTIZED, "q4f16": "q4f16", "ov-int8": "ov-int8"}
#: Variants in OpenVINO IR (their stage folder holds model.xml + model.bin) -> the suffix of their file in openvino/.
OPENVINO_VARIANTS = {"ov-int8": "int8"}
#: A stage folder's model file: model.onnx, or model.xml for the IR stages.
MODEL_FILES = {"ov-int8": "model.xml"}
BASE_NAME = "vision_encoder"
#: The key of config.json that lists the package's variants: {dtype: file}.
CONFIG_KEY = "onnx_variants"


@dataclass
class Stage:
    """One stage folder: its name, model file and report."""

    name: str
    folder: Path
    model: Path
    report: dict


@dataclass
class Variant:
    """A model file of the package: `name` (fp32, int8, q4), its stage and its file name in `onnx/`."""

    name: str
    stage: Stage

    @property
    def folder(self) -> str:
        """The package folder of its file: onnx/, or openvino/ for an IR."""
        return "openvino" if self.name in OPENVINO_VARIANTS else "onnx"

    @property
    def file(self) -> str:
        if self.name in OPENVINO_VARIANTS:
            return f"{BASE_NAME}_{OPENVINO_VARIANTS[self.name]}.xml"
        suffix = "" if self.name == "fp32" else f"_{self.name}"
        return f"{BASE_NAME}{suffix}.onnx"

    @property
    def path(self) -> str:
        """Its file in the package: `onnx/FILE` or `openvino/FILE`."""
        return f"{self.folder}/{self.file}"

    def owns(self, path: str) -> bool:
        """Whether the package file `path` is this variant's (its model, external data, IR weights)."""
        return path.startswith(self.path) or (self.folder == "openvino" and path == self.path[:-4] + ".bin")

    def copy_to(self, package: Path) -> None:
        """Copy its stage's model into the package folder `package` under `path`."""
        folder = package / self.folder
        folder.mkdir(exist_ok=True)
        if self.folder == "openvino":
            for suffix in (".xml", ".bin"):
                shutil.copyfile(self.stage.model.with_suffix(suffix), (folder / self.file).with_suffix(suffix))
        else:
            onnx_io.copy_model(self.stage.model, folder, self.file, data_name=f"{self.file}_data")


def read_stage(folder: Path, name: str) -> Stage | None:
    """The stage in `folder`, or None when the folder does not exist; UsageError when it is incomplete."""
    if not folder.exists():
        return None
    model, report = folder / MODEL_FILES.get(name, onnx_io.MODEL_FILE), folder / "report.json"
    if not model.is_file() or not report.is_file():
        raise UsageError(f"stage folder {folder} lacks {model.name if not model.is_file() else 'report.json'}; "
                         f"re-run the {name} stage (make export)")
    try:
        data = json.loads(report.read_text())
    except ValueError as err:
        raise UsageError(f"{report} is not readable JSON ({err}); re-run the {name} stage") from None
    return Stage(name, folder, model, data)


def read_build(build: str | Path) -> dict[str, Stage]:
    """{stage name: Stage} of the stages present in `build`, in pipeline order; export is required."""
    build = Path(build)
    if not build.is_dir():
        raise UsageError(f"build folder {build} does not exist; run `make export MODEL=...` first")
    stages = {name: s for name in STAGES if (s := read_stage(build / name, name)) is not None}
    if "export" not in stages:
        raise UsageError(f"{build} has no export stage (export/model.onnx + report.json); run `make export` first")
    return stages


def variants(stages: dict[str, Stage]) -> list[Variant]:
    """fp32 first, then one variant per fp16 or quantized stage present (VARIANT_STAGES order).

    UsageError when a variant's stage was made before the fp32 stage (`created` in the reports): it was
    made from an earlier build (`make export` without FP16=1 leaves an older `fp16/` as it was)."""
    fp32 = next(stages[name] for name in FP32_STAGES if name in stages)
    chosen = [Variant(suffix, stages[name]) for name, suffix in VARIANT_STAGES.items() if name in stages]
    for v in chosen:
        if v.stage.report.get("created", "") < fp32.report.get("created", ""):
            raise UsageError(f"{v.stage.folder} ({v.stage.report.get('created')}) is older than the fp32 stage "
                             f"{fp32.folder} ({fp32.report.get('created')}): it was made from an earlier "
                             f"build; re-run the {v.stage.name} stage on it, or remove {v.stage.folder}")
    return [Variant("fp32", fp32)] + chosen


def list_in_config(config_file: Path, chosen: list[Variant]) -> dict:
    """Add {dtype: `onnx/FILE`} of every variant to config.json under CONFIG_KEY; return the config."""
    config = json.loads(config_file.read_text())
    config[CONFIG_KEY] = {v.name: v.path for v in chosen if v.folder == "onnx"}
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return config
