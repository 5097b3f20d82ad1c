"""A release package's static buckets (docs/npu.md "In a package"): how manifest.json and config.json list them, and
which bucket an image runs at (torch-free).

A static bucket is the encoder exported for one size (`make export STATIC=WxH`: `build/MODEL/static-WxH/`), for
NPUs, which compile static graphs only. A package ships up to three files per bucket (`release.stages.StaticVariant`
names them): `fp32` (the static export), `qdq` (A16W8 QDQ of `python -m quantize qnn`) and `fp16`. Each takes
`pixel_values` of its one size only (no `grid_thw` input: the grid is the model's, metadata `static_grid_thw`),
so none of them is in config.json's `onnx_variants` (transformers.js's list) or in `--engine auto`'s ranking
(runtime/path_choice.py): `python -m runtime embed --engine qnn` runs them (runtime/npu_embed.py).

manifest.json's KEY: [{size: [W, H], frames (a video bucket only), grid_thw: [t, h, w], inputs, outputs (the fp32
file's I/O records, every dim numeric), variants: [{name, file, files, size, stage, accuracy}]}], in the order
the package ships them. config.json's KEY is `config_entries` of it: [{size, frames?, grid_thw, files: {name: file}}].

The bucket rule (`choose`), for an image of width w and height h:
1. the bucket whose aspect ratio is closest to the image's: the least max(r, 1/r), r = (w/h) / (W/H);
2. of buckets with that ratio, the one whose pixel count is closest to the image's (the least max(q, 1/q),
   q = W*H / (w*h)): the static run then sees about the pixels the dynamic processor would give it;
3. ties: the larger area, then the earlier bucket.
Ratios are compared exactly (fractions). The image is then resized, not cropped, to exactly W x H
(families/qwen_vl/static_inputs.py): its aspect ratio changes by the factor of step 1.
Video buckets (frames > 0) take frames, not an image: `choose` is given image buckets only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from core.errors import UsageError

#: The key of manifest.json and config.json that lists the static buckets.
KEY = "static_buckets"
#: What config.json keeps of a manifest record (besides `files`).
CONFIG_FIELDS = ("size", "frames", "grid_thw")


@dataclass(frozen=True)
class Bucket:
    """One static bucket of a package: width, height (pixels), frames (0 for an image), grid [t, h, w] and
    {variant name: its file in the package}."""

    width: int
    height: int
    frames: int
    grid: tuple[int, int, int]
    files: dict[str, str]

    @property
    def name(self) -> str:
        """`WxH` (`FxWxH` for a video): as `families.static_size.StaticSize.name` and the metadata's static_size."""
        return f"{self.frames}x{self.width}x{self.height}" if self.frames else f"{self.width}x{self.height}"


def _positive_ints(value, count: int) -> bool:
    return (isinstance(value, list) and len(value) == count
            and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value))


def records(manifest: dict) -> list[dict]:
    """manifest.json's KEY (empty when absent: a package without static buckets); UsageError when malformed."""
    found = manifest.get(KEY, [])
    if not isinstance(found, list) or not all(isinstance(r, dict) for r in found):
        raise UsageError(f"manifest.json's {KEY} is not a list of objects")
    return found


def read(manifest: dict) -> list[Bucket]:
    """The buckets manifest.json lists; UsageError naming what is malformed."""
    buckets = []
    for number, record in enumerate(records(manifest)):
        where = f"manifest.json's {KEY}[{number}]"
        frames = record.get("frames", 0)
        if not _positive_ints(record.get("size"), 2) or not _positive_ints(record.get("grid_thw"), 3) \
                or not isinstance(frames, int) or frames < 0:
            raise UsageError(f"{where} lacks a size [W, H] or a grid_thw [t, h, w] of positive integers")
        variants = record.get("variants")
        if not isinstance(variants, list) or not variants \
                or not all(isinstance(v, dict) and isinstance(v.get("name"), str) and isinstance(v.get("file"), str)
                           for v in variants):
            raise UsageError(f"{where} lists no variants with a name and a file")
        buckets.append(Bucket(*record["size"], frames, tuple(record["grid_thw"]),
                              {v["name"]: v["file"] for v in variants}))
    return buckets


def config_entries(manifest: dict) -> list[dict]:
    """What config.json lists under KEY for the manifest's buckets: size, frames (a video's), grid and files."""
    return [{**{k: r[k] for k in CONFIG_FIELDS if k in r}, "files": {v["name"]: v["file"] for v in r["variants"]}}
            for r in records(manifest)]


def choose(width: int, height: int, sizes: Sequence[tuple[int, int]]) -> int:
    """The index in `sizes` ([(W, H), ...], image buckets) of the bucket an image of `width` x `height` runs at:
    the rule of the module docstring. ValueError when `sizes` is empty or a size is not positive."""
    if not sizes:
        raise ValueError("no bucket to choose from")
    if width <= 0 or height <= 0 or any(w <= 0 or h <= 0 for w, h in sizes):
        raise ValueError(f"sizes must be positive: image {width}x{height}, buckets {list(sizes)}")

    def key(item: tuple[int, tuple[int, int]]):
        index, (w, h) = item
        ratio = Fraction(width * h, height * w)
        area = Fraction(w * h, width * height)
        return max(ratio, 1 / ratio), max(area, 1 / area), -w * h, index

    return min(enumerate(sizes), key=key)[0]
