"""Load and save stage models, staged output folders and stage reports.

A stage folder holds `model.onnx` (+ `model.onnx.data` when the weights exceed 512 MiB) and
`report.json`. Outputs are written into a temp folder beside OUT and renamed at the end, so a failed
run never leaves a half-written artifact.
"""

import json
from pathlib import Path

import onnx
import onnx_ir as ir
from google.protobuf.message import DecodeError

from core.errors import UsageError

EXTERNAL_DATA_THRESHOLD = 512 * 1024 * 1024
# The highest IR version ONNX Runtime 1.31 loads (onnx 1.23 writes 12+ by default).
MAX_IR_VERSION = 10


def load(path: str | Path) -> ir.Model:
    """The model at `path` (a model.onnx file or a stage folder) as an onnx-ir model, weights in memory."""
    path = model_path(path)
    try:
        model = ir.load(str(path))
    except (OSError, ValueError, DecodeError) as err:
        raise UsageError(f"{path} is not a readable ONNX model ({type(err).__name__}: "
                         f"{str(err).splitlines()[0] if str(err) else ''})") from None
    # Weights into memory: passes serialize the model (ORT's optimizer, sessions) away from its folder.
    return ir.external_data.load_to_model(model)


def model_path(path: str | Path) -> Path:
    """`path` itself if it is a file, else `path/model.onnx`; UsageError when neither exists."""
    path = Path(path)
    if path.is_dir():
        path = path / "model.onnx"
    if not path.is_file():
        raise UsageError(f"input model {path} not found (give a model.onnx file or a stage folder)")
    return path


def to_proto(model: ir.Model) -> onnx.ModelProto:
    """Serialize with weights inline (the caller keeps the result under protobuf's 2 GiB limit)."""
    proto = ir.serde.serialize_model(model)
    proto.ir_version = min(proto.ir_version, MAX_IR_VERSION)
    return proto


def save(model: ir.Model, path: Path) -> dict[str, int]:
    """Write `model` to `path` (external `path.name + '.data'` when large). Returns {file name: bytes}."""
    model.ir_version = min(model.ir_version, MAX_IR_VERSION)
    weights = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    data = path.with_name(path.name + ".data")
    if weights > EXTERNAL_DATA_THRESHOLD:
        ir.save(model, str(path), external_data=data.name, size_threshold_bytes=1024)
        return {path.name: path.stat().st_size, data.name: data.stat().st_size}
    ir.save(model, str(path))
    return {path.name: path.stat().st_size}


def file_sizes(model_file: Path) -> dict[str, int]:
    """Bytes of model.onnx and its external data file (if any)."""
    files = [model_file, model_file.with_name(model_file.name + ".data")]
    return {f.name: f.stat().st_size for f in files if f.exists()}


def read_report(model_file: Path) -> dict:
    """The report.json beside a model file, or {} when there is none."""
    report = Path(model_file).with_name("report.json")
    return json.loads(report.read_text()) if report.exists() else {}


def write_report(folder: Path, report: dict) -> None:
    (folder / "report.json").write_text(json.dumps(report, indent=2) + "\n")
