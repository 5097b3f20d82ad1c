"""The stage folders of one build (`build/NAME/<stage>/`: model.onnx [+ data] and report.json) and
which of them become the package's variants.

fp32: the optimized stage when present (the fastest fp32 graph, validated against its input), else
surgery, else the raw export. Quantized variants: every quantized stage present, named with the
onnx-community / transformers.js suffix convention (`vision_encoder_int8.onnx`, `vision_encoder_q4.onnx`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from core import onnx_io
from core.errors import UsageError

#: Stage folders in pipeline order.
STAGES = ("export", "surgery", "optimized", "int8", "int4")
#: fp32 candidates, preferred first.
FP32_STAGES = ("optimized", "surgery", "export")
#: Quantized stage -> variant suffix (transformers.js dtype names: `int8` -> `_int8`, `q4` -> `_q4`).
QUANTIZED = {"int8": "int8", "int4": "q4"}
BASE_NAME = "vision_encoder"


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
    def file(self) -> str:
        suffix = "" if self.name == "fp32" else f"_{self.name}"
        return f"{BASE_NAME}{suffix}.onnx"


def read_stage(folder: Path, name: str) -> Stage | None:
    """The stage in `folder`, or None when the folder does not exist; UsageError when it is incomplete."""
    if not folder.exists():
        return None
    model, report = folder / onnx_io.MODEL_FILE, folder / "report.json"
    if not model.is_file() or not report.is_file():
        raise UsageError(f"stage folder {folder} lacks {'model.onnx' if not model.is_file() else 'report.json'}; "
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
    """fp32 first, then one variant per quantized stage present."""
    fp32 = next(stages[name] for name in FP32_STAGES if name in stages)
    return [Variant("fp32", fp32)] + [Variant(suffix, stages[name]) for name, suffix in QUANTIZED.items()
                                      if name in stages]
