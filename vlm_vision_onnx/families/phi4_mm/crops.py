"""Phi-4-multimodal image layouts (crop grids, masks, image_sizes, token counts) without pixels or torch.

`Phi4MultimodalImageProcessor` (transformers 5.23, `image_processing_phi4_multimodal.py`) needs
torchvision, which has no CPU build here. Its layout logic is integer arithmetic, ported once in
`families.phi4_mm.preprocess` (`crop_grid`, `hd_geometry`) and used here; what it does:

- `dynamic_preprocess`: an image H x W (pixels) gets a crop grid of w = ceil(W / 448) by
  h = ceil(H / 448) crops; when w * h > dynamic_hd (36) the grid is instead the (w, h) with
  w * h <= dynamic_hd whose ratio w / h is closest to W / H (`find_closest_aspect_ratio`, ties to the
  larger area when the image is big enough). The image is resized to fit the grid's width or height
  and padded on the right or at the bottom; the mask (32 patches per crop side) is 1 except the
  floor(padding / 14) last columns (or rows) of patches.
- `_preprocess`: crop 0 is the whole image resized to 448 x 448 (the global crop, mask all ones);
  crops 1..h*w are the HD grid, row-major; `image_sizes` is [h * 448, w * 448]; every image is padded
  to the pack's largest crop count with zero pixels and all-ones masks.
- Token count per image: 256 + 1 + sum(ds) + sum(ds[:, 0]) + 16 with ds = the HD mask subsampled
  [0::2, 0::2], i.e. rows * (cols + 1) HD tokens (a separator ends every row), 1 global separator and
  16 * (16 + 1) global-crop tokens.

Arrays: pixel_values float32 [num_images, max_num_crops, 3, 448, 448], image_attention_mask float32
[num_images, max_num_crops, 32, 32] (the processor's dtype; 1 = real patch), image_sizes int64
[num_images, 2] (height, width of the padded HD canvas).
"""

import math
from dataclasses import dataclass

import numpy as np

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.phi4_mm import preprocess
from vlm_vision_onnx.families.phi4_mm.spec import INPUT_NAMES

CROP = preprocess.DEFAULTS["size"]["height"]  # 448, crop side in pixels
PATCH = preprocess.DEFAULTS["patch_size"]  # 14, patch side in pixels
MASK = CROP // PATCH  # 32 mask entries per crop side
POOLED = (MASK + 1) // 2  # 16 tokens per crop side after AvgPool 2
DYNAMIC_HD = preprocess.DEFAULTS["dynamic_hd"]  # 36, the processor's default maximum of HD crops


@dataclass(frozen=True)
class ImageLayout:
    """One image as the processor lays it out: an HD grid of rows x cols crops and its valid patches."""

    rows: int  # crops down (image_sizes[0] / 448)
    cols: int  # crops across (image_sizes[1] / 448)
    valid_h: int  # patch rows holding image, of rows * 32
    valid_w: int  # patch columns holding image, of cols * 32

    @property
    def crops(self) -> int:
        """Crops including the global one: 1 + rows * cols."""
        return 1 + self.rows * self.cols

    def hd_mask(self) -> np.ndarray:
        """float32 [rows * 32, cols * 32]: 1 on the valid patches (top-left rectangle)."""
        mask = np.zeros((self.rows * MASK, self.cols * MASK), np.float32)
        mask[: self.valid_h, : self.valid_w] = 1
        return mask

    def num_tokens(self) -> int:
        """Tokens this image contributes: HD rows * (cols + 1), 1 separator, 16 * 17 global."""
        useful_h, useful_w = math.ceil(self.valid_h / 2), math.ceil(self.valid_w / 2)
        return useful_h * (useful_w + 1) + 1 + POOLED * (POOLED + 1)


