"""Loading and saving ONNX models: one external-data rule, one IR-version rule, clear errors.

`read_proto` checks what usually goes wrong before any work starts (missing, empty or truncated file,
not ONNX, an IR version ONNX Runtime cannot read, external weights missing or short) and raises
`UsageError` with one line saying what is wrong and how to fix it.

External data: a model whose weights exceed `EXTERNAL_DATA_THRESHOLD` (or whose source kept them
outside) is written as `NAME` + `NAME.data`; nothing is ever serialised whole in memory past that size,
so models over protobuf's 2 GiB limit (the 8B tower, 2.3 GB) save and load on every path.
IR version: files are written with `ir_version <= MAX_IR_VERSION`; inputs newer than
`ORT_MAX_IR_VERSION` are refused on load, naming both versions.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import json
import os
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from google.protobuf.message import DecodeError

from vlm_vision_onnx.core import graph_check, onnx_light
from vlm_vision_onnx.core.errors import UsageError

if TYPE_CHECKING:
    import onnx
    import onnx_ir as ir


def _ir():
    """onnx_ir, imported on first use: it pulls in sympy (1-3 s of a process's start on 2 cores), which the
    runtime's commands (`runtime embed`, `verify`: metadata and protobuf reads only) never need."""
    import onnx_ir

    return onnx_ir


def is_ir_model(obj) -> bool:
    """Whether `obj` is an onnx-ir model (one exists only once onnx_ir is imported: never imports it)."""
    ir = sys.modules.get("onnx_ir")
    return ir is not None and isinstance(obj, ir.Model)


def is_model_proto(obj) -> bool:
    """Whether `obj` is an onnx.ModelProto (one exists only once onnx is imported: never imports it)."""
    onnx = sys.modules.get("onnx")
    return onnx is not None and isinstance(obj, onnx.ModelProto)


#: Above this many bytes of weights a model is written with external data (`model.onnx.data`).
EXTERNAL_DATA_THRESHOLD = 512 * 1024 * 1024
#: The IR version every stage writes (at most): what the whole toolchain reads.
MAX_IR_VERSION = 10
#: The highest IR version ONNX Runtime 1.31 loads ("Unsupported model IR version: 14, max supported 13").
ORT_MAX_IR_VERSION = 13
MODEL_FILE = "model.onnx"
#: Loading a model of at least this many bytes of weights first runs a full garbage collection (`collect_for`).
COLLECT_THRESHOLD = 64 * 2**20


def model_path(path: str | os.PathLike) -> Path:
    """`path` itself if it is a file, else `path/model.onnx`; UsageError when neither exists."""
    path = Path(path)
    if path.is_dir():
        path = path / MODEL_FILE
    if not path.is_file():
        raise UsageError(f"input model {path} not found (give a model.onnx file or a stage folder holding one)")
    return path


def read_proto(path: str | os.PathLike) -> onnx.ModelProto:
    """Parse the graph of `path` (a file or stage folder) without its external weights, after checking
    the file, the IR version and that every external weight is present and long enough."""
    import onnx

    return _read_checked(path, lambda file: onnx.load(str(file), load_external_data=False))


def read_light(path: str | os.PathLike) -> onnx_light.ModelProto:
    """`read_proto`'s checks and result, parsed without the onnx package (`core.onnx_light`: metadata, opsets,
    inputs, outputs, nodes and where the weights are; what the runtime's commands read)."""
    return _read_checked(path, lambda file: onnx_light.parse(file.read_bytes()))


def _read_checked(path: str | os.PathLike, parse):
    path = model_path(path)
    size = path.stat().st_size
    if size == 0:
        raise UsageError(f"{path} is empty (0 bytes); give a complete .onnx file")
    try:
        proto = parse(path)
    except (DecodeError, RuntimeError, ValueError, OSError) as exc:
        raise UsageError(f"{path} is not an ONNX model ({size} bytes that do not parse as ONNX protobuf: "
                         f"truncated or another format); give a complete .onnx file") from exc
    if not proto.HasField("graph") or proto.ir_version <= 0 or not (proto.graph.node or proto.graph.output):
        raise UsageError(f"{path} is not an ONNX model (no graph or IR version); give a complete .onnx file")
    if proto.ir_version > ORT_MAX_IR_VERSION:
        raise UsageError(f"{path} has IR version {proto.ir_version} but ONNX Runtime {_ort_version()} reads at "
                         f"most {ORT_MAX_IR_VERSION}; re-save it with a lower ir_version (e.g. onnx.save after "
                         f"setting model.ir_version = {MAX_IR_VERSION})")
    found = graph_check.problems(proto, limit=1)
    if found:
        raise UsageError(f"{path} is not a valid ONNX graph: {found[0]}")
    _check_external_data(proto, path)
    return proto


def _ort_version() -> str:
    import onnxruntime

    return onnxruntime.__version__


def _check_external_data(proto: onnx.ModelProto, path: Path) -> None:
    base = path.parent
    for tensor in all_tensors(proto.graph):
        if tensor.data_location != onnx_light.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        file = base / location
        if not location or not file.is_file():
            raise UsageError(
                f"{path}: weight '{tensor.name}' is stored in external file '{location}', which is missing "
                f"from {base}/; copy the .data file that came with the model next to it")
        if not file.resolve().is_relative_to(base.resolve()):
            raise UsageError(
                f"{path}: external file '{location}' resolves (through a link) to {file.resolve()}, outside "
                f"{base}/; copy the file there instead of linking it")
        if file.stat().st_nlink > 1:
            raise UsageError(
                f"{path}: external file '{location}' has {file.stat().st_nlink} hard links, which onnx-ir refuses "
                "to read (a guard against link attacks); give the model its own copy of the file")
        try:
            offset, length = (int(info.get(key) or 0) for key in ("offset", "length"))
        except ValueError:
            offset = length = -1
        if offset < 0 or length < 0:
            raise UsageError(
                f"{path}: weight '{tensor.name}' has external-data offset {info.get('offset')!r} and length "
                f"{info.get('length')!r}, which are not byte counts; the model file is corrupt: export it again")
        if length == 0:  # no length recorded: what the dims need (graph_check refused negative dims already)
            length = onnx_light.byte_count(tensor) or 0
        end = offset + length
        if file.stat().st_size < end:
            raise UsageError(
                f"{path}: external file '{location}' is truncated ({file.stat().st_size} bytes, weight "
                f"'{tensor.name}' needs {end}); copy it again from the source")


def input_names(proto: onnx.ModelProto) -> list[str]:
    """The graph inputs a caller feeds, in order: graph inputs that are not initializers (old IR versions list
    initializers as inputs too)."""
    initializers = {t.name for t in proto.graph.initializer}
    return [v.name for v in proto.graph.input if v.name not in initializers]


def all_tensors(graph: onnx.GraphProto):
    """Every TensorProto of `graph`: initializers and tensor attributes, subgraphs included."""
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from all_tensors(attr.g)
            for sub in attr.graphs:
                yield from all_tensors(sub)


def load(path: str | os.PathLike, in_memory: bool = False) -> ir.Model:
    """Load `path` (a file or stage folder) as an onnx-ir model, checked first as `read_proto` checks (through
    `read_light`: the checks need no second full parse of the file by the onnx package).

    External weights stay memory-mapped unless `in_memory` (needed when the model is serialised away
    from its folder). Nodes are sorted topologically (passes clone graphs, which needs that order).
    """
    path = model_path(path)
    read_light(path)
    collect_for(path)
    ir = _ir()
    try:
        model = ir.load(str(path))
        if in_memory:
            model = ir.external_data.load_to_model(model)
    except (OSError, ValueError, DecodeError, ir.serde.SerdeError) as err:
        raise UsageError(f"{path} is not a readable ONNX model ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''})") from None
    model.graph.sort()
    return model


def has_external_data(path: str | os.PathLike) -> bool:
    """Whether the model file at `path` keeps any weight in an external file."""
    proto = onnx_light.parse(model_path(path).read_bytes())
    return any(t.data_location == onnx_light.EXTERNAL for t in all_tensors(proto.graph))


def collect_for(src: str | os.PathLike | ir.Model | onnx.ModelProto) -> None:
    """A full garbage collection before `src` is loaded, when `src` is large (>= COLLECT_THRESHOLD).

    A dropped onnx-ir model is full of reference cycles and keeps its weights until the next cyclic
    collection, so loading a large model next to one could hold two copies of the weights. Small models
    skip it: a full collection costs 0.1-1 s in a process with a large heap (torch imported), which a
    loop over small models (the outlier check's one-MatMul models, surgery on detectors, the tests) paid
    at every load.
    """
    if is_ir_model(src):
        size = weight_bytes(src)
    elif is_model_proto(src):
        size = sum(t.ByteSize() for t in src.graph.initializer)
    else:
        path = Path(src) / MODEL_FILE if Path(src).is_dir() else Path(src)
        # the model file and its external data (`NAME.data`, or `NAME_data` in packages); none when missing
        size = sum(f.stat().st_size for f in path.parent.glob(path.name + "*") if f.is_file())
    if size >= COLLECT_THRESHOLD:
        release_memory()


def release_memory() -> None:
    """A full garbage collection, then the freed heap handed back to the OS (glibc's malloc_trim; a no-op
    elsewhere). Weights of a few MiB live in the heap, not in their own mappings (glibc raises its mmap
    threshold to 32 MiB after the first large free), so without the trim a dropped model's weights stay in
    the process's RSS while ORT loads its own copy."""
    gc.collect()
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


_LIBC = _libc()


def weight_bytes(model: ir.Model) -> int:
    """Total bytes of the initializers of the main graph."""
    return sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)


