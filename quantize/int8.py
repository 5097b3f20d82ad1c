"""The int8 stage: weight INT8 of every MatMul with a constant weight, by one of two methods.

- `dynamic` (default per-channel): ONNX Runtime `quantize_dynamic` -> DynamicQuantizeLinear +
  MatMulInteger (fused by ORT into DynamicQuantizeMatMul at load): W int8 per output column, each
  activation tensor x [N, K] quantized at run time to uint8 with one scale for the whole tensor. Weights
  in 7 bits by default (`reduce_range`; `--full-range` for 8): on x86 CPUs without VNNI the kernel's
  16-bit pair sums saturate with 8-bit weights (`core.cpu`).
- `nbits`: com.microsoft.MatMulNBits with bits=8: W int8 in blocks of `block_size` along K; with
  accuracy level 4 the kernel quantizes x to int8 per block of K (one scale per token and block), so
  an outlier channel only costs its own block its resolution.
The report (quantize.weight_stage) has the per-output, per-layout accuracy against fp32, sizes, the
nodes left fp32 and the outlier-stress check, whose failing MatMuls stay fp32 (`--outliers exclude`).
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

from core.errors import UsageError
from quantize import outlier_channels, outlier_check, quantizers, weight_stage

METHODS = ("dynamic", "nbits")
#: dynamic's default weight range: 7 bits, exact on every x86 CPU (see `core.cpu`: with 8 bits, CPUs without
#: VNNI saturate). `--full-range` trades that for accuracy on CPUs with VNNI / AMX / ARM.
REDUCE_RANGE = True


def quantizer(method: str, per_channel: bool = True, block_size: int = 32, symmetric: bool = True,
              accuracy_level: int = 4, reduce_range: bool = REDUCE_RANGE) -> tuple[outlier_check.Quantizer, dict]:
    """(file -> file quantizer, the options that matter for `method`) after checking them."""
    if method == "dynamic":
        return (partial(quantizers.dynamic, per_channel=per_channel, reduce_range=reduce_range),
                {"method": method, "per_channel": per_channel, "reduce_range": reduce_range})
    if method != "nbits":
        raise UsageError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")
    fn, settings = quantizers.nbits(8, block_size, symmetric, accuracy_level)
    return fn, {"method": method, **settings}


def run(path: str | Path, out: str | Path, method: str = "dynamic", per_channel: bool = True, block_size: int = 32,
        symmetric: bool = True, accuracy_level: int = 4, exclude: list[str] | None = None,
        outliers: str = "exclude", target: float = outlier_check.DEFAULT_TARGET, threads: int = 0,
        force: bool = False, outlier_ratio: float = outlier_channels.DEFAULT_RATIO,
        reduce_range: bool = REDUCE_RANGE, min_cosine: float = 0.0,
        worst_case_budget: float = outlier_check.DEFAULT_WORST_CASE_BUDGET) -> dict:
    """`python -m quantize int8`: IN -> OUT/model.onnx + OUT/report.json; returns the report."""
    fn, config = quantizer(method, per_channel, block_size, symmetric, accuracy_level, reduce_range)
    return weight_stage.run("int8", path, out, config, fn, exclude or [], threads, outliers, target, force,
                            outlier_ratio, min_cosine, worst_case_budget)
