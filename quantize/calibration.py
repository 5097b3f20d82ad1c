"""A deterministic calibration set of real photographs, preprocessed exactly as the exported model takes them.

Photos: `PHOTOS`, from scikit-image's `skimage.data` (they ship inside the scikit-image wheel of the dev
extra: nothing is downloaded): those of `runtime.sample_photos` plus a few more, RGB (grayscale ones
through the processors' own RGB conversion, `runtime.images.to_rgb`). Each photo is resized (PIL bicubic)
to every size of `SIZES`, (height, width): a small, a mid and a large non-square one, all multiples of 64,
so Qwen3-VL's processor keeps them as they are (multiples of patch 16 x merge 2, within its pixel budget)
and Phi-4-multimodal's tiles them into 448-pixel crops as it does any photo. The video is the pan across
`rocket` of `runtime.sample_photos.pan` (4 frames of 360 x 480: one entry with t = 2), for the families
whose processor takes videos.

Every item is one entry (one image at one size, or the video) through the family's own torch-free
preprocessing from a processor folder (`Family.processing.embed_pack`, the path `python -m runtime embed`
runs): {input name: array} in the family's `input_names` order, dtypes as the model takes them.
Qwen3-VL: pixel_values float32 [t*h*w, 1536], grid_thw int64 [1, 3]. Phi-4-multimodal: pixel_values
float32 [1, crops, 3, 448, 448], image_attention_mask float32 [1, crops, 32, 32], image_sizes int64 [1, 2].

The processor folder holds the `preprocessor_config.json` the release package ships: a package itself, or
what `processor_folder` writes from the export's report (the family's `release.write_config` and
`write_processor`). `for_model(model_file)` does it all for a stage's model, finding the export's report
through the stages' `input` links.

No torch: the processors are the product runtime's (transformers' PIL backend, numpy ports), imported
when an item is made, not when this module is.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
from onnxruntime.quantization import CalibrationDataReader
from PIL import Image

from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core import report as reports
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families import Family, Inputs, Metadata, family, of_model
from vlm_vision_onnx.runtime import sample_photos

#: Photos of skimage.data, in order: runtime.sample_photos' (camera is grayscale) and a few more shipped ones.
PHOTOS: tuple[str, ...] = (*sample_photos.PHOTOS, "immunohistochemistry", "hubble_deep_field", "coins")
#: (height, width) of every photo in the set: small, mid, large non-square.
SIZES: tuple[tuple[int, int], ...] = ((256, 256), (448, 448), (512, 768))
#: The calibration set the stages use (int8 static and smoothing, int4 gptq): these photos at these sizes, plus
#: the pan video where the family takes video. Small on purpose: quantize_static holds every item's MatMul inputs
#: (about 0.5 GB per 448x448 image at 2B dims) until it computes the ranges.
STAGE_PHOTOS: tuple[str, ...] = PHOTOS[:4]
STAGE_SIZES: tuple[tuple[int, int], ...] = ((256, 256), (448, 448))
VIDEO_PHOTO = "rocket"  # what runtime.sample_photos pans across
VIDEO_NAME = f"video pan {VIDEO_PHOTO} x{sample_photos.FRAMES}"


def photo(name: str) -> np.ndarray:
    """uint8 [H, W, 3] of `skimage.data.<name>()` (grayscale converted as the processors convert it)."""
    try:
        import skimage.data
    except ImportError:
        raise UsageError("scikit-image is not installed: pip install '.[dev]' (it ships the calibration photos)"
                         ) from None
    if name not in PHOTOS:
        raise UsageError(f"{name!r} is not a calibration photo; photos: {', '.join(PHOTOS)}")
    array = getattr(skimage.data, name)()
    if array.ndim == 3 and array.shape[2] == 3:
        return np.ascontiguousarray(array, dtype=np.uint8)
    from vlm_vision_onnx.runtime.images import to_rgb  # the processors' RGB conversion

    return to_rgb(Image.fromarray(array))


def resized(rgb: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """uint8 [height, width, 3]: `rgb` [H, W, 3] resized to `size` = (height, width), PIL bicubic."""
    height, width = size
    return np.asarray(Image.fromarray(rgb).resize((width, height), Image.Resampling.BICUBIC))


def video_frames() -> list[np.ndarray]:
    """The frames [360, 480, 3] uint8 of `runtime.sample_photos.pan` across VIDEO_PHOTO."""
    return [np.ascontiguousarray(frame) for frame in sample_photos.pan(photo(VIDEO_PHOTO))]


def _family(source: str | Metadata | Family) -> tuple[Family, Metadata | None]:
    if isinstance(source, Family):
        return source, None
    if isinstance(source, dict):
        return of_model(source, "the model"), source
    return family(source), None


def named_items(source: str | Metadata | Family, processor: str | Path, *,
                sizes: Sequence[tuple[int, int]] = SIZES, photos: Sequence[str] = PHOTOS,
                video: bool | None = None) -> list[tuple[str, Inputs]]:
    """[(name, {input name: array})]: every photo at every size ('astronaut 256x256', photos outer, sizes
    inner), then the video. See `items`."""
    fam, metadata = _family(source)
    folder = Path(processor)
    if not (folder / "preprocessor_config.json").is_file():
        raise UsageError(f"{folder} holds no preprocessor_config.json: give a release package or a folder "
                         "written by quantize.calibration.processor_folder")
    result = []
    for name in photos:
        rgb = photo(name)
        for size in sizes:
            label = f"{name} {size[0]}x{size[1]}"
            result.append((label, _feeds(fam, folder, [(Path(label), resized(rgb, size))], [])))
    if video is not False:
        frames = [(Path(f"{VIDEO_NAME} frame {k}"), frame) for k, frame in enumerate(video_frames())]
        try:
            result.append((VIDEO_NAME, _feeds(fam, folder, [], frames)))
        except UsageError:
            if video:  # asked for: the family's processor refuses videos, say so
                raise
    if metadata is not None:
        for label, feeds in result:
            try:
                fam.check_inputs(feeds, metadata)
            except UsageError as err:
                raise UsageError(f"calibration item {label}: the processor of {folder} does not fit the model "
                                 f"({err})") from None
    return result


def _feeds(fam: Family, folder: Path, images: list, frames: list) -> Inputs:
    pack = fam.processing.embed_pack(folder, images, frames)
    return {name: pack.feeds[name] for name in fam.input_names}


def items(source: str | Metadata | Family, processor: str | Path, *,
          sizes: Sequence[tuple[int, int]] = SIZES, photos: Sequence[str] = PHOTOS,
          video: bool | None = None) -> list[Inputs]:
    """The calibration set: one {input name: array} per photo and size (photos outer, sizes inner), then
    the video; the same arrays on every call.

    `source`: a family name, a `Family`, or a model's ONNX metadata (its `family`; every item is then
    also checked against the model's I/O contract, `Family.check_inputs`). `processor`: a folder holding
    the processor's preprocessor_config.json (a release package, or `processor_folder`'s output).
    `sizes`: (height, width) each photo is resized to before the processor. `video`: None adds the video
    when the family's processor takes videos (Qwen3-VL: pixel_values [t*h*w, 1536] with t = 2; Phi-4-
    multimodal takes none), True requires it (UsageError if the family takes none), False leaves it out.
    Shapes per family: see the module docstring.
    """
    return [feeds for _, feeds in named_items(source, processor, sizes=sizes, photos=photos, video=video)]


def processor_folder(export_report: dict, metadata: Metadata, dest: str | Path) -> Path:
    """Write into `dest` the config.json and preprocessor_config.json the release package will hold (the
    family's `release.write_config` and `write_processor`, from the export stage's report); return `dest`."""
    dest = Path(dest)
    fam = of_model(metadata, "the model") if "family" in metadata else family(export_report.get("family"))
    fam.release.write_config(export_report, metadata, dest)
    fam.release.write_processor(export_report, metadata, dest)
    return dest


def export_report(model_file: str | Path) -> dict:
    """The report of the export stage a stage's model comes from: the report beside `model_file`, else the
    one its `input` names, and so on (surgery -> optimize -> int8 each record their input)."""
    path = onnx_io.model_path(model_file)
    seen = set()
    while True:
        report = reports.read_beside(path)
        if report.get("stage") == "export":
            return report
        seen.add(str(path))
        source = report.get("input")
        if not source or str(source) in seen or not Path(source).exists():
            raise UsageError(f"{path}: cannot find the export's report through the stages' `input` links "
                             f"(stage {report.get('stage')!r}, input {source!r}); give a processor folder "
                             "(a release package) instead")
        path = onnx_io.model_path(source)


def for_model(model_file: str | Path, processor: str | Path | None = None, **options) -> list[Inputs]:
    """`items` for the model at `model_file` (family and checks from its metadata), with the processor of
    `processor` (a folder) or, without one, the processor its release package will hold (`processor_folder`
    from the export's report, `export_report`). `options`: sizes, photos, video."""
    path = onnx_io.model_path(model_file)
    metadata = onnx_io.metadata(path)
    if processor is not None:
        return items(metadata, processor, **options)
    with tempfile.TemporaryDirectory(prefix="vision-onnx-calibration-") as tmp:
        return items(metadata, processor_folder(export_report(path), metadata, tmp), **options)


class _Reader(CalibrationDataReader):
    """The items one by one, then None; `rewind` starts over."""

    def __init__(self, feeds: Iterable[Inputs]):
        self._feeds = list(feeds)
        self._next = 0

    def get_next(self) -> Inputs | None:
        if self._next >= len(self._feeds):
            return None
        self._next += 1
        return self._feeds[self._next - 1]

    def rewind(self) -> None:
        self._next = 0

    def __len__(self) -> int:
        return len(self._feeds)


def reader(feeds: Iterable[Inputs]) -> CalibrationDataReader:
    """An `onnxruntime.quantization.CalibrationDataReader` over `feeds` (e.g. `items(...)`), for
    `quantize_static`: each `get_next()` returns the next {input name: array}, then None."""
    return _Reader(feeds)


def stage_set(model_file: str | Path) -> tuple[Callable[[], list[Inputs]], dict]:
    """(feeds, what they are) of a stage: `feeds()` makes STAGE_PHOTOS at STAGE_SIZES (+ the video) for the model
    at `model_file` on first use (so that bad options and a bad OUT are refused before this work) and keeps them;
    the dict goes into the stage's report."""
    from vlm_vision_onnx.core.progress import step

    @functools.cache
    def feeds() -> list[Inputs]:
        with step("calibration set: photos through the family's processor"):
            return for_model(model_file, photos=STAGE_PHOTOS, sizes=STAGE_SIZES)

    return feeds, {"photos": list(STAGE_PHOTOS), "sizes": [list(s) for s in STAGE_SIZES], "how": "quantize/calibration.py"}
