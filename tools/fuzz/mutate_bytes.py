"""Byte-level mutators: flips, truncation, splices, insertions (any file: ONNX, tarball, image, JSON, YAML)."""

from __future__ import annotations

import random


def flip(data: bytes, rng: random.Random) -> bytes:
    """1-64 random bytes XORed with a random nonzero value (most often in the file's first tenth: headers)."""
    out = bytearray(data)
    if not out:
        return bytes(out)
    span = len(out) if rng.random() < 0.5 else max(1, len(out) // 10)
    for _ in range(rng.randint(1, 64)):
        out[rng.randrange(span)] ^= rng.randint(1, 255)
    return bytes(out)


def truncate(data: bytes, rng: random.Random) -> bytes:
    """The first k bytes, k in [0, len)."""
    return data[: rng.randrange(len(data))] if data else data


def splice(data: bytes, other: bytes, rng: random.Random) -> bytes:
    """A random piece of `data` replaced by a random piece of `other`."""
    if not data or not other:
        return data + other
    start, end = sorted(rng.randrange(len(data)) for _ in range(2))
    o_start = rng.randrange(len(other))
    return data[:start] + other[o_start: o_start + rng.randint(1, 4096)] + data[end:]


def insert(data: bytes, rng: random.Random) -> bytes:
    """1-256 random bytes inserted at a random place."""
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.randbytes(rng.randint(1, 256)) + data[at:]


def mutate(data: bytes, rng: random.Random, other: bytes = b"") -> tuple[bytes, str]:
    """One byte mutation of `data`: (result, its name)."""
    name = rng.choice(["flip", "flip", "truncate", "splice", "insert"])
    if name == "flip":
        return flip(data, rng), name
    if name == "truncate":
        return truncate(data, rng), name
    if name == "splice":
        return splice(data, other or data, rng), name
    return insert(data, rng), name
