"""A release package's static buckets (docs/npu.md "In a package"): how manifest.json and config.json list them, and
which bucket an image runs at (torch-free).

A static bucket is the encoder exported for one size (`make export STATIC=WxH`: `build/MODEL/static-WxH/`), for
NPUs, which compile static graphs only. A package ships up to three files per bucket (`release.stages.StaticVariant`
names them): `fp32` (the static export), `qdq` (A16W8 QDQ of `python -m quantize qnn`) and `fp16`. Each takes
`pixel_values` of its one size only (no `grid_thw` or crop-layout input: the layout is the model's, its metadata
`static_grid_thw` or `static_image_sizes`), so none of them is in config.json's `onnx_variants` (transformers.js's list) or in `--engine auto`'s ranking
(runtime/path_choice.py): `python -m runtime embed --engine qnn` runs them (runtime/npu_embed.py).

manifest.json's KEY: [{size: [W, H], frames (a video bucket only), the layout's facts (the family's
`StaticForm.layout`: a Qwen bucket's grid_thw [t, h, w], a Phi-4 bucket's image_size [H, W] and num_crops), inputs,
outputs (the fp32 file's I/O records, every dim numeric), variants: [{name, file, files, size, stage, accuracy}]}],
in the order the package ships them. config.json's KEY is `config_entries` of it: [{size, frames?, the layout's
facts, files: {name: file}}].

The bucket rule (`choose`), for an image of width w and height h:
1. the bucket whose aspect ratio is closest to the image's: the least max(r, 1/r), r = (w/h) / (W/H);
2. of buckets with that ratio, the one whose pixel count is closest to the image's (the least max(q, 1/q),
   q = W*H / (w*h)): the static run then sees about the pixels the dynamic processor would give it;
3. ties: the larger area, then the earlier bucket.
Ratios are compared exactly (fractions). The image is then resized, not cropped, to exactly W x H
(the family's `StaticForm.feeds`): its aspect ratio changes by the factor of step 1.
Video buckets (frames > 0) take frames, not an image: `choose` is given image buckets only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families import family

#: The key of manifest.json and config.json that lists the static buckets.
KEY = "static_buckets"
#: What config.json keeps of a manifest record besides the layout's facts and `files`.
CONFIG_FIELDS = ("size", "frames")


@dataclass(frozen=True)
class Bucket:
    """One static bucket of a package: width, height (pixels), frames (0 for an image), the facts of its layout
    ({grid_thw: [t, h, w]} or {image_size: [H, W], num_crops: C}: `families.base.StaticForm.layout`) and
    {variant name: its file in the package}."""

    width: int
    height: int
    frames: int
    layout: dict
    files: dict[str, str]

    @property
    def name(self) -> str:
        """`WxH` (`FxWxH` for a video): as `families.static_size.StaticSize.name` and the metadata's static_size."""
        return f"{self.frames}x{self.width}x{self.height}" if self.frames else f"{self.width}x{self.height}"


def _positive_ints(value, count: int | None = None) -> bool:
    """A list of `count` (any number when None, at least one) positive integers."""
    return (isinstance(value, list) and (len(value) == count if count is not None else len(value) > 0)
            and all(_positive_int(v) for v in value))


def _positive_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def layout_keys(manifest: dict) -> tuple[str, ...]:
    """The facts a bucket of this package's family records of its layout (`StaticForm.layout_keys`)."""
    return family(manifest.get("family", "?")).static.layout_keys


def records(manifest: dict) -> list[dict]:
    """manifest.json's KEY (empty when absent: a package without static buckets); UsageError when malformed."""
    found = manifest.get(KEY, [])
    if not isinstance(found, list) or not all(isinstance(r, dict) for r in found):
        raise UsageError(f"manifest.json's {KEY} is not a list of objects")
    return found


def read(manifest: dict) -> list[Bucket]:
    """The buckets manifest.json lists; UsageError naming what is malformed."""
    buckets = []
    found = records(manifest)
    keys = layout_keys(manifest) if found else ()
    for number, record in enumerate(found):
        where = f"manifest.json's {KEY}[{number}]"
        frames = record.get("frames", 0)
        if not _positive_ints(record.get("size"), 2) or not isinstance(frames, int) or frames < 0:
            raise UsageError(f"{where} lacks a size [W, H] of positive integers")
        bad = [k for k in keys if not (_positive_int(record.get(k)) or _positive_ints(record.get(k)))]
        if bad:
            raise UsageError(f"{where} lacks its layout's {', '.join(bad)} (positive integers)")
        variants = record.get("variants")
        if not isinstance(variants, list) or not variants \
                or not all(isinstance(v, dict) and isinstance(v.get("name"), str) and isinstance(v.get("file"), str)
                           for v in variants):
            raise UsageError(f"{where} lists no variants with a name and a file")
        buckets.append(Bucket(*record["size"], frames, {k: record[k] for k in keys},
                              {v["name"]: v["file"] for v in variants}))
    return buckets


def config_entries(manifest: dict) -> list[dict]:
    """What config.json lists under KEY for the manifest's buckets: size, frames (a video's), the layout's facts and
    files."""
    found = records(manifest)
    keep = (*CONFIG_FIELDS, *(layout_keys(manifest) if found else ()))
    return [{**{k: r[k] for k in keep if k in r}, "files": {v["name"]: v["file"] for v in r["variants"]}}
            for r in found]


def layout_text(facts: dict) -> str:
    """A layout's facts in words: `grid 1x16x16` (Qwen) or `HD 448x896, 3 crops` (Phi-4, height x width)."""
    if "grid_thw" in facts:
        return "grid " + "x".join(str(int(v)) for v in np.asarray(facts["grid_thw"]).reshape(-1))
    return "HD {}x{}, {} crops".format(*np.asarray(facts["image_size"]).reshape(-1).tolist(),
                                       int(np.asarray(facts["num_crops"])))


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
