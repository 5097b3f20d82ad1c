"""Qwen image preprocessing from files (families/qwen_vl/preprocess.py: numpy and pillow, no transformers) equals
transformers' processor on the same files, bit for bit.

The reference is `Qwen2VLImageProcessorPil.from_pretrained(package folder)` applied to the pillow image
of each file with its EXIF orientation applied (what `transformers.image_utils.load_image` does before
its own RGB conversion): the processor then makes RGB itself (transparency onto white). The runtime
loads the file with `runtime.images` (its own RGB conversion) and preprocesses with its port configured from the
same `preprocessor_config.json`, so this checks the file loading, the configuration and the port end to end:
at every size (37x53 up to 4000x3000), mode (grayscale, RGBA, palette, 16-bit, EXIF-rotated) and photo, with
Qwen3-VL's settings; with Qwen2-VL's (patch 14, CLIP normalisation) and a checkpoint's own config (min_pixels /
max_pixels keys, another filter, no rescale) on a subset.

The test images every preprocessing test uses (`write_images`, `shared_images`) are tests.support's.
"""

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from transformers.image_utils import load_image
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

from tests.support import MODES, PHOTOS, SIZES, _pixels, reference_image, shared_images
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.qwen_vl import preprocess as qwen3_vl
from vlm_vision_onnx.families.qwen_vl import processor_files
from vlm_vision_onnx.families.qwen_vl.generations import QWEN2_VL
from vlm_vision_onnx.families.qwen_vl.layouts import MAX_PIXELS, MIN_PIXELS
from vlm_vision_onnx.runtime import images

#: Configs beside Qwen3-VL's: Qwen2-VL's published settings, and a checkpoint's file as older transformers wrote it
#: (min_pixels / max_pixels keys beside size, bilinear, rescale off: the normalisation then sees 0..255).
OTHER_CONFIGS = {
    "qwen2-vl": QWEN2_VL.processor,
    "checkpoint keys": {**QWEN2_VL.processor, "min_pixels": 4 * 28 * 28, "max_pixels": 64 * 28 * 28, "resample": 2,
                        "do_rescale": False, "image_mean": [127.5, 127.5, 127.5], "image_std": [64.0, 64.0, 64.0]},
}


@pytest.fixture(scope="module")
def test_images(tmp_path_factory) -> dict[str, Path]:
    return shared_images(tmp_path_factory)


