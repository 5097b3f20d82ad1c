"""Loading and writing models: clear errors on bad input, nothing half-written on failure.

`load` checks what usually goes wrong before any pass runs (not a file, not ONNX, external
weights missing) and raises `BadInput` with one line saying what is wrong and how to fix it; the
command line turns that into exit status 2.

Writes go to a temporary folder beside the destination (`Staged`); the files are renamed into place
only after the caller has verified the staged model by running it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Self

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

#: Above this many bytes of weights a model is written with external data even if its source was not.
EXTERNAL_DATA_THRESHOLD = 1 << 30


class BadInput(Exception):
    """Input the user must fix (bad file, bad option). One line; the CLI exits with status 2."""


class FixFailed(Exception):
    """A model that cannot be repaired as asked (e.g. data-dependent sizes to freeze): exit status 1."""


def read_proto(path: str | os.PathLike) -> onnx.ModelProto:
    """Parse the graph of `path` without loading external weights; check that those weights exist.

    Raises:
        BadInput: not a file, not an ONNX model, or external data missing / too short.
    """
    path = Path(path)
    if not path.is_file():
        raise BadInput(f"{path}: no such file")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except (DecodeError, RuntimeError, ValueError) as exc:
        raise BadInput(f"{path} is not an ONNX model (it does not parse as ONNX protobuf); give the path of a .onnx "
                       "file") from exc
    if not proto.HasField("graph") or proto.ir_version <= 0 or not (proto.graph.node or proto.graph.output):
        raise BadInput(f"{path} is not an ONNX model (no graph or IR version); give the path of a .onnx file")
    _check_external_data(proto, path)
    return proto


def _check_external_data(proto: onnx.ModelProto, path: Path) -> None:
    base = path.parent
    for tensor in _all_tensors(proto.graph):
        if tensor.data_location != onnx.TensorProto.EXTERNAL:
            continue
        info = {e.key: e.value for e in tensor.external_data}
        location = info.get("location", "")
        file = base / location
        if not location or not file.is_file():
            raise BadInput(
                f"{path}: weight '{tensor.name}' is stored in external file '{location}', which is missing "
                f"from {base}/; copy the .data file that came with the model next to it "
                "(models over 2 GB keep their weights outside the .onnx)"
            )
        if not file.resolve().is_relative_to(base.resolve()):
            raise BadInput(
                f"{path}: external file '{location}' resolves (through a link) to {file.resolve()}, outside "
                f"{base}/; copy the file there instead of linking it"
            )
        if file.stat().st_nlink > 1:
            raise BadInput(
                f"{path}: external file '{location}' has {file.stat().st_nlink} hard links, which onnx-ir refuses "
                "to read (a guard against link attacks); give the model its own copy of the file"
            )
        end = int(info.get("offset", 0)) + int(info.get("length", 0))
        if file.stat().st_size < end:
            raise BadInput(
                f"{path}: external file '{location}' is truncated ({file.stat().st_size} bytes, "
                f"weight '{tensor.name}' needs {end}); copy it again from the source"
            )


def _all_tensors(graph: onnx.GraphProto):
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("t"):
                yield attr.t
            yield from attr.tensors
            if attr.HasField("g"):
                yield from _all_tensors(attr.g)
            for sub in attr.graphs:
                yield from _all_tensors(sub)


def load(path: str | os.PathLike) -> ir.Model:
    """Load `path` as an onnx-ir model; external weights are memory-mapped, not read.

    Raises:
        BadInput: see `read_proto`.
    """
    read_proto(path)
    model = ir.load(str(path))
    model.graph.sort()  # passes clone graphs, which needs nodes in topological order
    return model


def has_external_data(path: str | os.PathLike) -> bool:
    """Whether the model file at `path` keeps any weight in an external file."""
    proto = onnx.load(str(path), load_external_data=False)
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in _all_tensors(proto.graph))


def weight_bytes(model: ir.Model) -> int:
    """Total bytes of the initializers of the main graph."""
    return sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)


def save(model: ir.Model, path: str | os.PathLike, external: bool | None = None) -> None:
    """Write `model` to `path`; weights go to `<name>.data` beside it when `external` (or when large)."""
    path = Path(path)
    if external is None:
        external = weight_bytes(model) > EXTERNAL_DATA_THRESHOLD
    ir.save(model, str(path), external_data=path.name + ".data" if external else None)


class Staged:
    """A temporary folder beside `out` where an artifact is written, then moved into place.

    Use as a context manager: on exit without `commit()` (an error, a failed verification) the
    folder is removed and nothing appears at `out`.

    Example::

        with Staged(out) as stage:
            save(model, stage.model_path)
            ...verify stage.model_path by running it...
            stage.commit()
    """

    def __init__(self, out: str | os.PathLike):
        self.out = Path(out)
        if self.out.is_dir():
            raise BadInput(f"{self.out} is a folder; give the output model's file name, e.g. {self.out}/model.onnx")
        try:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            self.dir = Path(tempfile.mkdtemp(prefix=f".{self.out.name}.", dir=self.out.parent))
        except OSError as exc:
            raise BadInput(f"cannot write to {self.out.parent}/ ({exc.strerror}); choose another OUT") from exc
        self.model_path = self.dir / self.out.name
        self._committed = False

    def __enter__(self) -> Self:
        return self

    def commit(self) -> None:
        """Move every staged file beside `out`; the model file last, so it never points at missing data."""
        files = sorted(self.dir.iterdir(), key=lambda p: p == self.model_path)
        for file in files:
            os.replace(file, self.out.parent / file.name)
        self._committed = True

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def copy_model(src: str | os.PathLike, dst_dir: Path, name: str) -> Path:
    """Copy the model file `src` and its external data into `dst_dir` as `name` (+ `name`.data).

    A single external data file is renamed to `<name>.data` (the references are rewritten); with
    several files each keeps its relative name.
    """
    src = Path(src)
    proto = onnx.load(str(src), load_external_data=False)
    external = [t for t in _all_tensors(proto.graph) if t.data_location == onnx.TensorProto.EXTERNAL]
    locations = sorted({e.value for t in external for e in t.external_data if e.key == "location"})
    if len(locations) == 1:
        shutil.copyfile(src.parent / locations[0], dst_dir / f"{name}.data")
        for tensor in external:
            for entry in tensor.external_data:
                if entry.key == "location":
                    entry.value = f"{name}.data"
        onnx.save(proto, str(dst_dir / name))
        return dst_dir / name
    for location in locations:
        target = dst_dir / location
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src.parent / location, target)
    shutil.copyfile(src, dst_dir / name)
    return dst_dir / name


def write_json(path: str | os.PathLike, data: dict) -> None:
    """Write `data` as indented JSON to `path` (through a temporary file and a rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)
