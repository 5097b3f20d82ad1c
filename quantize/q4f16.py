"""The q4f16 stage: `python -m quantize q4f16 IN OUT [--int4 FOLDER]`: the INT4 variant's weights under float16
activations (onnx-community's `_q4f16`: 4-bit MatMulNBits, float16 activations; the WebGPU variant, docs/webgpu.md).

IN -> OUT/model.onnx (the package's `vision_encoder_q4f16.onnx`) + OUT/report.json:
1. The weights: the int4 stage's recipe, read from its report (default: the `int4` folder beside IN, the one
   `make export` writes) and applied again to IN (`weight_stage.Recipe`): bits, block size, symmetry, accuracy
   level, algorithm, the MatMuls it promoted to 8 bits, the outlier channels it split off into fp32 MatMuls (found
   again at the same calibration layouts), the MatMuls it excluded. RTN and HQQ are deterministic: the 4-bit
   weights are the shipped INT4's (the report checks the quantized-node count against the int4 report's).
2. The fp16 stage on that model (`quantize.fp16`): its plan runs the data path in float16, MatMulNBits included
   (activations, scales and bias float16; the packed weights and zero points stay as they are), normalisations,
   softmax and the residual stream float32, and every node that comes near float16's range at the calibration
   layouts; the outlier-stress copy of IN gets the same weights recipe and the same plan.
3. The checks of the fp16 stage against IN's fp32 outputs (emulated float16 storage and ONNX Runtime's CPU EP,
   of the model and of the stress copy): finite everywhere, and min per-token cosine >= `--min-cosine`
   (default DEFAULT_MIN_COSINE, the INT4 floor), else nothing is written.
I/O contract unchanged (float32 inputs and outputs).
"""

from __future__ import annotations

import json
from pathlib import Path

from quantize import fp16, weight_stage
from quantize.options import StageRun
from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.errors import UsageError

STAGE = "q4f16"
#: The INT4 floor (issue 28): min per-token cosine against fp32, on random weights and the realistic stress.
DEFAULT_MIN_COSINE = 0.98


def int4_report(path: str | Path, int4: str | Path | None) -> tuple[Path, dict]:
    """(folder, report) of the int4 stage whose recipe q4f16 takes: `int4`, else the `int4` folder beside IN."""
    folder = Path(int4) if int4 else onnx_io.model_path(path).parent.parent / "int4"
    report_file = folder / "report.json"
    if not report_file.is_file():
        raise UsageError(f"no int4 stage report at {report_file}: q4f16 takes the INT4 variant's recipe; run "
                         f"`python -m quantize int4 {path} {folder}` first, or give --int4 FOLDER")
    report = json.loads(report_file.read_text())
    if report.get("stage") != "int4":
        raise UsageError(f"{report_file} is a {report.get('stage')!r} stage report, not int4's; give --int4 with "
                         "the folder `python -m quantize int4` wrote")
    return folder, report


def run(path: str | Path, out: str | Path, int4: str | Path | None, options: fp16.Fp16Options,
        context: StageRun) -> dict:
    """`python -m quantize q4f16`: IN -> OUT/model.onnx + OUT/report.json; returns the report. `int4`: the int4
    stage folder whose recipe to take (None: the `int4` folder beside IN); `options`: the fp16 stage's, with
    DEFAULT_MIN_COSINE as the default floor."""
    folder, report = int4_report(path, int4)
    recipe = weight_stage.Recipe.read(report, folder)
    return fp16.run(path, out, options, context, weights=recipe, stage_name=STAGE)