def declare_domains(model: ir.Model) -> None:
    """Add an opset import (version 1) for every custom domain a node uses but the model does not declare.

    ORT's transformer optimizer adds `com.microsoft` nodes without importing the domain: ONNX Runtime runs
    such a model, but ONNX's shape inference (which `quantize_dynamic` runs) refuses it ("No opset import
    for domain com.microsoft").
    """
    for node in _ir().traversal.RecursiveGraphIterator(model.graph):
        if node.domain not in ("", "ai.onnx") and node.domain not in model.opset_imports:
            model.opset_imports[node.domain] = 1


def save(model: ir.Model, path: str | os.PathLike, external: bool | None = None) -> dict[str, int]:
    """Write `model` to `path` at IR version <= MAX_IR_VERSION; weights go to `<name>.data` beside it
    when `external` (None: when they exceed EXTERNAL_DATA_THRESHOLD). Returns {file name: bytes}."""
    path = Path(path)
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)
    declare_domains(model)
    if external is None:
        external = weight_bytes(model) > EXTERNAL_DATA_THRESHOLD
    data = path.with_name(path.name + ".data")
    if external:
        _ir().save(model, str(path), external_data=data.name, size_threshold_bytes=1024)
    else:
        _ir().save(model, str(path))
    return file_sizes(path)


