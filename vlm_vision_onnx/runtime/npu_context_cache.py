"""The compiled HTP graphs of `runtime embed --engine qnn`, kept between runs (docs/npu.md "In a package").

The QNN EP compiles a static model for the HTP each time a session opens it: minutes for a 2B bucket (360 s for
Qwen3-VL-2B's 448 x 448 in the simulator, bench/results/npu-2b.md). The session that compiles it here also writes
its EP context (`ep.context_enable=1`: a small ONNX model naming the binary beside it, `runtime.npu.session_options`)
into the cache, and the next run of the same file on the same HTP loads that instead.

An entry is `CACHE/KEY/` holding `model_ctx.onnx`, its binary and the marker file MARKER; KEY is the SHA-256 of the
model's files (the ONNX file and its external data), the HTP options, the precision and the onnxruntime and
onnxruntime-qnn versions, so another file, target or EP version never loads a stale graph. An entry is written to a
temporary folder beside it and renamed into place when complete; one that no longer loads is removed (only a folder
with the marker: the cache never removes what it did not write) and compiled again. `--context-cache DIR` picks
the folder (default DEFAULT: $XDG_CACHE_HOME/vlm-vision-onnx/qnn-context, else ~/.cache/...), `--no-context-cache`
compiles every run as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import onnxruntime as ort

from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.errors import CheckFailed, UsageError
from vlm_vision_onnx.core.session import ORT_ERRORS
from vlm_vision_onnx.core.staging import user_cache

DEFAULT = user_cache("qnn-context")
MARKER = ".vlm-vision-onnx-context"
CONTEXT = "model_ctx.onnx"
CHUNK = 1 << 24


def key(model: Path, options: dict[str, str], precision: str, qnn_version: str) -> str:
    """SHA-256 (hex) of the model's files' contents and the compile's settings (module docstring)."""
    digest = hashlib.sha256(json.dumps({"options": options, "precision": precision, "onnxruntime": ort.__version__,
                                        "onnxruntime_qnn": qnn_version}, sort_keys=True).encode())
    for name in sorted(onnx_io.file_sizes(model)):
        digest.update(name.encode())
        with open(model.parent / name, "rb") as f:
            while chunk := f.read(CHUNK):
                digest.update(chunk)
    return digest.hexdigest()


def open_cached(model: Path, cache: Path, entry_key: str, open_fn) -> tuple[object, str]:
    """(session, what happened) for `model` through the entry `cache/entry_key`: `open_fn(path, context)` opens a
    model on the HTP (writing its EP context to `context` when given)."""
    entry = cache / entry_key
    if (entry / MARKER).is_file() and (entry / CONTEXT).is_file():
        try:
            return open_fn(entry / CONTEXT, None), f"loaded the compiled graph kept in {entry}"
        except (CheckFailed, UsageError, *ORT_ERRORS):  # UsageError: ORT cannot load the kept context
            shutil.rmtree(entry, ignore_errors=True)  # ours (it has the marker) and unreadable: compile again
    cache.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{entry_key[:16]}-", dir=cache))
    try:
        session = open_fn(model, work / CONTEXT)
        if not (work / CONTEXT).is_file():
            return session, "compiled (the QNN EP wrote no context to keep)"
        (work / MARKER).write_text(json.dumps({"model": str(model)}) + "\n")
        try:
            work.rename(entry)
        except OSError:  # another run kept the same entry meanwhile: theirs stays
            return session, f"compiled (an entry for it appeared in {cache} meanwhile)"
        return session, f"compiled and kept in {entry}"
    finally:
        with contextlib.suppress(FileNotFoundError):
            shutil.rmtree(work)
