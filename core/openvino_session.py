"""An OpenVINO CPU model behind the part of `onnxruntime.InferenceSession` the runtime uses (torch-free).

`OpenVINOSession(path, threads, precision)` compiles the ONNX file (or OpenVINO IR, `.xml` + `.bin`: the ov-int8
variant, `quantize/ov_int8.py`) for OpenVINO's CPU plugin and answers
`get_inputs()` / `get_outputs()` (name, ORT-style type, shape), `get_modelmeta().custom_metadata_map` and
`run(names, feeds) -> [arrays]`, so that code written against an ORT session runs unchanged. A file with Ifs
decided by its integer inputs and shapes (Qwen's attention) is compiled per pattern of those Ifs, each If replaced
by the branch it takes, on the first run that needs it (`core.openvino_branches`: OpenVINO gives every If body
memory of its own); any other file is compiled when the session opens.

precision: OpenVINO's inference precision hint, "f32" or "bf16" (bf16 needs a CPU with AVX-512 BF16 or AMX:
`bf16_supported()`). The figures behind the runtime's default are in docs/runtime-openvino.md.

No compiled-model cache (CACHE_DIR): every session compiles its file. OpenVINO 2026.4.1's CPU plugin read cached
models back wrong: in its default mode garbage from the decomposed RotaryEmbedding's Concat on the tiny Qwen3-VL
file and 2B ov-int8 features off by up to 6%, silently; in OPTIMIZE_SIZE features off by 3e-4 and no time saved
(docs/runtime-openvino.md, "No compile cache", has the figures and how they were found).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core import onnx_io, openvino_branches
from core.errors import UsageError

PRECISIONS = ("f32", "bf16")
#: The model file of an IR stage folder (its weights: model.bin beside it).
IR_MODEL_FILE = "model.xml"
#: Where an IR keeps the ONNX file's metadata_props (family, model, ...): rt_info[RT_INFO_KEY][key].
RT_INFO_KEY = "vlm_vision_onnx"
_TYPES = {"f32": "tensor(float)", "f16": "tensor(float16)", "i64": "tensor(int64)", "i32": "tensor(int32)",
          "boolean": "tensor(bool)", "u8": "tensor(uint8)", "i8": "tensor(int8)"}


def _openvino():
    try:
        import openvino
    except ImportError:
        raise UsageError("--engine openvino needs the openvino package: pip install '.[openvino]' "
                         "(make install installs it)") from None
    return openvino


def available() -> bool:
    """Whether the openvino package imports here."""
    try:
        _openvino()
    except UsageError:
        return False
    return True


def bf16_supported() -> bool:
    """Whether OpenVINO's CPU plugin can compute in bf16 on this CPU."""
    return "BF16" in _openvino().Core().get_property("CPU", "OPTIMIZATION_CAPABILITIES")


def is_ir(path: str | os.PathLike) -> bool:
    """Whether `path` names an OpenVINO IR (`.xml`) rather than an ONNX file."""
    return Path(path).suffix == ".xml"


def ir_file_sizes(path: str | os.PathLike) -> dict[str, int]:
    """{file name: bytes} of an IR: its .xml and the .bin beside it."""
    files = [Path(path), Path(path).with_suffix(".bin")]
    return {f.name: f.stat().st_size for f in files if f.exists()}


def set_metadata(model, metadata: dict[str, str]) -> None:
    """Keep an ONNX file's metadata_props in an OpenVINO model's rt_info (saved with it in the IR)."""
    for key, value in metadata.items():
        model.set_rt_info(str(value), [RT_INFO_KEY, key])


def metadata(model) -> dict[str, str]:
    """The metadata `set_metadata` kept in an OpenVINO model ({} when none)."""
    if not model.has_rt_info([RT_INFO_KEY]):
        return {}
    return {key: value.astype(str) for key, value in model.get_rt_info()[RT_INFO_KEY].items()}


@dataclass(frozen=True)
class Port:
    """An input or output as ORT's NodeArg shows it: name, type ('tensor(float)'), shape (ints or names)."""
    name: str
    type: str
    shape: list


@dataclass(frozen=True)
class ModelMeta:
    custom_metadata_map: dict[str, str]


def _port(port) -> Port:
    shape = [d.get_length() if d.is_static else f"dim{i}" for i, d in enumerate(port.get_partial_shape())]
    return Port(port.get_any_name(), _TYPES.get(port.get_element_type().get_type_name(), "tensor(unknown)"), shape)


