"""A stage's model outputs at its validation layouts, kept beside the model so the next stage need not rerun it.

Every stage of `make export` runs its input model at the same validation layouts (the same seeded inputs)
to get a reference, and at 2B dims one such run costs about a minute. The stage that saved a model has
already run it there: it writes those outputs to OUT/outputs.npz, and the next stage takes them as its
reference when, and only when, both fingerprints match what it would run:
- the model: sha256 over model.onnx and its external data file (about 1 s per GB);
- the inputs: sha256 over every feed's names, dtypes, shapes and bytes.
Otherwise (another model, other layouts, no file, a file of another version) it runs the model itself.
The optimize stage also keeps its outputs on the held-out photos every quantize stage compares on
(`quantize.photo_check`, PHOTOS_FILE): the same file format and fingerprints under another name.

File: numpy .npz with `model` and `inputs` (hex digests), `version`, and `o/<layout>/<output>` float arrays
(ONNX Runtime's outputs in the model's output order). Not part of a release package.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

import numpy as np

FILE = "outputs.npz"
#: The outputs on the held-out photos (quantize/photo_check.py), kept by the optimize stage.
PHOTOS_FILE = "photo-outputs.npz"
VERSION = 1
_CHUNK = 1 << 24


def model_digest(model_file: str | os.PathLike) -> str:
    """sha256 over model.onnx and, when present, model.onnx.data (in that order)."""
    model_file = Path(model_file)
    digest = hashlib.sha256()
    for path in (model_file, model_file.with_name(model_file.name + ".data")):
        if path.exists():
            digest.update(path.name.encode() + b"\0")
            with open(path, "rb") as f:
                while chunk := f.read(_CHUNK):
                    digest.update(chunk)
    return digest.hexdigest()


def inputs_digest(inputs: list[dict[str, np.ndarray]]) -> str:
    """sha256 over every feed (names, dtypes, shapes, bytes), in order."""
    digest = hashlib.sha256()
    for feed in inputs:
        for name, array in feed.items():
            array = np.ascontiguousarray(array)
            digest.update(f"{name}|{array.dtype.str}|{array.shape}\0".encode())
            digest.update(array.tobytes())
        digest.update(b"\1")
    return digest.hexdigest()


def write(folder: str | os.PathLike, model_file: str | os.PathLike, inputs: list[dict[str, np.ndarray]],
          outputs: list[list[np.ndarray]], name: str = FILE) -> Path:
    """Write folder/`name` (FILE or PHOTOS_FILE): `outputs` (per feed of `inputs`, in output order) of the model at
    `model_file`."""
    folder = Path(folder)
    arrays = {f"o/{i}/{j}": np.asarray(o) for i, produced in enumerate(outputs) for j, o in enumerate(produced)}
    fd, partial = tempfile.mkstemp(prefix=f".{name}.", suffix=".npz", dir=folder)
    os.close(fd)
    with open(partial, "wb") as f:
        np.savez(f, model=model_digest(model_file), inputs=inputs_digest(inputs), version=VERSION,
                 count=len(outputs), **arrays)
    os.replace(partial, folder / name)
    return folder / name


def read(model_file: str | os.PathLike, inputs: list[dict[str, np.ndarray]],
         name: str = FILE) -> list[list[np.ndarray]] | None:
    """The outputs kept beside `model_file` (in its folder's `name`: FILE or PHOTOS_FILE) for exactly these `inputs`
    and this model's bytes, else None."""
    path = Path(model_file).with_name(name)
    if not path.is_file():
        return None
    try:
        with np.load(path, allow_pickle=False) as data:
            if int(data["version"]) != VERSION or int(data["count"]) != len(inputs):
                return None
            if str(data["inputs"]) != inputs_digest(inputs) or str(data["model"]) != model_digest(model_file):
                return None
            outputs: list[list[np.ndarray]] = []
            for i in range(len(inputs)):
                names = sorted((k for k in data.files if k.startswith(f"o/{i}/")), key=lambda k: int(k.rsplit("/", 1)[1]))
                outputs.append([data[k] for k in names])
            return outputs
    except (OSError, ValueError, KeyError):
        return None
