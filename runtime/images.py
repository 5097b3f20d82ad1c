"""Image files to RGB arrays, the way transformers' processors see them (torch-free).

Any format pillow reads. The EXIF orientation is applied (as `transformers.image_utils.load_image`
does), then the image becomes RGB through the processors' own `convert_to_rgb` (transparency is
composited onto white; grayscale, palette and 16-bit images go through pillow's `convert("RGB")`,
which clips 16-bit values to 0..255 exactly as the processors do). Unreadable input raises
UsageError naming the file.
"""

import warnings
from collections.abc import Iterable
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError
from transformers.image_transforms import convert_to_rgb

from core.errors import UsageError


def open_image(path: str | Path) -> Image.Image:
    """The fully decoded, upright image of `path` (mode kept); UsageError if it is not a readable image."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"image {path} does not exist or is not a file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                image.load()  # decode now: truncated data fails here, not later
                return ImageOps.exif_transpose(image)
    except UnidentifiedImageError:
        raise UsageError(f"{path} is not an image pillow can read (wrong format or not an image)") from None
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombWarning, Image.DecompressionBombError) as err:
        raise UsageError(f"{path} is not a readable image ({str(err).splitlines()[0]})") from None


def to_rgb(image: Image.Image) -> np.ndarray:
    """uint8 [H, W, 3]: the processors' RGB conversion of a pillow image."""
    return convert_to_rgb(image, return_numpy=True)


def load_rgb(path: str | Path) -> np.ndarray:
    """uint8 [H, W, 3] of the image file at `path` (EXIF orientation applied)."""
    image = open_image(path)
    if min(image.size) < 1:
        raise UsageError(f"{path} has no pixels ({image.size[0]}x{image.size[1]})")
    return to_rgb(image)


def image_suffixes() -> set[str]:
    """File suffixes pillow reads (lower case, with the dot)."""
    return {suffix.lower() for suffix in Image.registered_extensions()}


def expand(paths: Iterable[str | Path]) -> list[Path]:
    """The files named: a folder stands for its non-hidden files with an image suffix pillow knows, in
    name order (a folder without any is an error); anything else is taken as a file path (checked when
    it is opened)."""
    suffixes = image_suffixes()
    files = []
    for path in map(Path, paths):
        if path.is_dir():
            inside = sorted(p for p in path.iterdir()
                            if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in suffixes)
            if not inside:
                raise UsageError(f"folder {path} holds no image files (empty, or no file pillow reads)")
            files.extend(inside)
        else:
            files.append(path)
    return files
