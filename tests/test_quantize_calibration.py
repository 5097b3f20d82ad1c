"""The calibration set (quantize/calibration.py): real photos of skimage.data at several sizes and a video,
through each family's own processor, identical on every call and in every process, without torch.

The processor folders are what a release package of the tiny configs holds (`processor_folder` from an
export report of random weights naming the config): no export runs here."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from quantize import calibration
from tests.support import digest
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families import PHI4_MM, QWEN3_VL

pytest.importorskip("skimage.data", reason="scikit-image (dev extra) ships the calibration photos")

ROOT = Path(__file__).resolve().parents[1]
FEW = ("astronaut", "camera")  # an RGB and a grayscale photo, for the quicker checks


def tiny(name: str) -> tuple[dict, dict]:
    """(export report, ONNX metadata) of a random-weight export of configs/NAME.yaml, as far as the
    processor needs them."""
    path = ROOT / "configs" / f"{name}.yaml"
    config = yaml.safe_load(path.read_text())
    report = {"stage": "export", "family": config["family"], "weights": "random", "config": str(path)}
    vision = config["vision"]
    metadata = {"family": config["family"]}
    if config["family"] == QWEN3_VL.name:
        metadata.update(spatial_merge_size=str(vision["spatial_merge_size"]), patch_dim=str(
            vision["in_channels"] * vision["temporal_patch_size"] * vision["patch_size"] ** 2))
    return report, metadata


@pytest.fixture(scope="module")
def qwen(tmp_path_factory) -> tuple[dict, Path]:
    report, metadata = tiny("qwen3-vl-tiny")
    return metadata, calibration.processor_folder(report, metadata, tmp_path_factory.mktemp("qwen-processor"))


@pytest.fixture(scope="module")
def phi(tmp_path_factory) -> tuple[dict, Path]:
    report, metadata = tiny("phi-4-mm-tiny")
    return metadata, calibration.processor_folder(report, metadata, tmp_path_factory.mktemp("phi-processor"))


def test_qwen_items_cover_every_photo_size_and_a_video_identically_twice(qwen):
    metadata, folder = qwen
    named = calibration.named_items(metadata, folder)
    first = [feeds for _, feeds in named]
    assert digest(first) == digest(calibration.items(metadata, folder))  # byte-identical on a second call
    assert len(first) == len(calibration.PHOTOS) * len(calibration.SIZES) + 1
    assert {"astronaut", "chelsea", "coffee", "rocket"} <= set(calibration.PHOTOS)
    for (name, feeds) in named:
        assert list(feeds) == list(QWEN3_VL.input_names)
        assert feeds["pixel_values"].dtype == np.float32 and feeds["grid_thw"].dtype == np.int64
        assert feeds["pixel_values"].shape == (int(np.prod(feeds["grid_thw"], 1).sum()), 1536)
    grids = {name.split()[-1]: feeds["grid_thw"].tolist() for name, feeds in named[:len(calibration.SIZES)]}
    # the sizes are multiples of patch 16 x merge 2 within the pixel budget: the processor keeps them
    assert grids == {"256x256": [[1, 16, 16]], "448x448": [[1, 28, 28]], "512x768": [[1, 32, 48]]}
    video_name, video = named[-1]
    assert video_name == calibration.VIDEO_NAME and video["grid_thw"].tolist() == [[2, 22, 30]]  # t = 4 frames / 2
    assert len(set(digest(first))) == len(first)  # no two items alike (camera is grayscale, still distinct)


def test_same_arrays_in_another_process(qwen):
    metadata, folder = qwen
    code = ("import json, sys; from tests.support import digest; from quantize import calibration; "
            f"print(json.dumps(digest(calibration.items({metadata!r}, {str(folder)!r}, photos={FEW!r}))))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.splitlines()[-1]) == digest(calibration.items(metadata, folder, photos=FEW))


def test_phi_items_take_no_video_unless_asked(phi):
    metadata, folder = phi
    named = calibration.named_items(metadata, folder, photos=FEW)
    assert len(named) == len(FEW) * len(calibration.SIZES)  # video=None: Phi-4-multimodal takes no video
    for _, feeds in named:
        assert list(feeds) == list(PHI4_MM.input_names)
        crops = feeds["pixel_values"].shape[1]
        assert feeds["pixel_values"].shape == (1, crops, 3, 448, 448) and crops >= 2  # global crop + tiles
        assert feeds["image_attention_mask"].shape == (1, crops, 32, 32)
        assert feeds["image_sizes"].dtype == np.int64 and feeds["image_sizes"].shape == (1, 2)
    assert named[-1][1]["pixel_values"].shape[1] == 5  # 512x768: 2 x 2 crops + the global one
    assert digest([f for _, f in named]) == digest(calibration.items(metadata, folder, photos=FEW))
    with pytest.raises(UsageError, match="video"):
        calibration.items(metadata, folder, photos=FEW, video=True)


def test_reader_feeds_each_item_once_then_none(qwen):
    metadata, folder = qwen
    feeds = calibration.items(metadata, folder, photos=FEW[:1], sizes=calibration.SIZES[:2], video=False)
    reader = calibration.reader(feeds)
    got = [reader.get_next() for _ in range(len(feeds))]
    assert reader.get_next() is None and len(reader) == len(feeds) == 2
    assert digest(got) == digest(feeds)
    reader.rewind()
    assert digest(list(reader)) == digest(feeds)  # the ORT reader protocol: iteration stops at None


def test_a_processor_that_does_not_fit_the_model_is_refused(qwen):
    metadata, folder = qwen
    with pytest.raises(UsageError, match="does not fit the model"):
        calibration.items({**metadata, "patch_dim": "768"}, folder, photos=FEW[:1], sizes=[(256, 256)], video=False)
    with pytest.raises(UsageError, match="preprocessor_config.json"):
        calibration.items(metadata, folder / "missing", photos=FEW[:1])
    with pytest.raises(UsageError, match="not a calibration photo"):
        calibration.items(metadata, folder, photos=["eagle"])  # eagle needs a download: never


def test_export_report_follows_the_input_links(tmp_path):
    folders = {name: tmp_path / name for name in ("export", "surgery", "optimized")}
    chain = [("export", None), ("surgery", "export"), ("optimize", "surgery")]
    for (stage, source), folder in zip(chain, folders.values()):
        folder.mkdir()
        (folder / "model.onnx").write_bytes(b"x")
        report = {"stage": stage, **({"input": str(folders[source] / "model.onnx")} if source else {})}
        (folder / "report.json").write_text(json.dumps(report))
    assert calibration.export_report(folders["optimized"])["stage"] == "export"
    (folders["export"] / "model.onnx").unlink()
    with pytest.raises(UsageError, match="processor folder"):
        calibration.export_report(folders["optimized"])


def test_the_module_imports_no_torch():
    code = "import quantize.calibration, sys; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
