"""Which runtime runs a model's file: ONNX Runtime (the default) or OpenVINO, as one object (torch-free).

`Engine(name, precision)` travels from the command line (`--engine`, `--precision`) to wherever a session is
opened; `Engine.open(model, threads)` gives an ONNX Runtime session or an `OpenVINOSession` with the same
`run` / `get_inputs` / `get_outputs` surface.

OpenVINO's default precision (`--precision` not given) is bf16 where OpenVINO can compute in bf16 on this CPU,
else f32: measured at Qwen3-VL-2B dims at every validation layout of its optimized stage, bf16 keeps the min
per-token cosine against fp32 above BF16_FLOOR, at 2.6-2.9x the speed of f32 on an Intel Xeon with AMX
(docs/runtime-openvino.md, bench/results/runtimes.md); `runtime verify` checks each package in bf16 at the floor.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from vlm_vision_onnx.core import openvino_session, session
from vlm_vision_onnx.core.errors import UsageError

ENGINES = ("onnxruntime", "openvino")
#: `--engine auto` (the command line's default): the engine, variant and precision are chosen per package and CPU
#: by `runtime.path_choice` before a session opens.
AUTO = "auto"
#: The accuracy a lower-precision computation of the fp32 file must keep: min per-token cosine against the fp32
#: outputs, the INT8 variant's floor (the strictest any variant ships under).
BF16_FLOOR = 0.998


def default_precision() -> str:
    """OpenVINO's precision when none is given: bf16 where the CPU has it, else f32."""
    return "bf16" if openvino_session.bf16_supported() else "f32"


@dataclass(frozen=True)
class Engine:
    """name: onnxruntime | openvino; precision: OpenVINO's f32 | bf16 (None: `default_precision()`); at_once: how
    many entries a caller runs at the same time through `session.run_each` (OpenVINO compiles for that many
    requests, `openvino_session.performance_hint`; ONNX Runtime runs them one after another)."""
    name: str = "onnxruntime"
    precision: str | None = None
    at_once: int = 1

    def __post_init__(self):
        if self.name not in (*ENGINES, AUTO):
            raise UsageError(f"--engine must be one of {', '.join((AUTO, *ENGINES))}, got {self.name!r}")
        if self.precision is not None and self.precision not in openvino_session.PRECISIONS:
            raise UsageError(f"--precision must be one of {', '.join(openvino_session.PRECISIONS)}, "
                             f"got {self.precision!r}")
        if self.name == "onnxruntime" and self.precision not in (None, "f32"):
            raise UsageError(f"--precision {self.precision} needs --engine openvino (ONNX Runtime computes the "
                             "fp32 file in f32 on CPU)")

    def open(self, model: str | os.PathLike, threads: int | None = None):
        """A session of the model file (`threads`: intra-op, None = all cores)."""
        if self.name == AUTO:
            raise ValueError("--engine auto is resolved to an engine (runtime.path_choice) before a session opens")
        if self.name == "onnxruntime":
            return session.open_session(model, threads)
        return openvino_session.OpenVINOSession(model, threads, self.precision or default_precision(),
                                                at_once=self.at_once)

    @property
    def one_entry_per_run(self) -> bool:
        """Whether `runtime embed` runs each entry (image, video) alone rather than all as one pack: on OpenVINO,
        whose CPU plugin prepares its kernels and buffers at each new input shape, at a cost that grows with the
        shape (Qwen3-VL-2B's ov-int8, four 1024x1024 photos, 2 cores of an AMD EPYC Zen 4: as one pack 53 s at the
        first run, 45-46 s at the next; one photo 12.0 s first, 11.2 s next; 2026-11-27, by hand; the process race,
        `bench.cpu_race --package`, times the command). ONNX Runtime runs the pack."""
        return self.name == "openvino"

    def describe(self) -> str:
        """'onnxruntime' or 'openvino bf16' (the precision it resolves to)."""
        if self.name in ("onnxruntime", AUTO):
            return self.name
        return f"{self.name} {self.precision or default_precision()}"


#: What a session opens with when no engine is given: ONNX Runtime.
DEFAULT = Engine()


def add_arguments(parser, also: tuple[str, ...] = (), also_help: str = "") -> None:
    """--engine and --precision (`also`: more --engine values the command takes, explained by `also_help`)."""
    parser.add_argument("--engine", choices=(AUTO, *ENGINES, *also), default=AUTO,
                        help="the runtime that runs the package's file: auto (default: the fastest engine, variant "
                             "and precision on this CPU that keeps a min per-token cosine of 0.998 against fp32, "
                             "docs/runtimes.md), onnxruntime or openvino (the openvino extra)" + also_help)
    parser.add_argument("--precision", choices=openvino_session.PRECISIONS,
                        help="--engine openvino: f32, or bf16 (default: bf16 where the CPU has it, else f32)")


def from_args(args) -> Engine:
    return Engine(args.engine, args.precision)