@pytest.fixture(scope="module")
def package_folder(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("qwen_processor")
    processor_files.save_config(folder)
    return folder


def _equal_to_processor(folder: Path, paths: list[Path]) -> np.ndarray:
    """Asserts the port's output on `paths` is transformers' to the bit; returns the grids."""
    reference = Qwen2VLImageProcessorPil.from_pretrained(str(folder))([reference_image(p) for p in paths],
                                                                       return_tensors="np")
    pixel_values, grid = qwen3_vl.preprocess(qwen3_vl.load_processor(folder), [images.load_rgb(p) for p in paths])
    np.testing.assert_array_equal(grid, reference["image_grid_thw"])
    assert pixel_values.dtype == np.float32 and grid.dtype == np.int64
    np.testing.assert_array_equal(pixel_values, reference["pixel_values"])
    return grid


def test_saved_config_is_qwen3_vl(package_folder):
    proc = Qwen2VLImageProcessorPil.from_pretrained(str(package_folder))
    assert (proc.patch_size, proc.temporal_patch_size, proc.merge_size) == (16, 2, 2)
    assert (proc.size["shortest_edge"], proc.size["longest_edge"]) == (MIN_PIXELS, MAX_PIXELS)
    assert list(proc.image_mean) == [0.5] * 3 and list(proc.image_std) == [0.5] * 3
    assert qwen3_vl.load_processor(package_folder).to_dict() == {
        k: (list(v) if isinstance(v, tuple) else v) for k, v in proc.to_dict().items()
        if k in qwen3_vl.load_processor(package_folder).to_dict()}


@pytest.mark.parametrize("name", [*SIZES, *MODES, *PHOTOS])
def test_preprocess_equals_processor(name, test_images, package_folder):
    _equal_to_processor(package_folder, [test_images[name]])


@pytest.mark.parametrize("config", OTHER_CONFIGS)
@pytest.mark.parametrize("name", ["37x53", "4000x3000", "rgba", "gray16", "coffee"])
def test_other_settings_equal_processor(config, name, test_images, tmp_path):
    """The same on Qwen2-VL's settings and on a checkpoint's own config (the port reads what the class reads)."""
    if config == "checkpoint keys":  # written by hand: min_pixels / max_pixels override the size beside them
        settings = {k: v for k, v in OTHER_CONFIGS[config].items() if k not in ("min_pixels", "max_pixels")}
        (tmp_path / qwen3_vl.CONFIG_FILE).write_text(json.dumps({
            **settings, "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2VLProcessor",
            "size": {"shortest_edge": 3136, "longest_edge": 12845056}, "do_center_crop": None,
            "min_pixels": OTHER_CONFIGS[config]["min_pixels"], "max_pixels": OTHER_CONFIGS[config]["max_pixels"]}))
        assert qwen3_vl.load_processor(tmp_path).max_pixels == 64 * 28 * 28
    else:
        processor_files.save_config(tmp_path, OTHER_CONFIGS[config])
    _equal_to_processor(tmp_path, [test_images[name]])


def test_mixed_pack_equals_processor(test_images, package_folder):
    names = ["224x224", "512x384", "37x53", "rgba", "coffee"]
    grid = _equal_to_processor(package_folder, [test_images[n] for n in names])
    assert len({tuple(g) for g in grid.tolist()}) == len(names)  # really mixed sizes


def test_exif_rotation_as_transformers_load_image(test_images):
    loaded = images.load_rgb(test_images["exif_jpeg"])
    assert loaded.shape == (200, 120, 3)  # 120 x 200 stored, shown rotated
    np.testing.assert_array_equal(loaded, np.asarray(load_image(str(test_images["exif_jpeg"]))))


@pytest.mark.parametrize("name", ["gray", "palette", "gray16", "rgb16"])
def test_modes_become_rgb_as_transformers_load_image(name, test_images):
    """Without transparency, the processors' conversion is pillow's convert('RGB'), as load_image's."""
    loaded = images.load_rgb(test_images[name])
    assert loaded.dtype == np.uint8 and loaded.shape[2] == 3
    if name != "palette":  # the palette image has a transparent entry: composited onto white instead
        np.testing.assert_array_equal(loaded, np.asarray(load_image(str(test_images[name]))))


def test_transparency_composited_onto_white(test_images):
    rgba = np.asarray(Image.open(test_images["rgba"]))
    loaded = images.load_rgb(test_images["rgba"])
    np.testing.assert_array_equal(loaded[:, 0], np.full_like(loaded[:, 0], 255))  # alpha 0: white
    np.testing.assert_array_equal(loaded[:, -1], rgba[:, -1, :3])  # alpha 255: the colour


def test_extreme_aspect_ratio_refused_like_processor(test_images, package_folder):
    with pytest.raises(ValueError, match="aspect ratio"):
        Qwen2VLImageProcessorPil.from_pretrained(str(package_folder))(reference_image(test_images["1x1000"]))
    with pytest.raises(UsageError, match="aspect ratio"):
        qwen3_vl.preprocess(qwen3_vl.load_processor(package_folder), [images.load_rgb(test_images["1x1000"])])


def test_bad_files_name_the_file(tmp_path):
    text = tmp_path / "notes.png"
    text.write_text("not an image\n")
    good = tmp_path / "good.png"
    Image.fromarray(_pixels(64, 64, 0)).save(good)
    truncated = tmp_path / "truncated.png"
    truncated.write_bytes(good.read_bytes()[:200])
    (tmp_path / "empty").mkdir()
    for path in (text, truncated, tmp_path / "missing.png"):
        with pytest.raises(UsageError, match=path.name):
            images.load_rgb(path)
    with pytest.raises(UsageError, match="empty"):
        images.expand([tmp_path / "empty"])


def test_missing_or_foreign_config(tmp_path):
    with pytest.raises(UsageError, match="preprocessor_config.json is missing"):
        qwen3_vl.load_processor(tmp_path)
    (tmp_path / "preprocessor_config.json").write_text('{"dynamic_hd": 36}')
    with pytest.raises(UsageError, match="not a Qwen2-VL/Qwen3-VL"):
        qwen3_vl.load_processor(tmp_path)
