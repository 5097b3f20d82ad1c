"""The ONNX Runtime CPU session every stage runs models with, and ORT errors as one readable line."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import onnxruntime as ort
from onnxruntime.capi import onnxruntime_pybind11_state as _ort_state

from vlm_vision_onnx.core import cpu, onnx_io
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.progress import say

if TYPE_CHECKING:
    import onnx
    import onnx_ir as ir

ort.set_default_logger_severity(4)  # errors reach the user through exceptions, not ORT's log

#: What ORT raises when a model fails to load or run (its own types do not derive from RuntimeError).
ORT_ERRORS = (RuntimeError, ValueError) + tuple(
    getattr(_ort_state, name) for name in (
        "Fail", "InvalidArgument", "RuntimeException", "NotImplemented", "InvalidGraph", "NoSuchFile",
        "InvalidProtobuf", "ModelLoaded", "NoModel", "EPFail", "EngineError",
    ) if hasattr(_ort_state, name)
)

#: What ORT raises for a file it cannot load as a model at all (not an EP's refusal of a valid one).
INVALID_MODEL_ERRORS = tuple(getattr(_ort_state, name) for name in ("InvalidGraph", "InvalidProtobuf", "NoSuchFile",
                                                                    "InvalidArgument") if hasattr(_ort_state, name))


def ort_error_line(exc: BaseException) -> str:
    """The useful part of an ORT error on one line: the failing node and the message, never cut.

    '[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/.../model.cc:256 onnxruntime::Model::Model(...)
    Unsupported model IR version: 14, max supported IR version: 13' -> 'Unsupported model IR version: 14, ...'
    """
    text = " ".join(str(exc).split())
    where = re.search(r"while running (\S+) node\. Name:'([^']*)'", text)
    message = re.split(r"\[ONNXRuntimeError\] : \d+ : \w+ : ", text)[-1]
    message = re.sub(r"^Non-zero status code returned while running \S+ node\. Name:'[^']*' Status Message: ", "",
                     message)
    message = re.sub(r"Load model from \S+ failed: ?", "", message)  # a temp path hides nothing useful
    message = re.sub(r"/onnxruntime_src/\S+:\d+ (?:[\w:~<>,*& ]+\([^()]*\) ?)?", "", message)  # source + signature
    prefix = ""
    if where:
        prefix = f"{where.group(1)} node '{where.group(2)}': " if where.group(2) else f"{where.group(1)} node: "
    return prefix + message


#: The numpy dtype of each input type as ONNX Runtime names it (NodeArg.type; `OpenVINOSession` names them alike).
NUMPY_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int64)": np.int64,
               "tensor(int32)": np.int32, "tensor(bool)": np.bool_}


#: ORT's memory pattern off: it plans one block per input shape for all of a run's tensors, and with the dynamic
#: shapes every exported encoder has it kept far more than tensor-by-tensor arena reuse does. Measured
#: (AMD EPYC, one run at Phi-4-multimodal's 13-crop layout, optimized fp32 at published dims): peak RSS 5918 MiB with
#: it, 4014 MiB without, 72 s either way; over the 9 validation layouts of `quantize optimize` the stage peaked at
#: 13.3 GB and int8 was killed at 20 GB on a 24 GB machine. Qwen3-VL 2B at 448x448, one thread: within 2% either
#: way (docs/export.md "Export cost").
MEMORY_PATTERN = False


#: At the end of every run ORT's CPU arena gives back to the system the memory it holds unused
#: (`memory.enable_memory_arena_shrinkage`): without it, the arena keeps the high-water mark of the largest layout
#: a session ever ran for as long as it lives. Measured on a 3-layer Phi-4-multimodal at published width (AMD EPYC):
#: the optimize stage's peak 4751 -> 3645 MiB; speed: docs/export.md "Export cost".
ARENA_SHRINKAGE = "cpu:0"


class Session(ort.InferenceSession):
    """`ort.InferenceSession` whose runs shrink its CPU arena at their end (ARENA_SHRINKAGE), unless a run is
    given RunOptions of its own."""

    def run(self, output_names, input_feed, run_options=None):
        if run_options is None:
            run_options = ort.RunOptions()
            run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", ARENA_SHRINKAGE)
        return super().run(output_names, input_feed, run_options)


def _options(threads: int | None, optimize: bool = True, in_order: bool = False) -> ort.SessionOptions:
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.enable_mem_pattern = MEMORY_PATTERN
    if threads:
        options.intra_op_num_threads = threads
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if in_order:
        options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    return options


def open_session(src: str | os.PathLike | ir.Model | onnx.ModelProto, threads: int | None = None,
                 optimize: bool = True, in_order: bool = False) -> ort.InferenceSession:
    """A CPU session for a model file, an onnx-ir model or a ModelProto (`threads`: intra-op, None = all;
    `optimize=False`: ONNX Runtime's graph optimizations off, the graph runs node by node as written;
    `in_order`: ready nodes run in the order the graph lists them (ORT's priority-based order), not ORT's
    default, a depth-first walk back from the outputs that runs a node added for an extra output last).

    An in-memory model is written to a temporary folder first (external data when large, so nothing is
    serialised whole past protobuf's limit; ORT cannot resolve external data of in-memory bytes).
    A model ORT refuses raises UsageError with ORT's reason on one line.
    """
    onnx_io.collect_for(src)  # a dropped onnx-ir model frees its weights before ORT loads another copy
    options = _options(threads, optimize, in_order)
    in_memory = onnx_io.is_ir_model(src) or onnx_io.is_model_proto(src)
    name = "the model" if in_memory else str(src)
    try:
        if in_memory:
            with tempfile.TemporaryDirectory(prefix="vision-onnx-session-") as tmp:
                path = Path(tmp) / onnx_io.MODEL_FILE
                if onnx_io.is_ir_model(src):
                    onnx_io.save(src, path)
                else:
                    onnx_io.save_proto(src, path)
                options.add_session_config_entry("session.use_ort_model_bytes_directly", "0")
                return _checked(Session(str(path), options, providers=["CPUExecutionProvider"]), name)
        return _checked(Session(str(src), options, providers=["CPUExecutionProvider"]), name)
    except ORT_ERRORS as exc:
        raise UsageError(f"ONNX Runtime cannot load {name}: {ort_error_line(exc)}") from None


_warned: set[str] = set()


def _checked(sess: ort.InferenceSession, name: str) -> ort.InferenceSession:
    """`sess`, after one warning line (once per model) when its int8 kernels are inexact on this CPU."""
    needs = sess.get_modelmeta().custom_metadata_map.get(cpu.METADATA_KEY)
    if needs == cpu.NEEDS_EXACT_INT8 and cpu.int8_saturates() and name not in _warned:
        _warned.add(name)
        say(f"warning: {name} has 8-bit dynamic INT8 weights and this CPU ({cpu.name()}) has no VNNI/AMX: its "
            "int8 kernel saturates, so the outputs are less accurate than measured on a CPU with them; "
            "quantize with --reduce-range (the default) for this CPU")
    return sess


@contextlib.contextmanager
def session(src, threads: int | None = None) -> Iterator[ort.InferenceSession]:
    """`open_session` as a context manager (the session is released on exit)."""
    sess = open_session(src, threads)
    try:
        yield sess
    finally:
        del sess


def owned(outputs: list[np.ndarray]) -> list[np.ndarray]:
    """Copies of a run's outputs that own their memory.

    ONNX Runtime 1.31 returns outputs as views of its own buffers (`base` is a PyCapsule), and one kept view keeps
    the session's whole arena alive after the session is gone: at Phi-4-multimodal's 15-crop layouts, 2.5 GB per
    kept output list, measured. Whatever keeps outputs (references, stage checks) keeps these copies instead.
    """
    return [np.array(o, copy=True) for o in outputs]


#: How ONNX Runtime's CPU allocator says it is out of memory (bfc_arena.cc "Failed to allocate memory for requested
#: buffer of size N", a C++ std::bad_alloc): raised as MemoryError, which every command reports on one line (exit 2).
OUT_OF_MEMORY = re.compile(r"Failed to allocate memory|bad_alloc|std::bad_alloc|out of memory", re.IGNORECASE)


def outputs(sess: ort.InferenceSession, feeds: dict[str, np.ndarray], names: list[str] | None = None
            ) -> list[np.ndarray]:
    """The outputs `names` (None: all, in the graph's order) of one run, as arrays that own their memory.
    UsageError when a feed's shape contradicts a static dim the model declares (`check_feeds`); MemoryError when
    ONNX Runtime's allocator runs out (`OUT_OF_MEMORY`); its other errors as they are."""
    check_feeds(sess, feeds)
    with _out_of_memory_as_memory_error():
        return owned(sess.run(names, feeds))


def check_feeds(sess, feeds: dict[str, np.ndarray]) -> None:
    """UsageError when a feed's rank or a static dim differs from the model's declared input (a model file whose
    inputs were edited: ONNX Runtime's own error would end in a traceback; found by tools/fuzz)."""
    for spec in sess.get_inputs():
        if spec.name not in feeds or not isinstance(spec.shape, list):
            continue
        shape = feeds[spec.name].shape
        if len(shape) != len(spec.shape) or any(isinstance(d, int) and d != n for d, n in zip(spec.shape, shape)):
            raise UsageError(f"the model declares input {spec.name!r} as {list(spec.shape)}, but it is fed "
                             f"{list(shape)}: the model file does not take its family's inputs (edited or corrupt)")


@contextlib.contextmanager
def _out_of_memory_as_memory_error() -> Iterator[None]:
    """A runtime's allocation failure (`OUT_OF_MEMORY`) raised as MemoryError; its other errors as they are."""
    try:
        yield
    except ORT_ERRORS as exc:
        if OUT_OF_MEMORY.search(str(exc)):
            raise MemoryError(ort_error_line(exc)) from None
        raise


def run(sess: ort.InferenceSession, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every output of one run, by name, in the graph's output order (arrays that own their memory)."""
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, outputs(sess, feeds, names)))


def run_each(sess, feeds: list[dict[str, np.ndarray]]) -> list[dict[str, np.ndarray]]:
    """`run` of each of `feeds`, in their order: at the same time where the session runs several at once
    (`OpenVINOSession.run_each`), else one after another."""
    if not hasattr(sess, "run_each"):
        return [run(sess, f) for f in feeds]
    names = [o.name for o in sess.get_outputs()]
    with _out_of_memory_as_memory_error():
        return [dict(zip(names, found)) for found in sess.run_each(names, feeds)]


def output_names(sess: ort.InferenceSession) -> list[str]:
    return [o.name for o in sess.get_outputs()]
