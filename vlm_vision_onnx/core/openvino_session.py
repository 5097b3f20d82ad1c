"""An OpenVINO CPU model behind the part of `onnxruntime.InferenceSession` the runtime uses (torch-free).

`OpenVINOSession(path, threads, precision)` compiles the ONNX file (or OpenVINO IR, `.xml` + `.bin`: the ov-int8
variant, `quantize/ov_int8.py`) for OpenVINO's CPU plugin and answers
`get_inputs()` / `get_outputs()` (name, ORT-style type, shape), `get_modelmeta().custom_metadata_map` and
`run(names, feeds) -> [arrays]`, so that code written against an ORT session runs unchanged; `run_each(names,
[feeds, ...])` runs several inputs, each alone, up to `at_once` of them at the same time (OpenVINO's streams). A file with Ifs
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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vlm_vision_onnx.core import onnx_io, openvino_attention, openvino_branches, session
from vlm_vision_onnx.core.errors import UsageError

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

    Every top-level ScaledDotProductAttention is first written as the MatMul form the plugin runs with the key's
    transpose fused (`core.openvino_attention.untranspose_keys`: one attention at 4096 patches 283 against 296 ms).
    """
    taps = [op.output(i) for op in model.get_ops() if op.get_type_name() == "If" for i in range(op.get_output_size())]
    if taps:
        model.add_outputs(taps)
    openvino_attention.untranspose_keys(model)
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


#: TensorProto.DataType codes OpenVINO 2026.4's ONNX reader cannot take: undefined and string (a graph input of
#: type string feeding a Mul ends its `read_model` in a segmentation fault, found by tools/fuzz), and codes onnx
#: does not define.
_UNREADABLE_TYPES = {0, 8}


def _checked_onnx_metadata(path: Path) -> dict[str, str]:
    """The metadata of the ONNX file at `path`, after `core.onnx_io`'s load checks and a check that no graph input,
    output, initializer or value_info has a type OpenVINO's reader crashes on (UsageError naming it)."""
    from vlm_vision_onnx.core import onnx_light

    proto = onnx_io.read_light(path)
    graph = proto.graph
    typed = [(v.name, v.type.tensor_type.elem_type) for v in (*graph.input, *graph.output, *graph.value_info)
             if v.type.HasField("tensor_type")]
    typed += [(t.name, t.data_type) for t in graph.initializer]
    for name, code in typed:
        if code in _UNREADABLE_TYPES or code not in onnx_light.DTYPE_NAMES:
            kind = {0: "undefined", 8: "string"}.get(code, onnx_light.DTYPE_NAMES.get(code, f"code {code}"))
            raise UsageError(f"{path}: {name!r} has element type {kind}, which "
                             "OpenVINO cannot read (a vision encoder has none): the file is corrupt or not an "
                             "export of this tool")
    return onnx_io.metadata_of(proto)


