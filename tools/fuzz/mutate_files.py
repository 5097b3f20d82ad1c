"""Mutators of the other files users point commands at: JSON and YAML documents (manifests, reports, processor and
model configs), package folders and tarballs, images and frame folders. Each edits files under a case's folder in
place and returns a short description."""

from __future__ import annotations

import io
import json
import os
import random
import struct
import tarfile
import zlib
from pathlib import Path

import numpy as np
import yaml
from PIL import Image

from tools.fuzz import mutate_bytes

#: Values that are wrong in most places a document holds a value.
ODD_VALUES = [None, "", "x", -1, 0, 2**63, 1e308, float("nan"), [], {}, [1, 2, 3], {"a": 1}, True, "../../etc/passwd",
              "/dev/zero", "a" * 5000]


def _paths(doc, prefix=()):
    """Every (path of keys) in a JSON-like document."""
    if isinstance(doc, dict):
        for key, value in doc.items():
            yield (*prefix, key)
            yield from _paths(value, (*prefix, key))
    elif isinstance(doc, list):
        for i, value in enumerate(doc[:20]):
            yield (*prefix, i)
            yield from _paths(value, (*prefix, i))


def _parent(doc, path):
    for key in path[:-1]:
        doc = doc[key]
    return doc


def mutate_document(doc, rng: random.Random) -> tuple[object, str]:
    """A value replaced by an odd one, a key removed, an unknown key added, or the document's type changed."""
    paths = list(_paths(doc))
    choice = rng.randrange(5)
    if not paths or choice == 4:
        return rng.choice([[], "text", 7, None, {"unknown": 1}]), "the document's type changed"
    path = rng.choice(paths)
    parent = _parent(doc, path)
    if choice == 0 and isinstance(parent, dict):
        del parent[path[-1]]
        return doc, f"removed {'/'.join(map(str, path))}"
    if choice == 1 and isinstance(parent, dict):
        parent[f"fuzz_{rng.randrange(100)}"] = rng.choice(ODD_VALUES)
        return doc, f"unknown key beside {'/'.join(map(str, path))}"
    value = rng.choice(ODD_VALUES)
    current = parent[path[-1]]
    if isinstance(current, (int, float)) and not isinstance(current, bool) and rng.random() < 0.5:
        value = rng.choice([0, -current, current * 10**6, 10**12, -(10**12)])
    parent[path[-1]] = value
    return doc, f"{'/'.join(map(str, path))} = {str(value)[:24]!r}"


def mutate_json(path: Path, rng: random.Random) -> str:
    if rng.random() < 0.2:
        data, name = mutate_bytes.mutate(path.read_bytes(), rng)
        path.write_bytes(data)
        return f"{path.name}: bytes {name}"
    doc, what = mutate_document(json.loads(path.read_text()), rng)
    path.write_text(json.dumps(doc, allow_nan=True))
    return f"{path.name}: {what}"


def mutate_yaml(path: Path, rng: random.Random) -> str:
    choice = rng.random()
    if choice < 0.15:
        data, name = mutate_bytes.mutate(path.read_bytes(), rng)
        path.write_bytes(data)
        return f"{path.name}: bytes {name}"
    if choice < 0.25:  # what must never run: a tag that asks for a Python object
        path.write_text(path.read_text() + "\nexploit: !!python/object/apply:os.system ['touch /tmp/fuzz-pwned']\n")
        return f"{path.name}: a python/object tag"
    doc, what = mutate_document(yaml.safe_load(path.read_text()), rng)
    path.write_text(yaml.safe_dump(doc))
    return f"{path.name}: {what}"


