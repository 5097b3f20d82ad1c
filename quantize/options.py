"""Options the quantize stages share, as objects (the pattern of `core.engine.Engine`): checked on construction
(UsageError, exit 2, before any work), `add_arguments(parser)` and `from_args(args)`.

- `StageRun`: how a stage runs, not what it makes — threads, `--force`, its step timings, and the measurement
  hooks `bench.sweep` sets (reuse the prepared input across stages, validate at a few cases) instead of module
  globals. Every stage's `run` takes one.
- `WeightChecks`: what the weight stages (int8, int4) check and keep fp32 — `--exclude`, the outlier-stress gate,
  the floor, the outlier-channel split.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field

from quantize import outlier_channels, outlier_check
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.staging import add_clobber_argument


def excluded(nodes: list[tuple[str, str]], patterns: list[str], option: str = "--exclude") -> list[str]:
    """Names of the (node name, weight name) pairs where either matches (re.search) one of `patterns`; a bad
    pattern is a UsageError naming `option`."""
    compiled = []
    for p in patterns:
        try:
            compiled.append(re.compile(p))
        except re.error as err:
            raise UsageError(f"{option} {p!r} is not a valid regular expression: {err}") from None
    return [n for n, w in nodes if any(c.search(n) or c.search(w) for c in compiled)]


def check_floor(min_cosine: float) -> None:
    """`--min-cosine` of any stage: in [0, 1] (0: no floor)."""
    if not 0 <= min_cosine <= 1:
        raise UsageError(f"--min-cosine must be in [0, 1], got {min_cosine}")


def check_stress(outliers: str, stress_target: float | None = None) -> None:
    """`--outliers` (one of outlier_check.MODES) and, where the stage has one, `--stress-target` in (0, 1]."""
    if outliers not in outlier_check.MODES:
        raise UsageError(f"--outliers must be one of {', '.join(outlier_check.MODES)}, got {outliers!r}")
    if stress_target is not None and not 0 < stress_target <= 1:
        raise UsageError(f"--stress-target must be in (0, 1], got {stress_target}")


def add_floor_argument(parser: argparse.ArgumentParser, default: float, what: str) -> None:
    """`--min-cosine COS`, the floor of any stage: `what` the stage does below it, `default` its default (0: none)."""
    parser.add_argument("--min-cosine", type=float, default=default, metavar="COS",
                        help=f"{what} (default {default:g}{'' if default else ': no floor'})")


def add_stress_arguments(parser: argparse.ArgumentParser, default: str, exclude_means: str, target: bool = True) -> None:
    """`--outliers MODE` (outlier_check.MODES, `default` the stage's; `exclude_means` what exclude does in this
    stage) and, with `target`, `--stress-target COS`, the cosine the stress copy must reach with exclude."""
    parser.add_argument("--outliers", default=default, choices=outlier_check.MODES,
                        help=f"outlier-stress check (outliers written once by the patch embedding, as in trained "
                             f"ViTs): exclude = {exclude_means}, report = measure only, off (default {default})")
    if target:
        parser.add_argument("--stress-target", type=float, default=outlier_check.DEFAULT_TARGET, metavar="COS",
                            help="min per-token cosine the outlier-stress copy must reach with --outliers exclude "
                                 f"(default {outlier_check.DEFAULT_TARGET})")


@dataclass(frozen=True)
class StageRun:
    """`threads`: ORT intra-op threads of the stage's checks (0: all cores); `force`: replace an OUT another stage
    of this tool wrote (only its listed files); `timings`: {step: seconds}, filled as the stage goes (the
    report's footer); `keep_prepared`: the weight stages run one after the other in this process on the same input
    reuse its reference outputs and outlier-stress copies (`bench.sweep`); `cases`: validate only these layouts
    (by name; None: every layout, what the commands do)."""

    threads: int = 0
    force: bool = False
    timings: dict = field(default_factory=dict, compare=False)
    keep_prepared: bool = False
    cases: tuple[str, ...] | None = None

    def __post_init__(self):
        if self.threads < 0:
            raise UsageError(f"--threads must be >= 0, got {self.threads}")

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--threads", type=int, default=0, help="ORT intra-op threads for the checks (0: all)")
        parser.add_argument("--force", action="store_true",
                            help="replace an existing OUT that another stage of this tool wrote (only its listed "
                                 "files)")
        add_clobber_argument(parser)

    @classmethod
    def from_args(cls, args: argparse.Namespace, hooks: StageRun | None = None) -> StageRun:
        """The command line's threads and --force, with `hooks`' keep_prepared and cases (bench.sweep's)."""
        hooks = hooks or cls()
        return cls(args.threads, args.force, keep_prepared=hooks.keep_prepared, cases=hooks.cases)


@dataclass(frozen=True)
class WeightChecks:
    """`exclude`: regexes of MatMuls (node or weight name) kept fp32; `outliers`: the outlier-stress check, exclude
    (keep fp32 the MatMuls it shows must stay fp32), report (measure only) or off; `stress_target`: the min
    per-token cosine the stress copy must reach with exclude; `worst_case_budget`: seconds for the worst-case
    stress figure (None: not measured); `min_cosine` > 0: the floor at the validation layouts, else nothing is
    written; `outlier_ratio` > 1: outlier channels split off into fp32 MatMuls (0: off)."""

    outliers: str = "exclude"
    exclude: tuple[str, ...] = ()
    stress_target: float = outlier_check.DEFAULT_TARGET
    worst_case_budget: float | None = outlier_check.DEFAULT_WORST_CASE_BUDGET
    min_cosine: float = 0.0
    outlier_ratio: float = outlier_channels.DEFAULT_RATIO

    def __post_init__(self):
        check_stress(self.outliers, self.stress_target)
        check_floor(self.min_cosine)
        if self.worst_case_budget is not None and self.worst_case_budget < 0:
            raise UsageError(f"--worst-case-budget must be >= 0 seconds, got {self.worst_case_budget}")
        if self.outlier_ratio != 0 and not self.outlier_ratio > 1:
            raise UsageError(f"--outlier-ratio must be 0 (off) or greater than 1, got {self.outlier_ratio}")
        excluded([], list(self.exclude))  # a bad pattern is refused before any work

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser, outliers: str) -> None:
        """The options, `outliers` the stage's default mode."""
        parser.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                            help="keep fp32 the MatMuls whose node or weight name matches this regex (repeatable)")
        add_stress_arguments(parser, outliers, "keep fp32 the MatMuls it shows must stay fp32")
        parser.add_argument("--worst-case-budget", type=float, default=outlier_check.DEFAULT_WORST_CASE_BUDGET,
                            metavar="S", help="also measure the worst-case outlier-stress figure (every writer of the "
                            "stream scaled; a figure, never a gate) for up to S seconds after its first layout "
                            "(default: not measured; `python -m bench.sweep` measures it for every point)")
        add_floor_argument(parser, 0.0, "refuse (exit 2, nothing written) when the min per-token cosine against fp32 "
                                        "over the validation layouts is below COS")
        parser.add_argument("--outlier-ratio", type=float, default=outlier_channels.DEFAULT_RATIO, metavar="R",
                            help="split off into fp32 the MatMul input channels whose max |x| exceeds R x the median "
                                 f"channel's (LLM.int8()-style; 0: off; default {outlier_channels.DEFAULT_RATIO:g})")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> WeightChecks:
        return cls(args.outliers, tuple(args.exclude), args.stress_target, args.worst_case_budget, args.min_cosine,
                   args.outlier_ratio)
