"""The numpy resampling kernels against torch's own (`torch.nn.functional.interpolate` on CPU).

The torchvision stand-in the processor tests run transformers on (`install_torchvision_stub`) is tests.support's.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from vlm_vision_onnx.families.resample import resize_bicubic, resize_uint8_aa

SIZES = [  # (in h, in w, out h, out w): down, up, one side unchanged, extreme aspect ratios
    (300, 400, 224, 288), (37, 53, 64, 96), (1000, 1, 320, 32), (480, 640, 448, 608),
    (100, 100, 448, 448), (3000, 4000, 608, 800), (5, 7, 5, 9), (64, 64, 32, 64),
]


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
