"""The int8 stage: weight INT8 of every MatMul with a constant weight, by one of two methods.

- `dynamic` (default per-channel): ONNX Runtime `quantize_dynamic` -> DynamicQuantizeLinear +
  MatMulInteger (fused by ORT into DynamicQuantizeMatMul at load): W int8 per output column, each
  activation tensor x [N, K] quantized at run time to uint8 with one scale for the whole tensor. Weights
  in 7 bits by default (`reduce_range`; `--full-range` for 8): on x86 CPUs without VNNI the kernel's
  16-bit pair sums saturate with 8-bit weights (`core.cpu`).
- `static`: ONNX Runtime `quantize_static` (QDQ): the same weights as `dynamic`, each activation's uint8 scale
  fixed from calibration runs on real photographs through the family's processor (`quantize.calibration`,
  calibration.STAGE_PHOTOS at STAGE_SIZES, plus a pan video where the family takes video).
- `nbits`: com.microsoft.MatMulNBits with bits=8: W int8 in blocks of `block_size` along K; with
  accuracy level 4 the kernel quantizes x to int8 per block of K (one scale per token and block), so
  an outlier channel only costs its own block its resolution.
The report (quantize.weight_stage) has the per-output, per-layout accuracy against fp32, sizes, the
nodes left fp32 and the outlier-stress check, whose failing MatMuls stay fp32 (`--outliers exclude`).
`--smooth` (dynamic, static): SmoothQuant-style smoothing before quantizing, on the same calibration set
(`quantize.passes.smooth_activations`).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from core.errors import UsageError
from quantize import calibration, outlier_channels, outlier_check, quantizers, weight_stage

METHODS = ("dynamic", "static", "nbits")
#: The MatMulNBits settings of `--nbits-for`: nbits' defaults.
NBITS_FOR = {"block_size": 32, "symmetric": True, "accuracy_level": 4}
#: dynamic's default weight range: 7 bits, exact on every x86 CPU (see `core.cpu`: with 8 bits, CPUs without
#: VNNI saturate). `--full-range` trades that for accuracy on CPUs with VNNI / AMX / ARM.
REDUCE_RANGE = True


def quantizer(method: str, per_channel: bool = True, block_size: int = 32, symmetric: bool = True,
              accuracy_level: int = 4, reduce_range: bool = REDUCE_RANGE,
              feeds: Callable[[], list[dict]] | None = None) -> tuple[outlier_check.Quantizer, dict]:
    """(file -> file quantizer, the options that matter for `method`) after checking them; `feeds()`: the
    calibration set (static)."""
    if method in ("dynamic", "static"):
        settings = {"method": method, "per_channel": per_channel, "reduce_range": reduce_range}
        if method == "dynamic":
            return partial(quantizers.dynamic, per_channel=per_channel, reduce_range=reduce_range), settings
        return (partial(quantizers.static, per_channel=per_channel, reduce_range=reduce_range,
                        reader=lambda: calibration.reader(feeds())), settings)
    if method != "nbits":
        raise UsageError(f"--method must be one of {', '.join(METHODS)}, got {method!r}")
    fn, settings = quantizers.nbits(8, block_size, symmetric, accuracy_level)
    return fn, {"method": method, **settings}


def run(path: str | Path, out: str | Path, method: str = "dynamic", per_channel: bool = True, block_size: int = 32,
        symmetric: bool = True, accuracy_level: int = 4, exclude: list[str] | None = None,
        outliers: str = "exclude", target: float = outlier_check.DEFAULT_TARGET, threads: int = 0,
        force: bool = False, outlier_ratio: float = outlier_channels.DEFAULT_RATIO,
        reduce_range: bool = REDUCE_RANGE, min_cosine: float = 0.0,
        worst_case_budget: float | None = outlier_check.DEFAULT_WORST_CASE_BUDGET, smooth: bool = False,
        nbits_for: list[str] | None = None) -> dict:
    """`python -m quantize int8`: IN -> OUT/model.onnx + OUT/report.json; returns the report.

    `nbits_for` (dynamic, static): regexes of MatMuls (node or weight name) quantized instead as MatMulNBits
    8-bit, block 32, symmetric, accuracy level 4 (`NBITS_FOR`): int8 activations per token and block of K,
    for inputs with outlier tokens that one scale per tensor serves badly (SwiGLU's down_proj input, the
    product of two projections: Qwen2.5-VL)."""
    if smooth and method == "nbits":
        raise UsageError("--smooth applies to --method dynamic or static (it moves activation range into the "
                         "weights, which weight-only nbits does not need)")
    calibrated = calibration.stage_set(path) if method == "static" or smooth else None
    fn, config = quantizer(method, per_channel, block_size, symmetric, accuracy_level, reduce_range,
                           calibrated[0] if calibrated else None)
    config = {**config, "smooth": smooth} if method != "nbits" else config
    route = None
    if nbits_for:
        if method == "nbits":
            raise UsageError("--nbits-for applies to --method dynamic or static (with nbits every MatMul is already "
                             "MatMulNBits)")
        route = (list(nbits_for), *quantizers.nbits(8, **NBITS_FOR))
        config = {**config, "nbits_for": list(nbits_for)}
    return weight_stage.run("int8", path, out, config, fn, exclude or [], threads, outliers, target, force,
                            outlier_ratio, min_cosine, worst_case_budget, calibration=calibrated, smooth=smooth,
                            route=route)