def save_proto(proto: onnx.ModelProto, path: str | os.PathLike) -> dict[str, int]:
    """Write a ModelProto (the torch exporters' output) with the same rules as `save`."""
    import onnx

    path = Path(path)
    proto.ir_version = min(proto.ir_version, MAX_IR_VERSION)
    weights = sum(t.ByteSize() for t in proto.graph.initializer)
    if weights > EXTERNAL_DATA_THRESHOLD:
        data = path.with_name(path.name + ".data")
        onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=data.name, size_threshold=1024)
    else:
        onnx.save_model(proto, str(path))
    return file_sizes(path)


def file_sizes(model_file: str | os.PathLike) -> dict[str, int]:
    """{name: bytes} of a model file and its external data file (if any)."""
    model_file = Path(model_file)
    files = [model_file, model_file.with_name(model_file.name + ".data")]
    return {f.name: f.stat().st_size for f in files if f.exists()}


def copy_model(src: str | os.PathLike, dst_dir: Path, name: str, data_name: str | None = None) -> Path:
    """Copy the model file `src` and its external data into `dst_dir` as `name` (+ `name`.data).

    A single external data file is renamed to `data_name` (default `<name>.data`; release packages
    use transformers.js' `<name>_data`) and the references are rewritten; with several files each
    keeps its relative name.
    """
    import onnx

    data_name = data_name or f"{name}.data"
    src = Path(src)
    proto = onnx.load(str(src), load_external_data=False)
    external = [t for t in all_tensors(proto.graph) if t.data_location == onnx_light.EXTERNAL]
    locations = sorted({e.value for t in external for e in t.external_data if e.key == "location"})
    if len(locations) == 1:
        shutil.copyfile(src.parent / locations[0], dst_dir / data_name)
        for tensor in external:
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = data_name
        onnx.save(proto, str(dst_dir / name))
        return dst_dir / name
    for location in locations:
        target = dst_dir / location
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src.parent / location, target)
    shutil.copyfile(src, dst_dir / name)
    return dst_dir / name


def metadata_of(proto: onnx.ModelProto) -> dict[str, str]:
    """A model's metadata_props as {key: value}."""
    return {p.key: p.value for p in proto.metadata_props}


def metadata(path: str | os.PathLike) -> dict[str, str]:
    """The model's metadata_props, read (after `read_proto`'s checks) without loading weights or onnx."""
    return metadata_of(read_light(path))


def write_json(path: str | os.PathLike, data: dict) -> None:
    """Write `data` as indented JSON to `path` (through a temporary file and a rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def to_proto(model: ir.Model) -> onnx.ModelProto:
    """Serialise with weights inline, for tools that take a ModelProto (ORT's optimizer and quantizers).

    Only for models under protobuf's 2 GiB limit: UsageError past it, never a protobuf traceback.
    """
    ir = _ir()
    inline = sum(v.const_value.nbytes for v in model.graph.initializers.values()
                 if v.const_value is not None and not isinstance(v.const_value, ir.ExternalTensor))
    if inline >= 2**31 - 2**24:  # external references (e.g. weights held out of a pass) serialise as a few bytes
        raise UsageError(f"the model has {inline / 2**30:.2f} GiB of weights, past protobuf's 2 GiB "
                         "limit for an in-memory model; this step cannot take it")
    proto = ir.serde.serialize_model(model)
    proto.ir_version = min(proto.ir_version, MAX_IR_VERSION)
    return proto
