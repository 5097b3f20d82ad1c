"""A reproducible `.tar.gz` of a package folder: byte-identical for the same files.

Entries are sorted by name, under one top folder; every entry has the same mtime (SOURCE_DATE_EPOCH,
else 0), owner 0:0 with empty user and group names, mode 0644 for files and 0755 for folders; the
gzip header has mtime 0 and no file name. Only regular files and folders are packed.
"""

from __future__ import annotations

import gzip
import os
import tarfile
import tempfile
from pathlib import Path

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.staging import remove_stale, temp_prefix

COMPRESS_LEVEL = 6


def fixed_mtime() -> int:
    """SOURCE_DATE_EPOCH (the reproducible-builds convention) when set, else 0."""
    value = os.environ.get("SOURCE_DATE_EPOCH", "0")
    if not value.isdigit():
        raise UsageError(f"SOURCE_DATE_EPOCH must be a non-negative integer, got {value!r}")
    return int(value)


def _info(name: str, size: int, is_dir: bool, mtime: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = tarfile.DIRTYPE if is_dir else tarfile.REGTYPE
    info.size = 0 if is_dir else size
    info.mode = 0o755 if is_dir else 0o644
    info.mtime = mtime
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def entries(folder: Path) -> list[Path]:
    """Every file and folder under `folder`, sorted by their POSIX relative names; links are refused."""
    found = []
    for path in folder.rglob("*"):
        if path.is_symlink() or not (path.is_file() or path.is_dir()):
            raise UsageError(f"{path} is not a regular file or folder; a package holds only those")
        found.append(path)
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def write(folder: str | Path, out: str | Path, top: str | None = None) -> Path:
    """Pack `folder` as `top/...` (default: the folder's name) into `out` (written to a temp file beside
    it, renamed at the end). Returns `out`."""
    folder, out = Path(folder), Path(out)
    top = top or folder.name
    mtime = fixed_mtime()
    remove_stale(out)  # the temp file of a killed run
    fd, tmp_name = tempfile.mkstemp(prefix=temp_prefix(out.name), dir=out.parent)
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as raw, \
                gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0, compresslevel=COMPRESS_LEVEL) as gz, \
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            tar.addfile(_info(top, 0, True, mtime))
            for path in entries(folder):
                name = f"{top}/{path.relative_to(folder).as_posix()}"
                if path.is_dir():
                    tar.addfile(_info(name, 0, True, mtime))
                else:
                    with open(path, "rb") as data:
                        tar.addfile(_info(name, path.stat().st_size, False, mtime), data)
        tmp.chmod(0o644)
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out
