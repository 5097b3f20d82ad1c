"""Opening a release package: a `dist/NAME/` folder as is, or a `dist/NAME.tar.gz` unpacked safely.

A tarball is read in full and every member checked before anything is written: only regular files and
folders under one top folder, with relative names that never climb out (`..`) — absolute names,
symbolic and hard links, devices and FIFOs are refused, naming the member. Files are then written
into a fresh temporary folder, so nothing can land outside it, and removed when the caller is done.
"""

from __future__ import annotations

import contextlib
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from core.errors import UsageError


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
    tmp = Path(tempfile.mkdtemp(prefix="vision-onnx-package-"))
    try:
        yield unpack(path, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
