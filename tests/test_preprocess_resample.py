"""The numpy resampling kernels against torch's own (`torch.nn.functional.interpolate` on CPU).

Also home of `torchvision_functional()`: a stand-in for `torchvision.transforms.v2.functional` built
from torch ops, so that the transformers processors that need torchvision (Phi-4-multimodal images,
Qwen3-VL video) run their own code in the tests. Its `resize` follows torchvision's `resize_image` on
CPU: uint8 images go to torch's native uint8 kernel for bicubic, and for bilinear on AVX2 CPUs (on
AVX-512-only torch builds torchvision casts bilinear uint8 to float32 and rounds, which moves some
pixels by one grey level: the port follows the native uint8 kernel); float images are interpolated as
they are. `pad` is constant padding with a per-channel fill, `normalize` is (x - mean) / std.
"""

import enum
import sys
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from families.resample import resize_bicubic, resize_uint8_aa

SIZES = [  # (in h, in w, out h, out w): down, up, one side unchanged, extreme aspect ratios
    (300, 400, 224, 288), (37, 53, 64, 96), (1000, 1, 320, 32), (480, 640, 448, 608),
    (100, 100, 448, 448), (3000, 4000, 608, 800), (5, 7, 5, 9), (64, 64, 32, 64),
]


class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def _resize(image, size, interpolation=InterpolationMode.BILINEAR, max_size=None, antialias=True):
    shape = image.shape
    height, width = size
    if (height, width) == tuple(shape[-2:]):
        return image
    x = image.reshape(-1, *shape[-3:])
    cast = x.dtype != torch.uint8 and not x.is_floating_point()
    if x.dtype == torch.uint8 and interpolation not in (InterpolationMode.BICUBIC, InterpolationMode.BILINEAR):
        raise NotImplementedError(interpolation)
    x = F.interpolate(x.float() if cast else x, size=[height, width], mode=interpolation.value,
                      align_corners=False, antialias=antialias)
    return x.reshape(*shape[:-2], height, width)


def _pad(image, padding, fill=0, padding_mode="constant"):
    left, top, right, bottom = padding
    fill = torch.as_tensor(fill, dtype=image.dtype).reshape(-1, 1, 1)
    out = fill.expand(*image.shape[:-2], image.shape[-2] + top + bottom, image.shape[-1] + left + right).clone()
    out[..., top: top + image.shape[-2], left: left + image.shape[-1]] = image
    return out


def _normalize(image, mean, std, inplace=False):
    mean = torch.as_tensor(mean, dtype=image.dtype).reshape(-1, 1, 1)
    std = torch.as_tensor(std, dtype=image.dtype).reshape(-1, 1, 1)
    return (image - mean) / std


def torchvision_functional() -> types.ModuleType:
    """A module standing in for torchvision.transforms.v2.functional (the functions the processors use)."""
    module = types.ModuleType("torchvision.transforms.v2.functional")
    module.InterpolationMode = InterpolationMode
    module.resize = _resize
    module.pad = _pad
    module.normalize = _normalize
    module.grayscale_to_rgb = lambda x: x if x.shape[-3] == 3 else x.expand(*x.shape[:-3], 3, *x.shape[-2:])
    return module


def install_torchvision_stub(monkeypatch) -> types.ModuleType:
    """Make `torchvision.transforms.v2.functional` importable (the stand-in) for one test, and point the
    transformers torchvision backend at it; monkeypatch undoes all of it."""
    import transformers.image_processing_backends as backends  # before the stand-in: it probes torchvision

    functional = torchvision_functional()
    for name in ("torchvision", "torchvision.transforms", "torchvision.transforms.v2"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "torchvision.transforms.v2.functional", functional)
    sys.modules["torchvision.transforms.v2"].functional = functional
    monkeypatch.setattr(backends, "tvF", functional, raising=False)
    pil = backends.PILImageResampling
    mapping = {pil.BILINEAR: InterpolationMode.BILINEAR, pil.BICUBIC: InterpolationMode.BICUBIC,
               pil.NEAREST: InterpolationMode.NEAREST_EXACT, pil.LANCZOS: InterpolationMode.LANCZOS}
    monkeypatch.setattr(backends, "pil_torch_interpolation_mapping", mapping, raising=False)
    return functional


@pytest.mark.parametrize("mode", ["bicubic", "bilinear"])
@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "{}x{}->{}x{}".format(*s))
def test_uint8_antialias_equals_torch(sizes, mode):
    h, w, out_h, out_w = sizes
    image = np.random.default_rng(h * w).integers(0, 256, (3, h, w), dtype=np.uint8)
    expected = F.interpolate(torch.from_numpy(image)[None], size=(out_h, out_w), mode=mode, antialias=True,
                             align_corners=False)[0].numpy()
    got = resize_uint8_aa(image, (out_h, out_w), mode)
    assert got.dtype == np.uint8 and got.shape == (3, out_h, out_w)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("sizes", SIZES, ids=lambda s: "{}x{}->{}x{}".format(*s))
def test_float_bicubic_equals_torch(sizes):
    h, w, out_h, out_w = sizes
    image = np.random.default_rng(h + w).uniform(-1, 1, (3, h, w)).astype(np.float32)
    expected = F.interpolate(torch.from_numpy(image)[None], size=(out_h, out_w), mode="bicubic",
                             align_corners=False)[0].numpy()
    got = resize_bicubic(image, (out_h, out_w))
    assert got.dtype == np.float32 and got.shape == (3, out_h, out_w)
    assert np.abs(got - expected).max() <= 1e-5


def test_uint8_resize_rejects_float():
    with pytest.raises(TypeError, match="uint8"):
        resize_uint8_aa(np.zeros((3, 4, 4), np.float32), (2, 2), "bilinear")
