"""Image files to RGB arrays, the way transformers' processors see them (torch-free).

Only the photo formats of `FORMATS` are decoded (pillow is told so: `Image.open(..., formats=FORMATS)`), never
a format pillow would pick by content and hand to an outside program (PostScript goes to Ghostscript). The
pixel count is read from the file's header and checked against a budget before anything is decoded
(`load_rgb(path, max_pixels)`; the runtime's default is `BUDGET_FACTOR` x the processor's own max_pixels,
`pixel_budget`), so a small file declaring a huge image costs nothing. The EXIF orientation is applied (as
`transformers.image_utils.load_image` does), then the image becomes RGB as the processors' own `convert_to_rgb`
makes it (`to_rgb`, the same pillow calls, without importing transformers: transparency is composited onto
white; grayscale, palette and 16-bit images go through pillow's `convert("RGB")`, which clips 16-bit values to
0..255 exactly as the processors do). Unreadable input,
a path the file system refuses (a name too long) and an image past the budget raise UsageError naming the file.
"""

import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from vlm_vision_onnx.core.errors import UsageError

#: The image formats decoded (pillow's names): the photo formats transformers' processors and transformers.js are
#: given (a camera's multi-picture JPEG opens through JPEG, as MPO). Anything else is refused before a decoder
#: sees it.
FORMATS = ("JPEG", "PNG", "WEBP", "GIF", "BMP", "TIFF")
#: The default pixel budget of one image (or video frame): this many times the processor's max_pixels. Within it
#: the processor downsizes the image as transformers does; past it the file is refused before decoding.
BUDGET_FACTOR = 4
#: File names longer than this are shortened in messages (the full path stays in a collection's `path` column).
SHOWN_CHARS = 160


def shown(path: str | Path) -> str:
    """`path` for a message: shortened in the middle past SHOWN_CHARS characters."""
    text = str(path)
    return text if len(text) <= SHOWN_CHARS else f"{text[:80]}...{text[-60:]} ({len(text):,} characters)"


def pixel_budget(processor_max_pixels: int, option: int | None = None) -> int:
    """The pixel budget of one image: `option` (--max-image-pixels) when given, else BUDGET_FACTOR x the
    processor's max_pixels."""
    if option is not None:
        if option < 1:
            raise UsageError(f"--max-image-pixels must be >= 1, got {option}")
        return option
    return BUDGET_FACTOR * int(processor_max_pixels)


def add_budget_argument(parser) -> None:
    """`--max-image-pixels N` (the commands that read image files)."""
    parser.add_argument("--max-image-pixels", type=int, metavar="N",
                        help=f"refuse an image (or video frame) of more pixels than this, before decoding it "
                             f"(default: {BUDGET_FACTOR}x the processor's max_pixels; the processor downsizes any "
                             "image within it)")


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except (OSError, ValueError) as err:  # a name too long, a loop of links, a NUL byte
        raise UsageError(f"image {shown(path)} cannot be read ({getattr(err, 'strerror', None) or err})") from None


@contextmanager
def _reading(path: Path) -> Iterator[Image.Image]:
    """The image file at `path`, opened (header read, nothing decoded), for the length of the block; UsageError if it
    is not a readable image of FORMATS (here or where the block decodes it)."""
    if not _is_file(path):
        raise UsageError(f"image {shown(path)} does not exist or is not a file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path, formats=FORMATS) as image:
                yield image
    except UnidentifiedImageError:
        raise UsageError(f"{shown(path)} is not an image in a format this runtime reads ({', '.join(FORMATS)}; "
                         "wrong format or not an image)") from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombWarning, Image.DecompressionBombError) as err:
        raise UsageError(f"{shown(path)} is not a readable image ({str(err).splitlines()[0]})") from None


def header_pixels(path: str | Path) -> int:
    """Width x height of the image file at `path`, from its header (nothing decoded); UsageError as `open_image`."""
    with _reading(Path(path)) as image:
        width, height = image.size
        return width * height


def open_image(path: str | Path, max_pixels: int | None = None) -> Image.Image:
    """The fully decoded, upright image of `path` (mode kept); UsageError if it is not a readable image of FORMATS
    or (`max_pixels` given) holds more pixels than that, found from its header before decoding."""
    with _reading(Path(path)) as image:
        width, height = image.size
        if max_pixels is not None and width * height > max_pixels:
            raise UsageError(f"{shown(path)} is {width}x{height} = {width * height:,} pixels, past the image "
                             f"budget of {max_pixels:,} ({BUDGET_FACTOR}x the processor's max_pixels unless "
                             "set); refused before decoding: shrink it, or raise the budget with "
                             "--max-image-pixels")
        image.load()  # decode now: truncated data fails here, not later
        return ImageOps.exif_transpose(image)


def to_rgb(image: Image.Image) -> np.ndarray:
    """uint8 [H, W, 3]: the processors' RGB conversion of a pillow image (transformers 5.23's
    `image_transforms.convert_to_rgb`, the same pillow calls): an image with an alpha band or a transparency entry
    is composited onto opaque white, any other goes through `convert("RGB")`."""
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return np.array(Image.alpha_composite(background, rgba).convert("RGB"))
    return np.array(image.convert("RGB"))


def load_rgb(path: str | Path, max_pixels: int | None = None) -> np.ndarray:
    """uint8 [H, W, 3] of the image file at `path` (EXIF orientation applied); `max_pixels`: see `open_image`."""
    image = open_image(path, max_pixels)
    if min(image.size) < 1:
        raise UsageError(f"{shown(path)} has no pixels ({image.size[0]}x{image.size[1]})")
    return to_rgb(image)


def image_suffixes() -> set[str]:
    """File suffixes of the FORMATS pillow reads (lower case, with the dot)."""
    return {suffix.lower() for suffix, name in Image.registered_extensions().items() if name in FORMATS}


def expand(paths: Iterable[str | Path]) -> list[Path]:
    """The files named: a folder stands for its non-hidden files with an image suffix pillow knows, in
    name order (a folder without any is an error); anything else is taken as a file path (checked when
    it is opened)."""
    suffixes = image_suffixes()
    files = []
    for path in map(Path, paths):
        try:
            folder = path.is_dir()
        except (OSError, ValueError):  # a name too long, a NUL byte: reading it as a file says so
            folder = False
        if folder:
            inside = sorted(p for p in path.iterdir()
                            if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in suffixes)
            if not inside:
                raise UsageError(f"folder {path} holds no image files (empty, or no file pillow reads)")
            files.extend(inside)
        else:
            files.append(path)
    return files
