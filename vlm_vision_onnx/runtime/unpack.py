"""Opening a release package: a `dist/NAME/` folder as is, or a `dist/NAME.tar.gz` unpacked safely.

A tarball is read in full and every member checked before anything is written: only regular files and
folders under one top folder, with relative names that never climb out (`..`) — absolute names,
symbolic and hard links, devices and FIFOs are refused, naming the member. Sizes are bounded by what the
package declares: every file must be one its `manifest.json` records (`files`), of exactly the recorded size
(the manifest itself, `README.md` and `SHA256SUMS` at most `DESCRIPTION_LIMIT` bytes), and all of them must fit
the free space, so a small tarball cannot write gigabytes before its checksums are compared. Files are then
written into a fresh temporary folder, so nothing can land outside it, and removed when the caller is done.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.staging import remove_dead

MANIFEST, SUMS, CARD = "manifest.json", "SHA256SUMS", "README.md"
#: The files describing a package (not in its manifest's `files`), and the most bytes each may hold.
DESCRIPTIONS = (MANIFEST, CARD, SUMS)
DESCRIPTION_LIMIT = 64 * 2**20
#: The name start of a tarball's temporary folder (+ PID-xxxx: one of a killed run is removed by the next).
UNPACKED = "vision-onnx-package-"


class ArchiveError(UsageError):
    """The tarball is unsafe (a member that could write outside the target) or unreadable."""


def _kind(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "a symbolic link"
    if member.islnk():
        return "a hard link"
    if member.ischr() or member.isblk():
        return "a device file"
    if member.isfifo():
        return "a FIFO"
    return f"a tar member of type {member.type!r}"


def check_members(members: list[tarfile.TarInfo], archive: Path) -> str:
    """Refuse any unsafe member (ArchiveError naming it); return the one top folder's name."""
    tops = set()
    seen = set()
    for member in members:
        name = member.name
        path = PurePosixPath(name)
        if name.startswith("/") or path.is_absolute() or (len(name) > 1 and name[1] == ":"):
            raise ArchiveError(f"{archive}: member {name!r} has an absolute path; refusing to unpack")
        if ".." in path.parts:
            raise ArchiveError(f"{archive}: member {name!r} climbs out of the package (..); refusing to unpack")
        if not (member.isreg() or member.isdir()):
            target = f" -> {member.linkname!r}" if member.issym() or member.islnk() else ""
            raise ArchiveError(f"{archive}: member {name!r}{target} is {_kind(member)}, not a regular file "
                               "or folder; refusing to unpack")
        parts = [p for p in path.parts if p not in ("", ".")]
        if not parts:
            continue
        if "\\" in name or "\0" in name:
            raise ArchiveError(f"{archive}: member {name!r} has a backslash or NUL in its name; refusing to unpack")
        key = "/".join(parts)
        if key in seen and member.isreg():
            raise ArchiveError(f"{archive}: member {name!r} appears twice; refusing to unpack")
        seen.add(key)
        tops.add(parts[0])
        if len(parts) == 1 and member.isreg():
            raise ArchiveError(f"{archive}: member {name!r} is not inside the package's top folder; "
                               "a package tarball holds one folder NAME/")
    if len(tops) != 1:
        raise ArchiveError(f"{archive}: a package tarball holds exactly one top folder, found "
                           f"{sorted(tops) or 'none'}")
    return tops.pop()


def _relative(member: tarfile.TarInfo) -> str:
    """The member's path inside the package's top folder."""
    return "/".join([p for p in PurePosixPath(member.name).parts if p not in ("", ".")][1:])


def check_sizes(tar: tarfile.TarFile, members: list[tarfile.TarInfo], archive: Path, dest: Path) -> None:
    """Refuse (ArchiveError) any file the manifest does not declare, or of another size than declared, and a
    package larger than the free space at `dest` (see the module docstring)."""
    files = {_relative(m): m for m in members if m.isreg()}
    manifest = files.get(MANIFEST)
    if manifest is None:
        raise ArchiveError(f"{archive}: holds no {MANIFEST}, which declares the package's files and sizes; refusing "
                           "to unpack")
    for name in DESCRIPTIONS:
        if name in files and files[name].size > DESCRIPTION_LIMIT:
            raise ArchiveError(f"{archive}: {name} holds {files[name].size:,} bytes, more than a package's "
                               f"{DESCRIPTION_LIMIT:,}; refusing to unpack")
    try:
        records = json.loads(tar.extractfile(manifest).read()).get("files")
        declared = {path: record["size"] for path, record in records.items()}
        if not all(isinstance(v, int) and v >= 0 for v in declared.values()):
            raise TypeError
    except (ValueError, AttributeError, TypeError, KeyError):
        raise ArchiveError(f"{archive}: {MANIFEST} does not declare the package's files with their sizes; refusing "
                           "to unpack") from None
    for path, member in files.items():
        if path in DESCRIPTIONS:
            continue
        if path not in declared:
            raise ArchiveError(f"{archive}: member {member.name!r} is not a file {MANIFEST} declares; refusing to "
                               "unpack")
        if member.size != declared[path]:
            raise ArchiveError(f"{archive}: member {member.name!r} holds {member.size:,} bytes, {MANIFEST} declares "
                               f"{declared[path]:,}; refusing to unpack")
    total = sum(m.size for m in files.values())
    free = shutil.disk_usage(dest).free
    if total > free:
        raise ArchiveError(f"{archive}: the package holds {total:,} bytes and {dest} has {free:,} free; free some "
                           "space (or set TMPDIR to a larger disk)")


