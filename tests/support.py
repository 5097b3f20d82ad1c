"""Helpers shared by the test modules: the constants, functions and classes that more than one test module uses
(the fixtures shared that way are in conftest.py). No tests here: pytest collects test_*.py only; conftest.py
registers this module for assertion rewriting, so its asserts report as they did in the test modules.

Torch-free at import, as the quantize tests that import it are: what needs torch, transformers or builders/
imports them where it runs, and `RANDOM_PACKS` (builders/) is made on first use.
"""

import enum
import hashlib
import importlib
import json
import struct
import sys
import types
import zlib
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
import yaml
from PIL import Image, ImageOps

from vlm_vision_onnx.core import parity
from vlm_vision_onnx.core.parity import compare
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.families import QWEN3_VL, validation

# ---------------------------------------------------------------- quantize tests (was tests/test_quantize_support.py)
# Shared helpers of the quantize tests. The tiny exports come from conftest's `tiny_exports` fixture (both
# exporters, built once per session).
ROOT = Path(__file__).resolve().parents[1]
TINY = yaml.safe_load((ROOT / "configs" / "qwen3-vl-tiny.yaml").read_text())["vision"]
DEPTH, HEADS = TINY["depth"], TINY["num_heads"]
TOLERANCE = 1e-4


def ops(model: ir.Model, op_type: str) -> list[ir.Node]:
    """Nodes of `op_type` in the main graph."""
    return [n for n in model.graph if n.op_type == op_type]


def all_ops(model: ir.Model, op_type: str) -> list[ir.Node]:
    """Nodes of `op_type`, inside Loop bodies too (the per-frame attention)."""
    return [n for n in ir.traversal.RecursiveGraphIterator(model.graph) if n.op_type == op_type]


class Checker:
    """Runs models at the export's validation layouts against the export's outputs in ORT."""

    def __init__(self, model_file: Path):
        self.layouts = validation.from_report(model_file, QWEN3_VL)
        assert self.layouts and len(self.layouts) >= 10
        self.inputs = validation.layout_inputs(QWEN3_VL, self.layouts, {"patch_dim": "1536"})
        self.reference = parity.run_all(open_session(model_file, 1), self.inputs)

    def max_abs(self, model: ir.Model) -> float:
        """Largest max abs diff over layouts and outputs (asserts every layout is within tolerance)."""
        records = parity.check(open_session(model, 1), self.layouts, self.inputs, self.reference,
                               TOLERANCE)
        bad = [r["case"] for r in records if not r["ok"]]
        assert not bad, f"parity fails at {bad}"
        return parity.worst(records)["max_abs"]


