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

import argparse
from dataclasses import dataclass
from pathlib import Path

from quantize import calibration, quantizers, weight_stage
from quantize.options import StageRun, WeightChecks
from vlm_vision_onnx.core.errors import UsageError


@dataclass(frozen=True)
class Int4Options:
    """The int4 stage's settings (checked on construction): MatMulNBits `block_size`, `symmetric` (no zero points),
    `accuracy_level` (4: int8 activations in the kernel, 0: fp32); `algorithm`: "rtn", "hqq" or "gptq"
    (`quantizers.ALGORITHMS`; gptq calibrated on `quantize.calibration.stage_set`), for the 4-bit and the 8-bit
    weights alike; `int8_matmuls` = N > 0: mixed precision, the N MatMuls whose 4-bit quantization alone costs
    the most (per-MatMul sensitivity on the input's own weights) are quantized to 8 bits (MatMulNBits bits=8, same
    block size, symmetry and accuracy level) instead."""

    block_size: int = 32
    symmetric: bool = True
    accuracy_level: int = 4
    algorithm: str = "rtn"
    int8_matmuls: int = 0

    def __post_init__(self):
        if self.int8_matmuls < 0:
            raise UsageError(f"--int8-matmuls must be >= 0, got {self.int8_matmuls}")

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--block-size", type=int, default=32, choices=quantizers.BLOCK_SIZES,
                            help="weights per quantization block along K (default 32)")
        sym = parser.add_mutually_exclusive_group()
        sym.add_argument("--symmetric", dest="symmetric", action="store_true", default=True,
                         help="no zero points (default)")
        sym.add_argument("--asymmetric", dest="symmetric", action="store_false", help="with zero points")
        parser.add_argument("--accuracy-level", type=int, default=4, choices=quantizers.ACCURACY_LEVELS,
                            help="MatMulNBits compute: 0 fp32, 4 int8 activations (default 4)")
        parser.add_argument("--algorithm", default="rtn", choices=quantizers.ALGORITHMS,
                            help="rtn: round to nearest per block (default); hqq: Half-Quadratic Quantization, "
                                 "scales and zero points fitted per block without data (needs --asymmetric and "
                                 "torch); gptq: rounding errors pushed where photos through the model's processor "
                                 "have little energy (quantize/gptq.py)")
        parser.add_argument("--int8-matmuls", type=int, default=0, metavar="N",
                            help="mixed precision: the N MatMuls most sensitive to 4 bits (each alone, on the "
                                 "model's own weights) are quantized to 8 bits instead (default 0: all 4-bit)")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Int4Options:
        return cls(args.block_size, args.symmetric, args.accuracy_level, args.algorithm, args.int8_matmuls)

    def quantization(self, path: str | Path, threads: int) -> weight_stage.Quantization:
        """The stage's 4-bit quantizer and its 8-bit one for the promoted MatMuls, for the input at `path`."""
        calibrated = calibration.stage_set(path) if self.algorithm == "gptq" else None
        feeds = calibrated[0] if calibrated else None
        settings = (self.block_size, self.symmetric, self.accuracy_level, self.algorithm, feeds, threads)
        fn, config = quantizers.nbits(4, *settings)
        high, high_config = quantizers.nbits(8, *settings)
        return weight_stage.Quantization({**config, "int8_matmuls": self.int8_matmuls}, fn,
                                         promote=(self.int8_matmuls, high, high_config), calibration=calibrated)


def run(path: str | Path, out: str | Path, options: Int4Options, checks: WeightChecks, context: StageRun) -> dict:
    """`python -m quantize int4`: IN -> OUT/model.onnx + OUT/report.json; returns the report."""
    return weight_stage.run("int4", path, out, options.quantization(path, context.threads), checks, context)
