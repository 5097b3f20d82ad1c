"""The int4 stage: weight-only INT4 of every MatMul with a constant weight, through `MatMulNBits`.

MatMul(x [N, K], W [K, M]) -> com.microsoft.MatMulNBits(x, packed W, scales[, zero points]), W
quantized in blocks of `block_size` along K (symmetric: no zero points). accuracy_level 4 lets ORT
quantize activations to int8 in the kernel (fastest on CPU); 0 computes in fp32.
The report (quantize.weight_stage, shared with int8) gives, per validation layout and per output,
cosine, min per-token cosine and max abs diff against the fp32 input, the file sizes, which
weight-bearing nodes stayed fp32, and the outlier-stress check (by default measured, no exclusion:
INT4 weights, not activations, limit its accuracy).
"""

from __future__ import annotations

from pathlib import Path

from core.errors import UsageError
from quantize import calibration, outlier_channels, outlier_check, quantizers, weight_stage


def run(path: str | Path, out: str | Path, block_size: int = 32, symmetric: bool = True, accuracy_level: int = 4,
        exclude: list[str] | None = None, threads: int = 0, force: bool = False, outliers: str = "report",
        target: float = outlier_check.DEFAULT_TARGET, outlier_ratio: float = outlier_channels.DEFAULT_RATIO,
        min_cosine: float = 0.0, worst_case_budget: float | None = outlier_check.DEFAULT_WORST_CASE_BUDGET,
        int8_matmuls: int = 0, algorithm: str = "rtn") -> dict:
    """`python -m quantize int4`: IN -> OUT/model.onnx + OUT/report.json; returns the report.

    `int8_matmuls` = N > 0: mixed precision, the N MatMuls whose 4-bit quantization alone costs the most
    (per-MatMul sensitivity on the input's own weights) are quantized to 8 bits (MatMulNBits bits=8, same
    block size, symmetry and accuracy level) instead. `algorithm`: "rtn", "hqq" or "gptq" (`quantizers.ALGORITHMS`;
    gptq calibrated on `quantize.calibration.stage_set`), for the 4-bit and the 8-bit weights alike."""
    if int8_matmuls < 0:
        raise UsageError(f"--int8-matmuls must be >= 0, got {int8_matmuls}")
    calibrated = calibration.stage_set(path) if algorithm == "gptq" else None
    feeds = calibrated[0] if calibrated else None
    fn, config = quantizers.nbits(4, block_size, symmetric, accuracy_level, algorithm, feeds, threads)
    high, high_config = quantizers.nbits(8, block_size, symmetric, accuracy_level, algorithm, feeds, threads)
    return weight_stage.run("int4", path, out, {**config, "int8_matmuls": int8_matmuls}, fn, exclude or [], threads,
                            outliers, target, force, outlier_ratio, min_cosine, worst_case_budget,
                            promote=(int8_matmuls, high, high_config), calibration=calibrated)
