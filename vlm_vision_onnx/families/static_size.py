"""A static size of a vision encoder: `WIDTHxHEIGHT` pixels (width first, as PIL's `size`), or
`FRAMESxWIDTHxHEIGHT` for a video, and its patch grid (torch-free).

An NPU compiles one graph per size (a "static specialization"); `python -m builders.vision --static` exports one.
A Qwen size must be a multiple of patch x spatial merge pixels on each side (28 at patch 14, 32 at patch 16), and
a video's frame count a multiple of the temporal patch: `grid` refuses anything else with one line naming the
nearest valid sizes, before any work.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from vlm_vision_onnx.core.errors import UsageError

_FORM = re.compile(r"^(?:(\d+)x)?(\d+)x(\d+)$")


@dataclass(frozen=True)
class StaticSize:
    """width, height in pixels; frames: 0 for an image, else the video's frame count."""

    width: int
    height: int
    frames: int = 0

    def __post_init__(self):
        if self.width <= 0 or self.height <= 0 or self.frames < 0:
            raise UsageError(f"--static {self.name}: width, height and frames must be positive")

    @classmethod
    def parse(cls, text: str) -> StaticSize:
        """`WIDTHxHEIGHT` or `FRAMESxWIDTHxHEIGHT` -> StaticSize; UsageError on anything else."""
        found = _FORM.match(str(text).strip().lower())
        if not found:
            raise UsageError(f"--static takes WIDTHxHEIGHT pixels (e.g. 448x448) or FRAMESxWIDTHxHEIGHT for a video, "
                             f"got {text!r}")
        frames, width, height = found.groups()
        return cls(int(width), int(height), int(frames or 0))

    @property
    def name(self) -> str:
        """`WxH` or `FxWxH`: the folder suffix (`build/MODEL/static-WxH/`) and the metadata value."""
        return f"{self.frames}x{self.width}x{self.height}" if self.frames else f"{self.width}x{self.height}"

    def grid(self, patch: int, merge: int, temporal: int) -> list[int]:
        """[t, h, w] in patches (an image is one temporal patch, as the Qwen processor makes it).

        UsageError, naming the nearest valid sizes, when a side is not a multiple of patch x merge pixels or
        the frame count not a multiple of `temporal`."""
        block = patch * merge
        if self.width % block or self.height % block:
            raise UsageError(
                f"--static {self.name} is off the patch grid: width and height must be multiples of patch {patch} x "
                f"merge {merge} = {block} pixels; nearest valid sizes: {', '.join(nearest(self, block, temporal))}")
        if self.frames % temporal:
            raise UsageError(f"--static {self.name}: a video's frame count must be a multiple of the temporal patch "
                             f"{temporal}; nearest valid sizes: {', '.join(nearest(self, block, temporal))}")
        return [max(1, self.frames // temporal), self.height // patch, self.width // patch]


def _sides(value: int, step: int) -> list[int]:
    """The multiples of `step` nearest `value` (one when it is one), never below `step`."""
    low = max(step, value // step * step)
    high = max(step, -(-value // step) * step)
    return sorted({low, high}, key=lambda v: (abs(v - value), v))


def nearest(size: StaticSize, block: int, temporal: int) -> list[str]:
    """Valid sizes around `size`, nearest first (at most 4): each side rounded down and up to `block`."""
    frames = _sides(size.frames, temporal) if size.frames else [0]
    found = [StaticSize(w, h, f) for f in frames[:1] for w in _sides(size.width, block)
             for h in _sides(size.height, block)]
    found.sort(key=lambda s: (abs(s.width - size.width) + abs(s.height - size.height), s.width, s.height))
    return [s.name for s in found[:4]]
