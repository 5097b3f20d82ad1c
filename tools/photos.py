"""Photo writers for tests and benchmarks: real photographs from scikit-image's sample data, at many sizes."""

from pathlib import Path

from PIL import Image

from vlm_vision_onnx.runtime import sample_photos

#: (width, height) the photos are resized to, in turn
SIZES = [(448, 448), (320, 240), (240, 320), (500, 375), (256, 256), (640, 480), (200, 150), (123, 457),
         (600, 200), (64, 64)]


def write_photos(folder: Path, count: int, first: int = 0) -> list[Path]:
    """`count` photos into `folder`: photo k (from `first`) is PHOTOS[k % 5] at SIZES[k // 5 % 10], JPEG when
    k % 3 == 0, else PNG."""
    import skimage.data

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for k in range(first, first + count):
        name = sample_photos.PHOTOS[k % len(sample_photos.PHOTOS)]
        size = SIZES[k // len(sample_photos.PHOTOS) % len(SIZES)]
        path = folder / f"{k:05d}_{name}_{size[0]}x{size[1]}.{'jpg' if k % 3 == 0 else 'png'}"
        Image.fromarray(getattr(skimage.data, name)()).convert("RGB").resize(size, Image.BICUBIC).save(path)
        written.append(path)
    return written