def run_graph(model: ir.Model, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    return open_session(model, 1).run(None, feeds)


# ---------------------------------------------------------------- test images (from test_preprocess_qwen3_vl)
# `write_images`: the test images every preprocessing test uses: the smoke sizes, odd sizes, every pillow mode
# the loader converts, an EXIF-rotated JPEG and real photographs from skimage.data.

# (height, width) of the generated RGB images: the smoke sizes and odd ones
SIZES = {"224x224": (224, 224), "336x336": (336, 336), "448x448": (448, 448), "512x384": (512, 384),
         "37x53": (37, 53), "4000x3000": (3000, 4000)}
MODES = ["gray", "rgba", "palette", "gray16", "rgb16", "exif_jpeg"]
PHOTOS = ["astronaut", "coffee", "camera"]


def _pixels(height: int, width: int, seed: int) -> np.ndarray:
    """Smooth gradients plus noise, uint8 [H, W, 3]: resampling errors show up in both."""
    rng = np.random.default_rng(seed)
    y = np.arange(height, dtype=np.int16)[:, None] * 255 // max(height - 1, 1)
    x = np.arange(width, dtype=np.int16)[None, :] * 255 // max(width - 1, 1)
    base = np.stack(np.broadcast_arrays(x, y, (x + y) % 256), axis=-1)
    return np.clip(base + rng.integers(-40, 41, base.shape, dtype=np.int16), 0, 255).astype(np.uint8)


def _write_png16(path: Path, rgb: np.ndarray) -> None:
    """A 16-bit RGB PNG (pillow reads those but cannot write them): IHDR bit depth 16, colour type 2."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    height, width = rgb.shape[:2]
    rows = b"".join(b"\x00" + row.astype(">u2").tobytes() for row in rgb)
    header = struct.pack(">IIBBBBB", width, height, 16, 2, 0, 0, 0)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows))
                     + chunk(b"IEND", b""))


def write_images(folder: Path) -> dict[str, Path]:
    """Write every test image into `folder`; returns {name: path}."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for i, (name, (h, w)) in enumerate(SIZES.items()):
        paths[name] = folder / f"{name}.png"
        Image.fromarray(_pixels(h, w, i)).save(paths[name], compress_level=1)
    paths["1x1000"] = folder / "1x1000.png"
    Image.fromarray(_pixels(1, 1000, 9)).save(paths["1x1000"])
    rgb = _pixels(120, 200, 10)
    paths["gray"] = folder / "gray.png"
    Image.fromarray(rgb[..., 0]).save(paths["gray"])
    rgba = np.concatenate([rgb, np.linspace(0, 255, 200, dtype=np.uint8)[None, :, None].repeat(120, 0)], -1)
    paths["rgba"] = folder / "rgba.png"
    Image.fromarray(rgba, "RGBA").save(paths["rgba"])
    paths["palette"] = folder / "palette.png"
    Image.fromarray(rgb).convert("P", palette=Image.Palette.ADAPTIVE, colors=64).save(paths["palette"], transparency=0)
    paths["gray16"] = folder / "gray16.png"
    Image.fromarray(rgb[..., 1].astype(np.uint16) * 257 // 3).save(paths["gray16"])  # mode I;16
    paths["rgb16"] = folder / "rgb16.png"
    _write_png16(paths["rgb16"], rgb.astype(np.uint16) * 257)
    paths["exif_jpeg"] = folder / "exif.jpg"
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation: rotate 90 degrees clockwise to display
    Image.fromarray(rgb).save(paths["exif_jpeg"], exif=exif, quality=95)
    skdata = pytest.importorskip("skimage.data", reason="scikit-image (dev extra) ships the sample photos")
    for name in PHOTOS:
        paths[name] = folder / f"{name}.png"
        Image.fromarray(getattr(skdata, name)()).save(paths[name])
    return paths


def reference_image(path: Path) -> Image.Image:
    """The pillow image transformers' processors get from a file: decoded, EXIF orientation applied."""
    return ImageOps.exif_transpose(Image.open(path))


def shared_images(tmp_path_factory) -> dict[str, Path]:
    """`write_images` once per test session (every preprocessing and embed test reads the same files)."""
    folder = tmp_path_factory.getbasetemp() / "test-images"
    done = folder / ".complete"
    if not done.exists():
        paths = write_images(folder)
        done.write_text("\n".join(f"{k}={v.name}" for k, v in paths.items()))
    return {k: folder / v for k, v in (line.split("=") for line in done.read_text().splitlines())}


# ---------------------------------------------------------------- torchvision stand-in (from test_preprocess_resample)
# `torchvision_functional()`: a stand-in for `torchvision.transforms.v2.functional` built from torch ops, so that
# the transformers processors that need torchvision (Phi-4-multimodal images, Qwen3-VL video) run their own code
# in the tests. Its `resize` follows torchvision's `resize_image` on CPU: uint8 images go to torch's native uint8
# kernel for bicubic, and for bilinear on AVX2 CPUs (on AVX-512-only torch builds torchvision casts bilinear uint8
# to float32 and rounds, which moves some pixels by one grey level: the port follows the native uint8 kernel);
# float images are interpolated as they are. `pad` is constant padding with a per-channel fill, `normalize` is
# (x - mean) / std. The functions import torch when they run (this module is torch-free at import).
class InterpolationMode(enum.Enum):
    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def _resize(image, size, interpolation=InterpolationMode.BILINEAR, max_size=None, antialias=True):
    import torch
    import torch.nn.functional as F

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
    import torch

    left, top, right, bottom = padding
    fill = torch.as_tensor(fill, dtype=image.dtype).reshape(-1, 1, 1)
    out = fill.expand(*image.shape[:-2], image.shape[-2] + top + bottom, image.shape[-1] + left + right).clone()
    out[..., top: top + image.shape[-2], left: left + image.shape[-1]] = image
    return out


def _normalize(image, mean, std, inplace=False):
    import torch

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


# ---------------------------------------------------------------- video (from test_preprocess_qwen3_vl_video)
def stubbed_video_processor(monkeypatch, module_name: str, class_name: str):
    """transformers' video processor `class_name` of `module_name` (class defaults) on the torchvision stand-in."""
    functional = install_torchvision_stub(monkeypatch)
    import transformers.video_processing_utils as video_utils

    module = importlib.import_module(module_name)
    monkeypatch.setattr(video_utils, "tvF", functional, raising=False)
    monkeypatch.setattr(module, "tvF", functional, raising=False)
    return getattr(module, class_name)()


def write_frames(folder: Path, count: int, height: int, width: int) -> list[Path]:
    """`count` RGB PNG frames of one size (frame i: its own gradients and noise)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"frame_{i:03d}.png" for i in range(count)]
    for i, path in enumerate(paths):
        Image.fromarray(_pixels(height, width, 100 + i)).save(path)
    return paths


def reference(processor, paths: list[Path]):
    frames = [reference_image(p).convert("RGB") for p in paths]
    return processor(videos=[frames], do_sample_frames=False, cap_pixels_per_frame=False, return_tensors="np")


# ---------------------------------------------------------------- embed (from test_embed)
QWEN = "qwen3-vl-tiny"
PACK = ["astronaut", "coffee", "camera", "37x53", "512x384", "rgba", "exif_jpeg"]


def qwen_image_reference(package: Path, visual, path: Path) -> tuple[list, np.ndarray]:
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from builders.qwen_vl.model import reference_outputs

    batch = Qwen2VLImageProcessorPil.from_pretrained(str(package))(reference_image(path), return_tensors="np")
    return reference_outputs(visual, batch["pixel_values"], batch["image_grid_thw"]), batch["image_grid_thw"][0]


def assert_entry(result, entry: str, expected: list, names: list, tolerance: float) -> None:
    for name, reference in zip(names, expected, strict=True):
        metrics = compare(result[f"{entry}.{name}"], reference, tolerance)
        assert metrics["ok"], f"{entry}.{name}: {metrics}"


# ---------------------------------------------------------------- export parity (from test_export_parity)
def __getattr__(name: str):
    """`RANDOM_PACKS`, made on first use (then a plain attribute): builders/ imports torch, and torch-free test
    modules import this module."""
    if name != "RANDOM_PACKS":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from builders.qwen_vl import layouts

    # Seeded random packs plus the awkward ones: odd multiples, a single-row strip, mixed packs with video.
    random_packs = layouts.random_grids(np.random.default_rng(2026), 2, count=8) + [
        [[1, 18, 46]],
        [[1, 2, 64]],
        [[1, 64, 2]],
        [[1, 18, 46], [3, 4, 8], [1, 2, 64]],
        [[2, 10, 6], [1, 6, 10], [1, 2, 2]],
    ]
    globals()["RANDOM_PACKS"] = random_packs
    return random_packs


def assert_cases_within_tolerance(cases: list[dict]) -> None:
    """At least three same-patch-count layouts of the tiny export example (496 patches), and every case's every
    output within the export tolerance (1e-4 relative to max(1, max |ref|)) at cosine > 0.9999."""
    same_n = [c for c in cases if c["case"].startswith("same patch count")]
    assert len(same_n) >= 3 and {c["num_patches"] for c in same_n} == {496}
    for case in cases:
        for metrics in case["outputs"].values():
            assert metrics["max_abs"] <= 1e-4 * max(1.0, metrics["scale"]) and metrics["cosine"] > 0.9999


# ---------------------------------------------------------------- run-time shapes (from test_segment_attention)
PATCH_DIM = 1536


def runtime_shapes(model: onnx.ModelProto | str, feed: dict[str, np.ndarray], tmp_path) -> list[tuple]:
    """(op type, output shape) of every node ONNX Runtime ran for `feed`, Loop bodies included."""
    options = ort.SessionOptions()
    options.enable_profiling = True
    options.profile_file_prefix = str(tmp_path / "profile")
    source = model if isinstance(model, str) else model.SerializeToString()
    session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
    session.run(None, feed)
    events = json.loads(Path(session.end_profiling()).read_text())
    return [(e["args"]["op_name"], shape) for e in events if e.get("cat") == "Node" and "op_name" in e["args"]
            for output in e["args"].get("output_type_shape", []) for shape in output.values()]


def quadratic_tensors(shapes: list[tuple], num_patches: int, widest_row: int = PATCH_DIM) -> list[tuple]:
    """The recorded tensors of N x N size: two axes of N, or more elements than N x the widest row."""
    return [(op, shape) for op, shape in shapes
            if sum(d == num_patches for d in shape) >= 2 or int(np.prod(shape)) > num_patches * widest_row]


# ---------------------------------------------------------------- checkpoint (from test_checkpoint)
TEXT = {"vocab_size": 128, "hidden_size": 96, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 48,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [8, 8, 8]}}


# ---------------------------------------------------------------- calibration (from test_quantize_calibration)
def digest(items: list[dict[str, np.ndarray]]) -> list[str]:
    """sha256 of every item: names, dtypes, shapes and bytes."""
    out = []
    for item in items:
        h = hashlib.sha256()
        for name, array in item.items():
            h.update(f"{name}:{array.dtype}:{array.shape}".encode())
            h.update(np.ascontiguousarray(array).tobytes())
        out.append(h.hexdigest())
    return out