def layout(height: int, width: int, max_num: int = DYNAMIC_HD) -> ImageLayout:
    """The processor's layout of an image of `height` x `width` pixels (`dynamic_preprocess`)."""
    if height < 1 or width < 1:
        raise UsageError(f"image size {height}x{width}: height and width must be >= 1 pixel")
    _, _, mask = preprocess.hd_geometry(height, width, CROP, PATCH, max_num)
    return ImageLayout(mask.shape[0] // MASK, mask.shape[1] // MASK, int(mask[:, 0].sum()), int(mask[0].sum()))


def pack_arrays(layouts: list[ImageLayout]) -> tuple[np.ndarray, np.ndarray]:
    """image_attention_mask float32 [I, C, 32, 32] and image_sizes int64 [I, 2], C = max crops.

    Crop 0 of each image is the global crop (all ones), then its HD crops row-major, then padding
    crops (all ones, as `pad_mask_to_max_num_crops`).
    """
    most = max(lay.crops for lay in layouts)
    masks = np.ones((len(layouts), most, MASK, MASK), np.float32)
    for i, lay in enumerate(layouts):
        tiles = lay.hd_mask().reshape(lay.rows, MASK, lay.cols, MASK).transpose(0, 2, 1, 3)
        masks[i, 1: lay.crops] = tiles.reshape(-1, MASK, MASK)
    sizes = np.array([[lay.rows * CROP, lay.cols * CROP] for lay in layouts], np.int64)
    return masks, sizes


def random_inputs(layouts: list[ImageLayout], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """{name: array} for a pack: normal(0, 1) pixels on real crops, zeros on padding crops (processor)."""
    masks, sizes = pack_arrays(layouts)
    pixels = np.zeros((len(layouts), masks.shape[1], 3, CROP, CROP), np.float32)
    for i, lay in enumerate(layouts):
        pixels[i, : lay.crops] = rng.standard_normal((lay.crops, 3, CROP, CROP), dtype=np.float32)
    return {"pixel_values": pixels, "image_attention_mask": masks, "image_sizes": sizes}


def num_tokens(layouts: list[ImageLayout]) -> int:
    """Rows of image_features for the pack."""
    return sum(lay.num_tokens() for lay in layouts)


def check_inputs(inputs: dict[str, np.ndarray]) -> list[ImageLayout]:
    """The layouts of a pack the processor could have produced, or UsageError saying what disagrees."""
    missing = [n for n in INPUT_NAMES if n not in inputs]
    if missing:
        raise UsageError(f"missing input {missing[0]!r}; Phi-4-multimodal takes {', '.join(INPUT_NAMES)}")
    pixels, masks, sizes = (np.asarray(inputs[n]) for n in INPUT_NAMES)
    if pixels.ndim != 5 or pixels.shape[2:] != (3, CROP, CROP) or 0 in pixels.shape[:2]:
        raise UsageError(f"pixel_values must have shape [num_images, max_num_crops, 3, {CROP}, {CROP}], "
                         f"got {list(pixels.shape)}")
    count, crops = pixels.shape[:2]
    if masks.shape != (count, crops, MASK, MASK):
        raise UsageError(f"image_attention_mask must have shape [{count}, {crops}, {MASK}, {MASK}] "
                         f"(num_images, max_num_crops of pixel_values), got {list(masks.shape)}")
    if sizes.shape != (count, 2) or not np.issubdtype(sizes.dtype, np.integer):
        raise UsageError(f"image_sizes must be integers of shape [{count}, 2], got {sizes.dtype} {list(sizes.shape)}")
    if not np.isin(masks, (0, 1)).all():
        raise UsageError("image_attention_mask must hold only 0 and 1")
    layouts = []
    for i, (height, width) in enumerate(sizes.tolist()):
        if height < CROP or width < CROP or height % CROP or width % CROP:
            raise UsageError(f"image_sizes[{i}] = {[height, width]}: height and width must be positive "
                             f"multiples of the crop size {CROP}")
        rows, cols = height // CROP, width // CROP
        if 1 + rows * cols > crops:
            raise UsageError(f"image_sizes[{i}] = {[height, width]} needs 1 + {rows}x{cols} = {1 + rows * cols} "
                             f"crops but pixel_values has max_num_crops = {crops}")
        if not masks[i, 0].all():
            raise UsageError(f"image_attention_mask[{i}, 0] (the global crop) must be all ones")
        hd = masks[i, 1: 1 + rows * cols].reshape(rows, cols, MASK, MASK).transpose(0, 2, 1, 3)
        hd = hd.reshape(rows * MASK, cols * MASK)
        valid_h, valid_w = int(hd[:, 0].sum()), int(hd[0].sum())
        lay = ImageLayout(rows, cols, valid_h, valid_w)
        if valid_h == 0 or valid_w == 0 or not np.array_equal(hd, lay.hd_mask()):
            raise UsageError(f"image_attention_mask[{i}] does not match image_sizes {[height, width]}: the "
                             f"{rows}x{cols} crops' mask must be ones on a top-left rectangle, zeros elsewhere")
        layouts.append(lay)
    if crops != max(lay.crops for lay in layouts):
        raise UsageError(f"max_num_crops = {crops} but the largest image has "
                         f"{max(lay.crops for lay in layouts)} crops (the processor pads to the largest)")
    return layouts
