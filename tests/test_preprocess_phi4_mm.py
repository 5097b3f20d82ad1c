"""The numpy port of the Phi-4-multimodal image processor equals transformers' own processor.

Derivation of the reference: transformers' `Phi4MultimodalImageProcessor` (5.23) is run itself — its
`preprocess`, `dynamic_preprocess`, crop / mask reshapes, token count and pack padding — with the
torchvision functions it calls replaced by the torch-op stand-in of `tests.support`
(`resize` = torch.nn.functional.interpolate as torchvision calls it on CPU, `pad`, `normalize`). Its
input is the pillow image of each file with the EXIF orientation applied; it makes RGB itself.
"""

import numpy as np
import pytest

from tests.support import MODES, PHOTOS, SIZES, reference_image, shared_images
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.phi4_mm import preprocess as phi4_mm
from vlm_vision_onnx.runtime import images

KEYS = {"pixel_values": "image_pixel_values", "image_attention_mask": "image_attention_mask",
        "image_sizes": "image_sizes"}


@pytest.fixture(scope="module")
def test_images(tmp_path_factory):
    return shared_images(tmp_path_factory)


def check_equal(got: dict, reference) -> None:
    for ours, theirs in KEYS.items():
        expected = np.asarray(reference[theirs])
        assert got[ours].shape == expected.shape, ours
        assert np.abs(got[ours] - expected).max() <= 1e-5, ours
    assert got["image_sizes"].dtype == np.int64
    assert got["num_img_tokens"] == list(reference["num_img_tokens"])


def test_defaults_are_the_processors(transformers_processor):
    proc = transformers_processor
    assert dict(phi4_mm.DEFAULTS["size"]) == {"height": proc.size["height"], "width": proc.size["width"]}
    for key in ("patch_size", "dynamic_hd", "rescale_factor"):
        assert phi4_mm.DEFAULTS[key] == getattr(proc, key)
    assert list(phi4_mm.DEFAULTS["image_mean"]) == list(proc.image_mean)
    assert list(phi4_mm.DEFAULTS["image_std"]) == list(proc.image_std)


@pytest.mark.parametrize("name", [*SIZES, *MODES, *PHOTOS])
def test_preprocess_equals_processor(name, test_images, transformers_processor, tmp_path):
    phi4_mm.save_config(tmp_path)
    got = phi4_mm.preprocess([images.load_rgb(test_images[name])], phi4_mm.load_config(tmp_path))
    reference = transformers_processor(reference_image(test_images[name]), return_tensors="np")
    check_equal(got, reference)
    crops = got["pixel_values"].shape[1]
    assert got["pixel_values"].shape == (1, crops, 3, 448, 448)
    assert got["image_attention_mask"].shape == (1, crops, 32, 32)


def test_mixed_pack_pads_like_processor(test_images, transformers_processor):
    names = ["224x224", "512x384", "37x53", "coffee"]
    got = phi4_mm.preprocess([images.load_rgb(test_images[n]) for n in names], phi4_mm.DEFAULTS)
    reference = transformers_processor([reference_image(test_images[n]) for n in names], return_tensors="np")
    check_equal(got, reference)
    assert got["pixel_values"].shape[1] > 2  # padded to the largest crop count
    assert (got["pixel_values"][0, 2:] == 0).all() and (got["image_attention_mask"][0, 2:] == 1).all()


def test_partial_mask_zeroes_padded_patches(test_images):
    """A 512 x 384 (H x W) image gets 1 x 2 crops (448 x 896): it is resized to 448 x int(512 * 448 / 384)
    = 597 rows and padded by 299 rows, so the last floor(299 / 14) = 21 of the 64 patch rows are masked."""
    got = phi4_mm.preprocess([images.load_rgb(test_images["512x384"])], phi4_mm.DEFAULTS)
    assert got["image_sizes"].tolist() == [[896, 448]]
    top, bottom = got["image_attention_mask"][0, 1], got["image_attention_mask"][0, 2]
    assert top.all() and bottom[: 32 - 21].all() and not bottom[32 - 21:].any()


def test_extreme_aspect_ratio_refused_like_processor(test_images, transformers_processor):
    with pytest.raises(ValueError, match="aspect ratio is very extreme"):
        transformers_processor(reference_image(test_images["1x1000"]))
    with pytest.raises(UsageError, match="aspect ratio is too extreme"):
        phi4_mm.preprocess([images.load_rgb(test_images["1x1000"])], phi4_mm.DEFAULTS)


def test_config_round_trip_and_foreign_config(tmp_path):
    phi4_mm.save_config(tmp_path, dynamic_hd=16)
    assert phi4_mm.load_config(tmp_path)["dynamic_hd"] == 16
    (tmp_path / "preprocessor_config.json").write_text('{"merge_size": 2, "temporal_patch_size": 2}')
    with pytest.raises(UsageError, match="not a Phi-4-multimodal"):
        phi4_mm.load_config(tmp_path)


def test_crop_grid_caps_the_crop_count():
    cols, rows = phi4_mm.crop_grid(3000, 4000, 448, 36)  # 9 x 7 = 63 crops would exceed 36
    assert cols * rows <= 36 and cols >= rows
    assert phi4_mm.crop_grid(448, 448, 448, 36) == (1, 1)


@pytest.mark.parametrize("key, value", [("image_mean", [{"a": 1}, 0.5, 0.5]), ("image_std", [0.5, 0.0, 0.5]),
                                        ("dynamic_hd", "36"), ("size", {"height": 10**9, "width": 10**9})])
def test_processor_values_of_another_kind_are_refused(tmp_path, key, value):
    """Found by tools/fuzz: an image_mean holding a mapping ended in numpy's TypeError."""
    import json

    (tmp_path / "preprocessor_config.json").write_text(json.dumps(phi4_mm.config_dict(**{key: value})))
    with pytest.raises(UsageError, match=f"{key} = .* is not what the processor writes"):
        phi4_mm.load_config(tmp_path)
