"""Phi-4-multimodal layouts and input checks (torch-free): the processor's crop grids, masks, image_sizes
and token counts, and one UsageError for every pack the processor could not produce."""

import numpy as np
import pytest

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.phi4_mm import crops, layouts, preprocess

# Original sizes (height, width): square, wide, tall, padded rows / columns (odd and even), 9 crops in a row.
SIZES = [(448, 448), (896, 896), (500, 1000), (1000, 500), (610, 500), (1670, 300), (300, 4000)]


@pytest.mark.parametrize("size", SIZES)
def test_layout_matches_the_processor_port(size):
    """Mask, image_sizes and token count agree with families.phi4_mm.preprocess (the port of the processor)."""
    image = np.random.default_rng(0).integers(0, 256, (*size, 3), dtype=np.uint8)
    processed = preprocess.preprocess([image], preprocess.config_dict())
    lay = crops.layout(*size)
    masks, sizes = crops.pack_arrays([lay])
    np.testing.assert_array_equal(masks, processed["image_attention_mask"])
    np.testing.assert_array_equal(sizes, processed["image_sizes"])
    assert lay.num_tokens() == processed["num_img_tokens"][0]
    assert lay.crops <= 1 + crops.DYNAMIC_HD


def test_layout_geometry():
    assert crops.layout(896, 896) == crops.ImageLayout(2, 2, 64, 64)  # no padding
    assert crops.layout(500, 1000) == crops.ImageLayout(2, 3, 48, 96)  # 224 pixels = 16 patch rows padded
    assert crops.layout(610, 500).valid_w == 53  # an odd count of valid patch columns
    big = crops.layout(5000, 5000)  # 12 x 12 crops exceed dynamic_hd: the closest ratio within 36
    assert (big.rows, big.cols) == (6, 6) and big.crops == 1 + crops.DYNAMIC_HD


def test_pack_pads_to_the_largest_image():
    pack = layouts.pack([[448, 448], [896, 1344]], np.random.default_rng(0))
    assert pack["pixel_values"].shape == (2, 7, 3, 448, 448) and pack["pixel_values"].dtype == np.float32
    assert pack["image_attention_mask"].shape == (2, 7, 32, 32)
    assert not pack["pixel_values"][0, 2:].any() and pack["image_attention_mask"][0, 2:].all()
    assert pack["image_sizes"].tolist() == [[448, 448], [896, 1344]]
    assert [lay.crops for lay in crops.check_inputs(pack)] == [2, 7]


def _pack():
    return layouts.pack([[500, 700], [896, 1344]], np.random.default_rng(0))


def _bad(**changes):
    return {**_pack(), **changes}


@pytest.mark.parametrize("inputs, message", [
    (_bad(image_sizes=np.array([[896, 896], [1344, 1344]])), "needs 1 + 3x3 = 10 crops but pixel_values has max_num_crops = 7"),
    (_bad(image_sizes=np.array([[896, 896], [896, 896]])), "max_num_crops = 7 but the largest image has 5 crops"),
    (_bad(image_sizes=np.array([[896, 1344], [896, 896]])), "does not match image_sizes"),
    (_bad(image_sizes=np.array([[500, 700], [896, 1344]])), "multiples of the crop size 448"),
    (_bad(image_sizes=np.array([896, 1344])), "image_sizes must be integers of shape [2, 2]"),
    (_bad(image_attention_mask=np.ones((2, 7, 16, 16), np.float32)), "image_attention_mask must have shape [2, 7, 32, 32]"),
    (_bad(image_attention_mask=np.ones((2, 6, 32, 32), np.float32)), "image_attention_mask must have shape"),
    (_bad(pixel_values=np.zeros((2, 7, 3, 224, 224), np.float32)), "pixel_values must have shape"),
    ({k: v for k, v in _pack().items() if k != "image_sizes"}, "missing input 'image_sizes'"),
])
def test_bad_packs_are_refused(inputs, message):
    with pytest.raises(UsageError) as err:
        crops.check_inputs(inputs)
    assert message in str(err.value)


def test_masks_the_processor_cannot_make_are_refused():
    pack = _pack()
    mask = pack["image_attention_mask"].copy()
    mask[0, 0, 5, 5] = 0  # a hole in the global crop
    with pytest.raises(UsageError, match="global crop"):
        crops.check_inputs({**pack, "image_attention_mask": mask})
    mask = pack["image_attention_mask"].copy()
    mask[1, 3, 10, 10] = 0  # a hole inside the HD grid: not a top-left rectangle
    with pytest.raises(UsageError, match="top-left rectangle"):
        crops.check_inputs({**pack, "image_attention_mask": mask})
    with pytest.raises(UsageError, match="only 0 and 1"):
        crops.check_inputs({**pack, "image_attention_mask": pack["image_attention_mask"] * 0.5})