def unpack(archive: str | Path, dest: str | Path) -> Path:
    """Unpack the package tarball `archive` into the empty folder `dest`; return `dest/NAME`.

    Raises ArchiveError (nothing written) for an unsafe member, and ArchiveError for a corrupt or
    truncated archive (the partial output is removed).
    """
    archive, dest = Path(archive), Path(dest)
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = tar.getmembers()
            top = check_members(members, archive)
            check_sizes(tar, members, archive, dest)
            try:
                for member in members:
                    target = dest.joinpath(*[p for p in PurePosixPath(member.name).parts if p not in ("", ".")])
                    if member.isdir():
                        target.mkdir(parents=True, exist_ok=True)
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    source = tar.extractfile(member)
                    with source, open(target, "xb") as out:  # "x": never through an existing file or link
                        shutil.copyfileobj(source, out, 1 << 20)
            except BaseException:
                shutil.rmtree(dest / top, ignore_errors=True)
                raise
    except (tarfile.TarError, EOFError, zlib.error, OSError) as err:
        if isinstance(err, FileNotFoundError) and not archive.exists():
            raise UsageError(f"package {archive} does not exist") from None
        raise ArchiveError(f"{archive}: not a readable .tar.gz package ({type(err).__name__}: "
                           f"{str(err) or 'truncated'})") from None
    return dest / top


def inside(folder: Path, relative, what: str) -> Path:
    """`folder/relative` for a path a package's manifest names; UsageError when it is not a relative path that
    stays inside the package (absolute, `..`, a link pointing out), so no file of the system is ever read for it."""
    if not isinstance(relative, str) or not relative:
        raise UsageError(f"{folder}: {what} names {relative!r}, not a file path of the package; build the package "
                         "again")
    pure = PurePosixPath(relative)
    resolved = (folder / relative).resolve()
    if pure.is_absolute() or relative.startswith("\\") or ".." in pure.parts or (len(relative) > 1 and relative[1] == ":") \
            or not resolved.is_relative_to(folder.resolve()):
        raise UsageError(f"{folder}: {what} names {relative!r}, outside the package; a package names its files "
                         "relative to its folder: build or unpack the package again")
    return folder / relative


def sha256(path: Path) -> str:
    """The sha256 of a file, read in 4 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()


def check_recorded(folder: Path, path: Path, digest: str | None = None) -> None:
    """UsageError when the package file `path` differs from what the package's SHA256SUMS records for it (`digest`:
    its sha256 when already known). For the files handed to OpenVINO, whose ONNX reader ends the process on some
    malformed graphs (found by tools/fuzz: a node's op type changed to Conv): a file that is not what was packaged
    is refused before it reads it. A package without SHA256SUMS, or without a line for the file, is not checked
    here (`runtime verify` says what is missing)."""
    sums = folder / SUMS
    if not sums.is_file():
        return
    relative = path.relative_to(folder).as_posix()
    recorded = dict(line.split("  ", 1)[::-1] for line in sums.read_text(errors="replace").splitlines() if "  " in line)
    if relative not in recorded:
        return
    actual = digest or sha256(path)
    if recorded[relative] != actual:
        raise UsageError(f"{path} is not the file the package recorded (sha256 {actual}, {SUMS} records "
                         f"{recorded[relative]}): the package is corrupt or was edited; `python -m runtime verify "
                         f"{folder}` says more")


def is_tarball(path: Path) -> bool:
    return path.name.endswith((".tar.gz", ".tgz", ".tar"))


@contextlib.contextmanager
def opened(path: str | Path) -> Iterator[Path]:
    """Yield the package folder of `path`: the folder itself, or the tarball unpacked into a temporary
    folder that is removed afterwards. UsageError when `path` is neither."""
    path = Path(path)
    if path.is_dir():
        yield path
        return
    if not path.exists():
        raise UsageError(f"package {path} does not exist (give dist/NAME or dist/NAME.tar.gz)")
    if not is_tarball(path):
        raise UsageError(f"package {path} is a file but not a .tar.gz (give dist/NAME or dist/NAME.tar.gz)")
    remove_dead(Path(tempfile.gettempdir()), re.escape(UNPACKED))  # packages unpacked by killed runs
    tmp = Path(tempfile.mkdtemp(prefix=f"{UNPACKED}{os.getpid()}-"))
    try:
        yield unpack(path, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