# ---------------------------------------------------------------- packages
def mutate_package(folder: Path, rng: random.Random, mutate_model) -> str:
    """One edit of a package folder: a file removed, swapped, truncated, grown, replaced by a link, a JSON file
    mutated, or an ONNX file mutated (`mutate_model(path, rng)`)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not p.is_symlink())
    target = rng.choice(files)
    name = target.relative_to(folder)
    choice = rng.randrange(8)
    if choice == 0:
        target.unlink()
        return f"{name} removed"
    if choice == 1 and len(files) > 1:
        other = rng.choice([f for f in files if f != target])
        data = target.read_bytes()
        target.write_bytes(other.read_bytes())
        other.write_bytes(data)
        return f"{name} swapped with {other.relative_to(folder)}"
    if choice == 2:
        target.write_bytes(mutate_bytes.truncate(target.read_bytes(), rng))
        return f"{name} truncated"
    if choice == 3:
        with open(target, "ab") as file:  # grown: sparse where the file system allows
            file.seek(rng.choice([1, 2**20, 2**33]), os.SEEK_END)
            file.write(b"\0")
        return f"{name} grown"
    if choice == 4:
        target.unlink()
        os.symlink(rng.choice(["/etc/hostname", "/dev/zero", "../../../../etc/passwd", "/nonexistent"]), target)
        return f"{name} replaced by a link"
    json_files = [f for f in files if f.suffix == ".json"]
    if choice in (5, 6) and json_files:
        return mutate_json(rng.choice(json_files), rng)
    models = [f for f in files if f.suffix == ".onnx"]
    if models:
        return mutate_model(rng.choice(models), rng)
    return mutate_json(rng.choice(json_files), rng) if json_files else f"{name}: unchanged"


def evil_tarball(path: Path, package: Path, rng: random.Random) -> str:
    """A tarball of the package with one hostile member: a path out of the archive, an absolute path, a link out,
    a device, a huge declared size, or a second top folder."""
    choice = rng.randrange(6)
    name = package.name
    with tarfile.open(path, "w:gz") as tar:
        tar.add(package, arcname=name)
        info = tarfile.TarInfo()
        if choice == 0:
            info.name, data = f"{name}/../../fuzz-escaped.txt", b"escaped"
        elif choice == 1:
            info.name, data = "/tmp/fuzz-absolute.txt", b"absolute"
        elif choice == 2:
            info.name, info.type, info.linkname, data = f"{name}/onnx/evil.onnx", tarfile.SYMTYPE, "/etc/passwd", b""
        elif choice == 3:
            info.name, info.type, info.devmajor, info.devminor, data = f"{name}/dev", tarfile.CHRTYPE, 1, 5, b""
        elif choice == 4:
            info.name, data = "other/file.txt", b"second top folder"
        else:
            info.name, data = f"{name}/manifest.json", b"{}"  # a second copy of a member
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data) if data else None)
    return f"tarball with a hostile member ({info.name})"


# ---------------------------------------------------------------- images and frames
def _png_with_size(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height (valid CRCs) over one tiny IDAT."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
            + chunk(b"IEND", b""))


def mutate_image(path: Path, rng: random.Random) -> tuple[Path, str]:
    """The image at `path` mutated (bytes, a huge declared size, an odd mode or format, an extreme shape); returns
    the path now holding it (its suffix may change) and a description."""
    choice = rng.randrange(7)
    if choice <= 1:
        data, name = mutate_bytes.mutate(path.read_bytes(), rng)
        path.write_bytes(data)
        return path, f"bytes {name}"
    if choice == 2:
        out = path.with_suffix(".png")
        size = rng.choice([(2**31 - 1, 1), (100_000, 100_000), (0, 10), (1, 2**31 - 1)])
        path.unlink()
        out.write_bytes(_png_with_size(*size))
        return out, f"PNG declaring {size[0]}x{size[1]}"
    image = Image.open(path)
    image.load()
    if choice == 3:
        mode = rng.choice(["1", "L", "LA", "P", "PA", "I", "I;16", "F", "CMYK", "YCbCr", "RGBA", "HSV"])
        out = path.with_suffix(rng.choice([".png", ".tiff", ".webp", ".gif", ".bmp", ".jpg"]))
        try:
            converted = image.convert(mode) if mode not in ("I;16",) else image.convert("I").convert("I;16")
            converted.save(out)
        except (OSError, ValueError, KeyError):  # a mode the format cannot hold: the image stays as it was
            if out != path:
                out.unlink(missing_ok=True)
            return path, f"mode {mode} not writable as {out.suffix}"
        if out != path:
            path.unlink()
        return out, f"mode {mode} as {out.suffix}"
    if choice == 4:
        # extreme shapes, not huge ones: a valid huge photo is not malformed (its cost is the model's work)
        width, height = rng.choice([(1, 1), (1, 3000), (3000, 1), (2, 401), (401, 2)])
        path.unlink()
        out = path.with_suffix(".png")
        Image.fromarray(np.full((height, width, 3), 90, np.uint8)).save(out)
        return out, f"{width}x{height}"
    if choice == 5:
        frames = [image.convert("RGB").resize((max(1, image.width // (i + 1)), max(1, image.height // (i + 1))))
                  for i in range(3)]
        out = path.with_suffix(rng.choice([".gif", ".tiff"]))
        path.unlink()
        frames[0].save(out, save_all=True, append_images=frames[1:])
        return out, f"{len(frames)} frames in one {out.suffix}"
    out = path.with_suffix(rng.choice([".png", ".jpg", ".txt", ".onnx"]))
    path.rename(out)
    return out, f"renamed to {out.suffix}"


def mutate_frames(folder: Path, rng: random.Random) -> str:
    """A video folder (frames) with no frames, one frame, frames of other sizes, a broken frame, or a subfolder."""
    frames = sorted(folder.iterdir())
    choice = rng.randrange(5)
    if choice == 0:
        for frame in frames:
            frame.unlink()
        return "no frames"
    if choice == 1:
        for frame in frames[1:]:
            frame.unlink()
        return "one frame"
    if choice == 2:
        target = rng.choice(frames)
        Image.open(target).convert("RGB").resize((rng.randint(1, 500), rng.randint(1, 500))).save(target)
        return f"{target.name} of another size"
    if choice == 3:
        target = rng.choice(frames)
        _, what = mutate_image(target, rng)
        return f"{target.name}: {what}"
    (folder / "sub").mkdir()
    (folder / "sub" / "x.png").write_bytes(frames[0].read_bytes())
    return "a subfolder among the frames"
