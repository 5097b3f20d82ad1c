"""What the package checks share (runtime/verify.py, verify_static.py, verify_openvino.py): the failure they raise
and how a file the manifest records is checked and read. Its own module, so that each check imports it and none
imports another."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vlm_vision_onnx.core import onnx_io, onnx_light, session
from vlm_vision_onnx.core.errors import CheckFailed, UsageError
from vlm_vision_onnx.families import check_graph_inputs, family
from vlm_vision_onnx.runtime.unpack import MANIFEST


def fail(file: str, reason: str):
    raise CheckFailed(f"{file}: {reason}")


def io_records(values) -> list[dict]:
    """[{name, dtype, dims}] of graph inputs or outputs; a symbolic dim is its name, an unknown one None."""
    records = []
    for value in values:
        tensor = value.type.tensor_type
        dims = [d.dim_param if d.HasField("dim_param") else d.dim_value if d.HasField("dim_value") else None
                for d in tensor.shape.dim]
        records.append({"name": value.name, "dtype": onnx_light.DTYPE_NAMES.get(tensor.elem_type, "undefined"),
                        "dims": dims})
    return records


def opsets(proto) -> dict[str, int]:
    """{domain: version}, `ai.onnx` for the default domain, sorted by domain."""
    return {(o.domain or "ai.onnx"): o.version for o in sorted(proto.opset_import, key=lambda o: o.domain)}


def check_file_records(manifest: dict, what: str, file: str, listed: list, recorded_size) -> None:
    """`what` (e.g. "variant 'int8'") names `file` and lists `listed`: each must be a file the manifest records,
    and `recorded_size` the bytes they hold together."""
    if file not in manifest["files"] or file not in listed:
        fail(MANIFEST, f"{what} names {file}, which the manifest does not record among its files")
    for path in listed:
        if path not in manifest["files"]:
            fail(MANIFEST, f"{what} lists {path}, which the manifest does not record")
    size = sum(manifest["files"][p]["size"] for p in listed)
    if recorded_size != size:
        fail(MANIFEST, f"{what} records {recorded_size} bytes, its files hold {size}")


def read_package_model(manifest: dict, folder: Path, file: str) -> tuple[onnx_light.ModelProto, dict[str, str]]:
    """The ONNX graph of a package file (no weights, parsed without onnx: `core.onnx_light`) and its metadata,
    which must name the manifest's family and model."""
    try:
        proto = onnx_io.read_light(folder / file)
    except UsageError as err:
        fail(file, f"does not load as ONNX ({err})")
    meta = {p.key: p.value for p in proto.metadata_props}
    for key in ("family", "model"):
        if meta.get(key) != manifest[key]:
            fail(file, f"the model's metadata says {key} {meta.get(key)!r}, manifest.json says {manifest[key]!r}: "
                       "the package mixes models (or the manifest was edited)")
    try:
        check_graph_inputs(family(manifest["family"]), proto.graph, file)
    except UsageError as err:
        fail(file, str(err).removeprefix(f"{file}: "))
    return proto, meta


def check_run(sess, feeds: dict, file: str, at: str, shapes: dict) -> None:
    """One run of a package model's session at `feeds` (`at`: where, e.g. "at 224x224"): it must run, give the
    output shapes the manifest records ({name: dims}) and finite values."""
    try:
        outputs = session.run(sess, feeds)
    except session.ORT_ERRORS as err:
        fail(file, f"fails {at}: {session.ort_error_line(err)}")
    got = {k: list(v.shape) for k, v in outputs.items()}
    if got != shapes:
        fail(file, f"{at} gives output shapes {got}, manifest.json records {shapes}")
    for name, value in outputs.items():
        if np.issubdtype(value.dtype, np.floating) and not np.isfinite(value).all():
            fail(file, f"{at} output {name} holds non-finite values")
