"""The numpy port of the Qwen3-VL video processor equals transformers' `Qwen3VLVideoProcessor`.

Derivation of the reference: transformers' processor (5.23) is run itself — `smart_resize`, the fused
rescale + normalise, `patchify` with its temporal padding, the grouping by shape — with the torchvision
functions it calls replaced by the torch-op stand-in of `tests.support` (its bicubic resize
of uint8 frames is torch's native uint8 antialiased kernel, as torchvision calls it on CPU). Frames are
given as already sampled (`do_sample_frames=False`) and the per-frame pixel cap is off
(`cap_pixels_per_frame=False`, the processor's current default).
"""

import json

import numpy as np
import pytest

from tests.support import reference, write_frames
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.qwen_vl import preprocess_video as qwen3_vl_video
from vlm_vision_onnx.runtime import images

# (frames, height, width): even and odd frame counts, odd sizes, tall and wide, below the minimum
VIDEOS = [(4, 224, 224), (3, 37, 53), (2, 300, 500), (5, 480, 640), (6, 1000, 30), (4, 512, 384)]


def test_defaults_are_the_processors(transformers_video_processor):
    proc = transformers_video_processor
    defaults = qwen3_vl_video.DEFAULTS
    assert defaults["size"] == {"shortest_edge": proc.size["shortest_edge"], "longest_edge": proc.size["longest_edge"]}
    for key in ("patch_size", "temporal_patch_size", "merge_size", "rescale_factor"):
        assert defaults[key] == getattr(proc, key)
    assert list(defaults["image_mean"]) == list(proc.image_mean)
    assert list(defaults["image_std"]) == list(proc.image_std)


@pytest.mark.parametrize("video", VIDEOS, ids=lambda v: "{}x{}x{}".format(*v))
def test_preprocess_equals_processor(video, transformers_video_processor, tmp_path):
    paths = write_frames(tmp_path, *video)
    expected = reference(transformers_video_processor, paths)
    pixel_values, grid = qwen3_vl_video.preprocess([images.load_rgb(p) for p in paths], qwen3_vl_video.settings())
    np.testing.assert_array_equal(grid, expected["video_grid_thw"])
    assert grid[0, 0] == (video[0] + 1) // 2  # t: frames over the temporal patch, the last one repeated
    assert pixel_values.dtype == np.float32 and pixel_values.shape == expected["pixel_values_videos"].shape
    assert np.abs(pixel_values - expected["pixel_values_videos"]).max() <= 1e-5


def test_settings_from_package_files(tmp_path):
    assert qwen3_vl_video.settings(tmp_path, {"patch_size": 14, "merge_size": 2})["patch_size"] == 14
    (tmp_path / "video_preprocessor_config.json").write_text(json.dumps({"size": {"shortest_edge": 4096,
                                                                                "longest_edge": 1 << 24}}))
    values = qwen3_vl_video.settings(tmp_path, {"patch_size": 14})
    assert values["size"]["shortest_edge"] == 4096 and values["patch_size"] == 16


def test_bad_videos(tmp_path):
    one = write_frames(tmp_path / "one", 1, 64, 64)
    with pytest.raises(UsageError, match="at least 2 frames"):
        qwen3_vl_video.preprocess([images.load_rgb(p) for p in one], qwen3_vl_video.settings())
    mixed = write_frames(tmp_path / "a", 1, 64, 64) + write_frames(tmp_path / "b", 1, 64, 80)
    with pytest.raises(UsageError, match="one size"):
        qwen3_vl_video.preprocess([images.load_rgb(p) for p in mixed], qwen3_vl_video.settings())


# ---------------------------------------------------------------- Qwen2-VL / Qwen2.5-VL: Qwen2VLVideoProcessor
def test_qwen2_defaults_are_the_processors(transformers_qwen2_video_processor):
    proc, defaults = transformers_qwen2_video_processor, qwen3_vl_video.QWEN2_DEFAULTS
    assert defaults["size"] == {"shortest_edge": proc.size["shortest_edge"], "longest_edge": proc.size["longest_edge"]}
    for key in ("patch_size", "temporal_patch_size", "merge_size", "rescale_factor"):
        assert defaults[key] == getattr(proc, key)
    assert list(defaults["image_mean"]) == list(proc.image_mean)
    assert list(defaults["image_std"]) == list(proc.image_std)


@pytest.mark.parametrize("video", VIDEOS + [(1, 224, 224)], ids=lambda v: "{}x{}x{}".format(*v))
def test_qwen2_preprocess_equals_processor(video, transformers_qwen2_video_processor, tmp_path):
    """Each frame's own pixel budget (no clip budget); one frame repeated to the temporal patch."""
    paths = write_frames(tmp_path, *video)
    expected = reference(transformers_qwen2_video_processor, paths)
    config = qwen3_vl_video.settings(None, None, qwen3_vl_video.QWEN2_DEFAULTS, "frame")
    pixel_values, grid = qwen3_vl_video.preprocess([images.load_rgb(p) for p in paths], config)
    np.testing.assert_array_equal(grid, expected["video_grid_thw"])
    assert pixel_values.shape == expected["pixel_values_videos"].shape
    assert np.abs(pixel_values - expected["pixel_values_videos"]).max() <= 1e-5