def compile_cpu(core, model, config: dict):
    """`core.compile_model(model, "CPU", config)` for an `openvino.Model` of this tool's graphs, with every If's
    outputs made model outputs too (callers read outputs by name; the extra ones are ignored).

    Why: OpenVINO 2026.4.1's CPU plugin returns garbage (NaN, or errors of 1e-3 to 0.2) from the first inference
    at each new input shape of the Qwen2-VL and Qwen2.5-VL encoders, whose attention is an If
    (builders/qwen_vl/segment_attention.py, window_attention.py); every later inference at that shape is right.
    With the If's outputs also model outputs, the first inference is right too (the canary:
    tests/test_qwen_generations.py::test_openvino_first_inference_per_shape_needs_the_if_taps). The cost is one
    copy of each block's attention output per run.
    """
    taps = [op.output(i) for op in model.get_ops() if op.get_type_name() == "If" for i in range(op.get_output_size())]
    if taps:
        model.add_outputs(taps)
    return core.compile_model(model, "CPU", config)


def branch_compiler(core, path, config: dict, keep: int = 2, model=None) -> openvino_branches.BranchCompiler:
    """The file's compiled models per pattern of its Ifs (core.openvino_branches), each through `compile_cpu`
    with `config`; `model`: the file already read, if it is."""
    read = lambda: core.read_model(str(path))
    return openvino_branches.BranchCompiler(read() if model is None else model, read,
                                            lambda m: compile_cpu(core, m, config), keep)


def _cannot_load(path, err: RuntimeError) -> UsageError:
    # whole, on one line: OpenVINO names the failing op at the end of a long message
    return UsageError(f"OpenVINO cannot load {path}: {' '.join(str(err).split())}")


class OpenVINOSession:
    """A compiled OpenVINO CPU model of an ONNX file (see the module docstring)."""

    def __init__(self, path: str | os.PathLike, threads: int | None = None, precision: str = "f32",
                 config: dict | None = None):
        """`config`: more CPU plugin properties for compile_model (e.g. DYNAMIC_QUANTIZATION_GROUP_SIZE)."""
        if precision not in PRECISIONS:
            raise UsageError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        ov = _openvino()
        if precision == "bf16" and not bf16_supported():
            raise UsageError("--precision bf16: this CPU has no bf16 support in OpenVINO (AVX-512 BF16 or AMX); "
                             "use --precision f32")
        extra = config or {}
        config = {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY"}
        if threads:
            config["INFERENCE_NUM_THREADS"] = threads
        config.update(extra)
        self.path, self.precision = Path(path), precision
        core = ov.Core()
        try:
            model = core.read_model(str(path))
            # an IR's metadata is in the model (rt_info); an ONNX file's is read from the file below
            meta = metadata(model) if is_ir(path) else None
            self._inputs = [_port(p) for p in model.inputs]
            self._outputs = [_port(p) for p in model.outputs]
            self._branches = branch_compiler(core, path, config, model=model)
            del model
            if not self._branches.specializes:  # compiled now, as it is; else per pattern of its Ifs on first use
                self._branches({})
        except RuntimeError as err:
            raise _cannot_load(path, err) from None
        self._request = None  # (compiled model, its infer request) of the last run
        if meta is None:
            meta = {p.key: p.value for p in onnx_io.read_proto(path).metadata_props}
        self._meta = ModelMeta(meta)

    @property
    def specializes(self) -> bool:
        """Whether runs go to models compiled per pattern of the Ifs' conditions (core.openvino_branches)."""
        return self._branches.specializes

    def get_inputs(self) -> list[Port]:
        return self._inputs

    def get_outputs(self) -> list[Port]:
        return self._outputs

    def get_modelmeta(self) -> ModelMeta:
        return self._meta

    def run(self, output_names, input_feed: dict[str, np.ndarray], run_options=None) -> list[np.ndarray]:
        """Outputs `output_names` (None: all, in the model's order) of one inference, as arrays of their own."""
        try:
            compiled = self._branches(input_feed)
        except RuntimeError as err:
            raise _cannot_load(self.path, err) from None
        if self._request is None or self._request[0] is not compiled:
            self._request = None  # the former request's memory goes before the new one's comes
            self._request = (compiled, compiled.create_infer_request())
        results = self._request[1].infer({name: np.ascontiguousarray(a) for name, a in input_feed.items()})
        by_name = {port.get_any_name(): results[port] for port in compiled.outputs}
        names = output_names or [o.name for o in self._outputs]
        return [np.array(by_name[name], copy=True) for name in names]
