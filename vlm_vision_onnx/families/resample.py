"""PyTorch's image resampling kernels, ported to numpy (what torchvision's `resize` runs on CPU), and the
processors' shared normalisation (`normalize`).

The transformers processors that need torchvision (the Qwen3-VL video processor, the Phi-4-multimodal
image processor) resize through `torchvision.transforms.v2.functional.resize`, which calls
`torch.nn.functional.interpolate`. Two of its CPU kernels are reproduced here:

- `resize_uint8_aa`: antialiased bilinear / bicubic on uint8 images (torchvision hands uint8 tensors to
  torch's native uint8 kernel for bicubic always, and for bilinear on AVX2 CPUs). It is separable and
  works in fixed point: weights as in `_compute_index_ranges_int16_weights`
  (aten/src/ATen/native/cpu/UpSampleKernel.cpp) scaled to int16 with a shared precision, a horizontal
  pass into a uint8 buffer, then a vertical pass; each pass adds half an LSB, shifts and clamps to 0..255.
- `resize_bicubic`: plain bicubic (Keys a = -0.75, no antialias, align_corners=False) on float32,
  as `upsample_bicubic2d` computes it (border taps clamped to the edge).

Both take channel-first images [..., H, W] and return [..., out_h, out_w].
"""

import math

import numpy as np

_SUPPORT = {"bilinear": 1.0, "bicubic": 2.0}  # interp_size / 2


def _aa_filter(mode: str, x: np.ndarray) -> np.ndarray:
    """The antialias filters: triangle for bilinear, Keys cubic with a = -0.5 (PIL's) for bicubic."""
    x = np.abs(x)
    if mode == "bilinear":
        return np.where(x < 1.0, 1.0 - x, 0.0)
    a = -0.5
    near = ((a + 2) * x - (a + 3)) * x * x + 1
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def aa_weights(in_size: int, out_size: int, mode: str) -> tuple[np.ndarray, np.ndarray, int]:
    """Fixed-point taps of one antialiased pass: (first input index int64 [out], weights int32 [out, K],
    precision in bits), as torch computes them for uint8 (double math, then int16 rounding)."""
    scale = in_size / out_size
    support = _SUPPORT[mode] * scale if scale >= 1.0 else _SUPPORT[mode]
    taps = math.ceil(support) * 2 + 1
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    center = scale * (np.arange(out_size, dtype=np.float64) + 0.5)
    # static_cast<int64_t> truncates toward zero
    xmin = np.maximum(np.trunc(center - support + 0.5).astype(np.int64), 0)
    xsize = np.clip(np.minimum(np.trunc(center + support + 0.5).astype(np.int64), in_size) - xmin, 0, taps)
    j = np.arange(taps)
    weights = _aa_filter(mode, (j[None, :] + xmin[:, None] - center[:, None] + 0.5) * invscale)
    weights = np.where(j[None, :] < xsize[:, None], weights, 0.0)
    total = weights.sum(axis=1, keepdims=True)  # summed in tap order, as the kernel does
    weights = np.divide(weights, total, out=weights, where=total != 0)
    wt_max = float(weights.max())
    precision = 0
    while precision < 22 and int(0.5 + wt_max * (1 << (precision + 1))) < (1 << 15):
        precision += 1
    scaled = weights * (1 << precision)
    fixed = np.trunc(np.where(scaled < 0, scaled - 0.5, scaled + 0.5)).astype(np.int32)
    return xmin, fixed, precision


def _aa_pass_uint8(image: np.ndarray, out_size: int, axis: int, mode: str) -> np.ndarray:
    """One separable fixed-point pass along `axis` (-1: width, -2: height) of a uint8 image."""
    in_size = image.shape[axis]
    xmin, weights, precision = aa_weights(in_size, out_size, mode)
    shape = (-1,) if axis == -1 else (-1, 1)  # broadcast one weight per output index along `axis`
    out_shape = list(image.shape)
    out_shape[axis] = out_size
    acc = np.full(out_shape, 1 << (precision - 1), dtype=np.int32)  # the kernel accumulates in int32
    for j in range(weights.shape[1]):
        idx = np.minimum(xmin + j, in_size - 1)  # taps past xsize carry weight 0
        acc += np.take(image, idx, axis=axis).astype(np.int32) * weights[:, j].reshape(shape)
    acc >>= precision
    return np.clip(acc, 0, 255).astype(np.uint8)


def resize_uint8_aa(image: np.ndarray, size: tuple[int, int], mode: str) -> np.ndarray:
    """Antialiased `mode` ('bilinear' | 'bicubic') resize of uint8 [..., H, W] to [..., *size], as
    torch.nn.functional.interpolate(uint8, size, mode, antialias=True, align_corners=False)."""
    if image.dtype != np.uint8:
        raise TypeError(f"resize_uint8_aa takes uint8 images, got {image.dtype}")
    height, width = size
    if image.shape[-1] != width:
        image = _aa_pass_uint8(image, width, -1, mode)
    if image.shape[-2] != height:
        image = _aa_pass_uint8(image, height, -2, mode)
    return image


def _bicubic_taps(in_size: int, out_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Indices int64 [out, 4] (clamped to the edge) and float32 weights [out, 4] of plain bicubic."""
    scale = np.float32(in_size) / np.float32(out_size)
    # scale * (i + 0.5) - 0.5, rounded once to float32: the compiled kernel contracts it into an FMA
    real = (np.float64(scale) * (np.arange(out_size) + 0.5) - 0.5).astype(np.float32)
    index = np.minimum(np.floor(real).astype(np.int64), in_size - 1)
    t = np.clip(real - index.astype(np.float32), np.float32(0), np.float32(1))
    a = np.float32(-0.75)

    def near(x):
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    one = np.float32(1)
    weights = np.stack([far(t + one), near(t), near(one - t), far(one - t + one)], axis=1).astype(np.float32)
    indices = np.clip(index[:, None] - 1 + np.arange(4), 0, in_size - 1)
    return indices, weights


def resize_bicubic(image: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Bicubic float32 resize of [..., H, W] to [..., *size] without antialias, as
    torch.nn.functional.interpolate(x, size, mode='bicubic', align_corners=False)."""
    image = np.asarray(image, dtype=np.float32)
    if tuple(image.shape[-2:]) == tuple(size):
        return image.copy()
    rows, wy = _bicubic_taps(image.shape[-2], size[0])
    cols, wx = _bicubic_taps(image.shape[-1], size[1])
    out = np.zeros(image.shape[:-2] + tuple(size), dtype=np.float32)
    for i in range(4):  # out = sum_y wy * (sum_x wx * src), in the kernel's tap order
        band = image[..., rows[:, i], :]
        inner = band[..., cols[:, 0]] * wx[:, 0]
        for j in range(1, 4):
            inner += band[..., cols[:, j]] * wx[:, j]
        out += inner * wy[:, i][:, None]
    return out


def normalize(frames: np.ndarray, mean, std, rescale_factor: float) -> np.ndarray:
    """uint8 [..., 3, H, W] -> float32, (x - mean/rescale) / (std/rescale) per channel, in float32."""
    scale = np.float32(1.0 / rescale_factor)
    m = (np.asarray(mean, dtype=np.float32) * scale)[:, None, None]
    s = (np.asarray(std, dtype=np.float32) * scale)[:, None, None]
    return (frames.astype(np.float32) - m) / s