class OpenVINOSession:
    """A compiled OpenVINO CPU model of an ONNX file (see the module docstring)."""

    def __init__(self, path: str | os.PathLike, threads: int | None = None, precision: str = "f32",
                 config: dict | None = None, at_once: int = 1):
        """`config`: more CPU plugin properties for compile_model (e.g. DYNAMIC_QUANTIZATION_GROUP_SIZE);
        `at_once`: how many inputs the caller gives `run_each` (1: compiled for the latency of one run)."""
        if precision not in PRECISIONS:
            raise UsageError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
        ov = _openvino()
        if precision == "bf16" and not bf16_supported():
            raise UsageError("--precision bf16: this CPU has no bf16 support in OpenVINO (AVX-512 BF16 or AMX); "
                             "use --precision f32")
        extra = config or {}
        config = {"INFERENCE_PRECISION_HINT": precision, **performance_hint(at_once)}
        if threads:
            config["INFERENCE_NUM_THREADS"] = threads
        config.update(extra)
        self.path, self.precision = Path(path), precision
        # an ONNX file is read (and checked: core.onnx_io) before OpenVINO's reader sees it; its metadata is the
        # file's; an IR's is in the model (rt_info)
        meta = None if is_ir(path) else _checked_onnx_metadata(Path(path))
        core = ov.Core()
        try:
            model = core.read_model(str(path))
            meta = metadata(model) if meta is None else meta
            self._inputs = [_port(p) for p in model.inputs]
            self._outputs = [_port(p) for p in model.outputs]
            self._branches = branch_compiler(core, path, config, model=model)
            del model
            if not self._branches.specializes:  # compiled now, as it is; else per pattern of its Ifs on first use
                self._branches({})
        except RuntimeError as err:
            raise _cannot_load(path, err) from None
        self._request = None  # (compiled model, its infer request) of the last run
        self.most_at_once = 1  # the most inputs a `run_each` has run at the same time
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

    def prepare(self, feeds: dict[str, np.ndarray]) -> None:
        """Compile now the model that inputs like `feeds` run on (a specializing file compiles per pattern of its Ifs
        on first use): what a session opening in the background does while Python loads (`runtime.session_opening`).
        `feeds`: the inputs' shapes and integer values (grid_thw) matter, never the float values; cast here."""
        if self.specializes:
            dtypes = {port.name: session.NUMPY_TYPES.get(port.type) for port in self._inputs}
            self._loading(self._branches, {name: np.asarray(a).astype(dtypes.get(name) or np.asarray(a).dtype)
                                           for name, a in feeds.items()})

    def run(self, output_names, input_feed: dict[str, np.ndarray], run_options=None) -> list[np.ndarray]:
        """Outputs `output_names` (None: all, in the model's order) of one inference, as arrays of their own."""
        compiled = self._loading(self._branches, input_feed)
        if self._request is None or self._request[0] is not compiled:
            self._request = None  # the former request's memory goes before the new one's comes
            self._request = (compiled, compiled.create_infer_request())
        return self._outputs_of(compiled, self._request[1].infer(_contiguous(input_feed)), output_names)

    def run_each(self, output_names, input_feeds: list[dict[str, np.ndarray]]) -> list[list[np.ndarray]]:
        """`run(output_names, feeds)` of each of `input_feeds`, in their order; as many at the same time as the
        compiled model has streams (at most `at_once`), the largest inputs started first.

        Each request runs in a Python thread of its own (`infer` releases the GIL), so that no Python code runs on
        OpenVINO's threads: with `AsyncInferQueue`'s callbacks a process sometimes ended in `Resource deadlock
        avoided` (a C++ thread joining itself, the last reference to a request dropped on its own stream)."""
        found: list[list[np.ndarray] | None] = [None] * len(input_feeds)
        size = lambda i: sum(a.size for a in input_feeds[i].values())
        by_pattern: dict[tuple, list[int]] = {}  # inputs per pattern of the Ifs, largest first
        for i in sorted(range(len(input_feeds)), key=size, reverse=True):
            by_pattern.setdefault(self._loading(self._branches.pattern, input_feeds[i]), []).append(i)
        self._request = None  # its memory goes before the new requests' comes
        for indices in by_pattern.values():
            compiled = self._loading(self._branches, input_feeds[indices[0]])
            count = max(1, min(len(indices), compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")))
            self.most_at_once = max(self.most_at_once, count)
            pending = iter(indices)  # shared by the threads; next() on it is atomic under the GIL

            def work(request, compiled=compiled, pending=pending) -> None:
                for i in pending:
                    found[i] = self._outputs_of(compiled, request.infer(_contiguous(input_feeds[i])), output_names)

            requests = [compiled.create_infer_request() for _ in range(count)]
            with ThreadPoolExecutor(count, thread_name_prefix="openvino-run") as threads:
                for done in [threads.submit(work, request) for request in requests]:
                    done.result()  # the first error, as run() raises it
            del requests
        return found

    def _loading(self, load, feeds):
        """`load(feeds)` (the Ifs' pattern, or the model compiled for it); OpenVINO's error as UsageError."""
        try:
            return load(feeds)
        except RuntimeError as err:
            raise _cannot_load(self.path, err) from None

    def _outputs_of(self, compiled, results, output_names) -> list[np.ndarray]:
        """Outputs `output_names` (None: all, in the model's order) of a request's `results`, as arrays of their
        own."""
        by_name = {port.get_any_name(): results[port] for port in compiled.outputs}
        names = output_names or [o.name for o in self._outputs]
        return [np.array(by_name[name], copy=True) for name in names]


def performance_hint(at_once: int) -> dict:
    """The CPU plugin's performance properties for a session given `at_once` inputs at a time: LATENCY for one (all
    threads on each run); else THROUGHPUT for that many requests, the plugin choosing its streams (each on a share of
    the threads; 2 streams of 1 thread on 2 cores). Qwen3-VL-2B's ov-int8, four 1024x1024 photos, 2 cores of the
    AMX Xeon: 1.21x and 1.34x the LATENCY form's speed in two runs of bench/ov_streams.py (retired at commit
    c9ada23; bench/results/ov-streams-amx.md; docs/runtime-openvino.md, "Several entries at once")."""
    if at_once <= 1:
        return {"PERFORMANCE_HINT": "LATENCY"}
    return {"PERFORMANCE_HINT": "THROUGHPUT", "PERFORMANCE_HINT_NUM_REQUESTS": at_once}


def _contiguous(feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {name: np.ascontiguousarray(a) for name, a in feeds.items()}
