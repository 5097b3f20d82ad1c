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

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from quantize import calibration, outlier_check, quantizers, weight_stage
from quantize.options import StageRun, WeightChecks
from vlm_vision_onnx.core.errors import UsageError

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


@dataclass(frozen=True)
class Int8Options:
    """The int8 stage's method and its settings (checked on construction). `method`: dynamic, static or nbits;
    `per_channel`, `reduce_range` (dynamic, static); `block_size`, `symmetric`, `accuracy_level` (nbits);
    `smooth` (dynamic, static): SmoothQuant-style smoothing first; `nbits_for` (dynamic, static): regexes of
    MatMuls (node or weight name) quantized instead as MatMulNBits 8-bit (`NBITS_FOR`): int8 activations per
    token and block of K, for inputs with outlier tokens that one scale per tensor serves badly (SwiGLU's
    down_proj input, the product of two projections: Qwen2.5-VL)."""

    method: str = "dynamic"
    per_channel: bool = True
    reduce_range: bool = REDUCE_RANGE
    block_size: int = 32
    symmetric: bool = True
    accuracy_level: int = 4
    smooth: bool = False
    nbits_for: tuple[str, ...] = ()

    def __post_init__(self):
        if self.method not in METHODS:
            raise UsageError(f"--method must be one of {', '.join(METHODS)}, got {self.method!r}")
        if self.smooth and self.method == "nbits":
            raise UsageError("--smooth applies to --method dynamic or static (it moves activation range into the "
                             "weights, which weight-only nbits does not need)")
        if self.nbits_for and self.method == "nbits":
            raise UsageError("--nbits-for applies to --method dynamic or static (with nbits every MatMul is already "
                             "MatMulNBits)")

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """The options; those of the other method default to None so that giving them is an error (`from_args`)."""
        parser.add_argument("--method", default="dynamic", choices=METHODS,
                            help="dynamic: quantize_dynamic, MatMulInteger with per-tensor uint8 activations "
                                 "(default); static: quantize_static (QDQ), activation scales calibrated on photos "
                                 "through the family's processor; nbits: MatMulNBits bits=8")
        parser.add_argument("--smooth", action="store_true",
                            help="dynamic/static: SmoothQuant-style smoothing first (LayerNorm scale moved into the "
                                 "next MatMuls' weights, from the calibration photos)")
        parser.add_argument("--per-tensor", dest="per_channel", action="store_false", default=None,
                            help="dynamic/static: one weight scale per tensor instead of per output column")
        rng = parser.add_mutually_exclusive_group()
        rng.add_argument("--reduce-range", dest="reduce_range", action="store_true", default=None,
                         help="dynamic/static: weights in 7 bits, exact on every x86 CPU (default)")
        rng.add_argument("--full-range", dest="reduce_range", action="store_false",
                         help="dynamic/static: weights in 8 bits: more accurate on CPUs with VNNI/AMX (and ARM), but "
                              "the int8 kernel of x86 CPUs without VNNI saturates")
        parser.add_argument("--block-size", type=int, default=None, choices=quantizers.BLOCK_SIZES,
                            help="nbits: weights per quantization block along K (default 32)")
        sym = parser.add_mutually_exclusive_group()
        sym.add_argument("--symmetric", dest="symmetric", action="store_true", default=None,
                         help="nbits: no zero points (default)")
        sym.add_argument("--asymmetric", dest="symmetric", action="store_false", help="nbits: with zero points")
        parser.add_argument("--accuracy-level", type=int, default=None, choices=quantizers.ACCURACY_LEVELS,
                            help="nbits: MatMulNBits compute, 0 fp32, 4 int8 activations per block (default 4)")
        parser.add_argument("--nbits-for", action="append", default=[], metavar="PATTERN",
                            help="dynamic/static: quantize the MatMuls whose node or weight name matches this regex "
                                 "as MatMulNBits 8-bit, block 32, accuracy level 4 instead (int8 activations per "
                                 "token and block: for inputs with outlier tokens, e.g. down_proj after SwiGLU; "
                                 "repeatable)")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Int8Options:
        """Refuses the options of the other method; the chosen method's not given take their defaults."""
        nbits_only = {"--block-size": args.block_size, "--symmetric/--asymmetric": args.symmetric,
                      "--accuracy-level": args.accuracy_level}
        other = {"nbits": {"--per-tensor": args.per_channel, "--reduce-range/--full-range": args.reduce_range}}
        given = [name for name, value in other.get(args.method, nbits_only).items() if value is not None]
        if given:
            raise UsageError(f"{', '.join(given)} do(es) not apply to --method {args.method}")
        values = {"per_channel": args.per_channel, "reduce_range": args.reduce_range, "block_size": args.block_size,
                  "symmetric": args.symmetric, "accuracy_level": args.accuracy_level}
        return cls(args.method, smooth=args.smooth, nbits_for=tuple(args.nbits_for),
                   **{k: v for k, v in values.items() if v is not None})

    def quantization(self, path: str | Path) -> weight_stage.Quantization:
        """The stage's quantizer and settings for the input at `path` (its calibration set when one is needed)."""
        calibrated = calibration.stage_set(path) if self.method == "static" or self.smooth else None
        fn, config = quantizer(self.method, self.per_channel, self.block_size, self.symmetric, self.accuracy_level,
                               self.reduce_range, calibrated[0] if calibrated else None)
        config = {**config, "smooth": self.smooth} if self.method != "nbits" else config
        route = None
        if self.nbits_for:
            route = (list(self.nbits_for), *quantizers.nbits(8, **NBITS_FOR))
            config = {**config, "nbits_for": list(self.nbits_for)}
        return weight_stage.Quantization(config, fn, route=route, calibration=calibrated, smooth=self.smooth)


def run(path: str | Path, out: str | Path, options: Int8Options, checks: WeightChecks, context: StageRun) -> dict:
    """`python -m quantize int8`: IN -> OUT/model.onnx + OUT/report.json; returns the report."""
    return weight_stage.run("int8", path, out, options.quantization(path), checks, context)
