"""`python -m runtime embed` on packages of the tiny encoders matches the eager model on the same files.

Reference = the model's own processor + the PyTorch model: for Qwen3-VL images transformers'
`Qwen2VLImageProcessorPil` (configured from the package) and the eager tower with the export's weights
(random, the export's seed), run on each image alone; for the video transformers' `Qwen3VLVideoProcessor`
on the torchvision stand-in (see test_preprocess_qwen3_vl_video); for Phi-4-multimodal transformers'
`Phi4MultimodalImageProcessor` on the stand-in and the eager image embedding. `embed` runs everything
as one pack, so a match per entry also shows that packing changes nothing. Tolerance: the export's
(max |diff| <= 1e-4 * max(1, max |ref|)).

The Qwen3-VL package is made by `python -m release package` from the tiny TorchScript export (conftest);
the Phi-4 package folder is assembled here from a tiny export (onnx/vision_encoder.onnx, the processor
config and a manifest naming the family): what `embed` reads, without the export's validation run.
"""

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from builders.config import load_config
from tests.conftest import single_error
from tests.support import (
    PACK,
    QWEN,
    _pixels,
    assert_entry,
    qwen_image_reference,
    reference_image,
    shared_images,
    write_frames,
)
from tests.support import reference as video_reference
from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.parity import compare
from vlm_vision_onnx.families.phi4_mm import preprocess as phi4_mm
from vlm_vision_onnx.families.qwen_vl import contract
from vlm_vision_onnx.runtime import __main__ as runtime_cli

PHI4 = "phi-4-mm-tiny"


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> dict[str, Path]:
    return shared_images(tmp_path_factory)


@pytest.fixture(scope="module")
def qwen_eager(tiny_exports):
    """(eager tower with the export's weights, tolerance, output names)."""
    from builders.qwen_vl.family import BUILDERS

    report = json.loads((tiny_exports["torchscript"] / "report.json").read_text())
    visual, _ = BUILDERS["qwen3-vl"].build(load_config(QWEN), None, report["seed"])
    return visual, report["tolerance"], contract.output_names(len(visual.config.deepstack_visual_indexes))


def embed(argv: list, capsys) -> tuple[int, str, str]:
    """`runtime embed ARGV --threads 1` on ONNX Runtime unless ARGV names an engine or precision (these tests
    compare with the eager model at the export's tolerance; `--engine auto` may pick OpenVINO bf16 on AMX)."""
    capsys.readouterr()
    argv = [*map(str, argv)]
    engine = [] if {"--engine", "--precision"} & set(argv) else ["--engine", "onnxruntime"]
    code = runtime_cli.main(["embed", *argv, "--threads", "1", *engine])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_single_image_matches_eager(qwen_dist, qwen_eager, photos, tmp_path, capsys):
    visual, tolerance, names = qwen_eager
    out = tmp_path / "one.npz"
    code, stdout, _ = embed([photos["astronaut"], "--package", qwen_dist / QWEN, "--out", out], capsys)
    assert code == 0 and "wrote" in stdout
    with np.load(out) as result:
        assert result["entries"].tolist() == ["image_0"]
        assert result["image_0.source"].tolist() == [str(photos["astronaut"])]
        expected, grid = qwen_image_reference(qwen_dist / QWEN, visual, photos["astronaut"])
        np.testing.assert_array_equal(result["image_0.grid_thw"], grid)
        assert_entry(result, "image_0", expected, names, tolerance)


def test_mixed_pack_from_tarball_matches_eager_per_image(qwen_dist, qwen_eager, photos, tmp_path, capsys):
    visual, tolerance, names = qwen_eager
    out = tmp_path / "pack.npz"
    code, _, _ = embed([*(photos[n] for n in PACK), "--package", qwen_dist / f"{QWEN}.tar.gz", "--out", out], capsys)
    assert code == 0
    with np.load(out) as result:
        assert result["entries"].tolist() == [f"image_{i}" for i in range(len(PACK))]
        grids = set()
        for i, name in enumerate(PACK):
            expected, grid = qwen_image_reference(qwen_dist / QWEN, visual, photos[name])
            np.testing.assert_array_equal(result[f"image_{i}.grid_thw"], grid)
            assert_entry(result, f"image_{i}", expected, names, tolerance)
            grids.add(tuple(grid.tolist()))
        assert len(grids) >= 5  # mixed sizes


def test_video_and_images_match_eager(qwen_dist, qwen_eager, photos, transformers_video_processor,
                                      tmp_path, capsys):
    from builders.qwen_vl.model import reference_outputs

    visual, tolerance, names = qwen_eager
    frames = write_frames(tmp_path / "frames", 5, 240, 320)
    out = tmp_path / "video.npz"
    code, _, _ = embed([photos["coffee"], "--video", tmp_path / "frames", "--package", qwen_dist / QWEN,
                        "--out", out], capsys)
    assert code == 0
    batch = video_reference(transformers_video_processor, frames)
    with np.load(out) as result:
        assert result["entries"].tolist() == ["image_0", "video"]
        assert result["video.source"].tolist() == [str(p) for p in frames]
        np.testing.assert_array_equal(result["video.grid_thw"], batch["video_grid_thw"][0])
        assert result["video.grid_thw"][0] == 3  # t > 1: 5 frames, the last repeated
        expected = reference_outputs(visual, batch["pixel_values_videos"], batch["video_grid_thw"])
        assert_entry(result, "video", expected, names, tolerance)
        image, _ = qwen_image_reference(qwen_dist / QWEN, visual, photos["coffee"])
        assert_entry(result, "image_0", image, names, tolerance)


def test_session_opens_once_and_again_when_downsizing_changes_the_path(qwen_dist, qwen_eager, photos, tmp_path,
                                                                        capsys, monkeypatch):
    """The session opens (in the background) on the path chosen from the images' header sizes: once when the
    processor's sizes choose the same path; when they choose another (a stand-in rule: OpenVINO f32 for the header
    sizes, ONNX Runtime for the processor's), the first session is dropped and the chosen one runs: ONNX Runtime's
    result, at the export's tolerance of eager."""
    pytest.importorskip("openvino", reason="the openvino extra is not installed")
    from vlm_vision_onnx.core import session
    from vlm_vision_onnx.core.engine import Engine
    from vlm_vision_onnx.runtime import path_choice

    visual, tolerance, names = qwen_eager
    opened, real_open = [], Engine.open
    monkeypatch.setattr(Engine, "open", lambda self, model, threads=None:
                        opened.append((self.name, Path(model).name)) or real_open(self, model, threads))
    inputs = [photos["astronaut"], "--package", qwen_dist / QWEN]
    assert embed([*inputs, "--out", tmp_path / "once.npz"], capsys)[0] == 0
    assert opened == [("onnxruntime", "vision_encoder.onnx")]

    seen, real_choose = [], path_choice.choose

    def stand_in(manifest, engine="auto", variant=None, precision=None, largest=None, **machine):
        seen.append(largest.images)
        first = len(seen) == 1
        return real_choose(manifest, "openvino" if first else "onnxruntime", "fp32", "f32" if first else None,
                           largest=largest)

    monkeypatch.setattr(path_choice, "choose", stand_in)
    ran, real_run = [], session.run
    monkeypatch.setattr(session, "run", lambda sess, feeds: ran.append(type(sess).__name__) or real_run(sess, feeds))
    opened.clear()
    code, _, err = embed([*inputs, "--out", tmp_path / "again.npz"], capsys)
    assert code == 0 and "path: onnxruntime, variant fp32" in err, err
    assert opened == [("openvino", "vision_encoder.onnx"), ("onnxruntime", "vision_encoder.onnx")]
    assert len(ran) == 1 and "OpenVINO" not in ran[0], ran  # the dropped session never runs
    width, height = Image.open(photos["astronaut"]).size
    assert seen[0] == (width * height,)  # the header's size, before the processor loads
    with np.load(tmp_path / "again.npz") as result:
        expected, _ = qwen_image_reference(qwen_dist / QWEN, visual, photos["astronaut"])
        assert_entry(result, "image_0", expected, names, tolerance)


def test_many_files_print_progress(qwen_dist, tmp_path, capsys):
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(10):
        Image.fromarray(_pixels(64, 64 + 16 * i, i)).save(folder / f"{i:02d}.png")
    code, _, err = embed([folder, "--package", qwen_dist / QWEN, "--out", tmp_path / "many.npz"], capsys)
    assert code == 0
    assert "[embed] loaded 8/10 images" in err and "[embed] loaded 10/10 images" in err
    with np.load(tmp_path / "many.npz") as result:
        assert len(result["entries"]) == 10


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory, photos) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad")
    text = root / "notes.png"
    text.write_text("not an image\n")
    truncated = root / "cut.png"
    truncated.write_bytes(photos["astronaut"].read_bytes()[:5000])
    (root / "empty").mkdir()
    return {"text": text, "truncated": truncated, "empty": root / "empty", "missing": root / "missing.jpg"}


@pytest.mark.parametrize("kind", ["text", "truncated", "empty", "missing"])
def test_bad_input_names_the_file(kind, bad_files, qwen_dist, photos, tmp_path, capsys):
    out = tmp_path / "out.npz"
    code, stdout, err = embed([photos["coffee"], bad_files[kind], "--package", qwen_dist / QWEN, "--out", out],
                              capsys)
    assert code == 2 and stdout == ""
    assert bad_files[kind].name in single_error(err)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_package_of_another_model(qwen_dist, photos, tmp_path, capsys):
    other = Path(shutil.copytree(qwen_dist / QWEN, tmp_path / "other"))
    manifest = json.loads((other / "manifest.json").read_text())
    (other / "manifest.json").write_text(json.dumps({**manifest, "family": "phi-4-mm"}))
    out = tmp_path / "out.npz"
    code, _, err = embed([photos["coffee"], "--package", other, "--out", out], capsys)
    assert code == 2 and "preprocessor_config.json" in single_error(err)
    (other / "manifest.json").write_text(json.dumps({**manifest, "family": "llava"}))
    code, _, err = embed([photos["coffee"], "--package", other, "--out", out], capsys)
    assert code == 2 and "'llava'" in single_error(err) and "manifest.json" in single_error(err)
    code, _, err = embed([photos["coffee"], "--package", qwen_dist / QWEN, "--variant", "q4", "--out", out], capsys)
    assert code == 2 and "vision_encoder_q4.onnx" in single_error(err)
    (other / "manifest.json").write_text(json.dumps(manifest))
    processor = json.loads((other / "preprocessor_config.json").read_text())
    (other / "preprocessor_config.json").write_text(json.dumps({**processor, "patch_size": 14}))  # Qwen2-VL's
    code, _, err = embed([photos["coffee"], "--package", other, "--out", out], capsys)
    assert code == 2 and "does not fit the model" in single_error(err)
    assert not out.exists()


@pytest.fixture(scope="module")
def phi4_package(tmp_path_factory):
    """(package folder, eager embedding, tolerance) from a tiny Phi-4 TorchScript export."""
    from builders.phi4_mm import family
    from tests.conftest import export_phi4_tiny

    config, tiny, model = export_phi4_tiny()
    folder = tmp_path_factory.mktemp("phi4") / PHI4
    (folder / "onnx").mkdir(parents=True)
    onnx_io.save_proto(model, folder / "onnx" / "vision_encoder.onnx")
    phi4_mm.save_config(folder)
    (folder / "manifest.json").write_text(json.dumps({"family": "phi-4-mm", "model": PHI4}))
    return folder, family.reference(tiny), config.tolerance


def test_phi4_pack_matches_eager_per_image(phi4_package, photos, transformers_processor, tmp_path,
                                           capsys):
    folder, reference, tolerance = phi4_package
    names = ["astronaut", "224x224", "512x384", "rgba"]
    out = tmp_path / "phi4.npz"
    code, _, _ = embed([*(photos[n] for n in names), "--package", folder, "--out", out], capsys)
    assert code == 0
    with np.load(out) as result:
        assert result["entries"].tolist() == [f"image_{i}" for i in range(len(names))]
        for i, name in enumerate(names):
            batch = transformers_processor(reference_image(photos[name]), return_tensors="np")
            inputs = {"pixel_values": batch["image_pixel_values"], "image_attention_mask": batch["image_attention_mask"],
                      "image_sizes": batch["image_sizes"]}
            with torch.no_grad():
                (expected,) = reference(inputs)
            np.testing.assert_array_equal(result[f"image_{i}.image_size"], batch["image_sizes"][0])
            assert result[f"image_{i}.image_features"].shape[0] == batch["num_img_tokens"][0]
            metrics = compare(result[f"image_{i}.image_features"], expected, tolerance)
            assert metrics["ok"], f"{name}: {metrics}"


def test_phi4_refuses_video(phi4_package, tmp_path, capsys):
    frames = write_frames(tmp_path / "frames", 2, 64, 64)
    code, _, err = embed(["--video", *frames, "--package", phi4_package[0], "--out", tmp_path / "v.npz"], capsys)
    assert code == 2 and "--video" in single_error(err)


def test_sample_photos_embed_as_folder_and_video(qwen_dist, tmp_path, capsys):
    """`python -m runtime.sample_photos` then `embed DIR --video DIR/pan` (the README's run, tiny model):
    the folder's report.json is skipped, the photos are the images, pan/ the video."""
    from vlm_vision_onnx.runtime import sample_photos

    assert sample_photos.main([str(tmp_path / "photos")]) == 0
    out = tmp_path / "photos.npz"
    code, _, _ = embed([tmp_path / "photos", "--video", tmp_path / "photos" / "pan", "--package", qwen_dist / QWEN,
                        "--out", out], capsys)
    assert code == 0
    with np.load(out) as result:
        names = sorted(sample_photos.PHOTOS)
        assert result["entries"].tolist() == [f"image_{i}" for i in range(len(names))] + ["video"]
        assert [Path(str(result[f"image_{i}.source"][0])).stem for i in range(len(names))] == names
        assert result["video.grid_thw"][0] == sample_photos.FRAMES // 2


def test_openvino_engine_equals_onnxruntime(qwen_dist, photos, tmp_path, capsys):
    """`embed --engine openvino` on a mixed pack plus a video (OpenVINO runs each entry alone, ONNX Runtime the
    pack): f32 within the export's tolerance of `embed` (ONNX Runtime), on one thread and on two (the five entries
    two at a time on OpenVINO's streams, `embed.at_once`), bf16 (where the CPU has it) at a min per-token cosine >=
    core.engine.BF16_FLOOR; `verify` runs it."""
    pytest.importorskip("openvino", reason="the openvino extra is not installed")
    from bench.cpu_race import stages
    from vlm_vision_onnx.core import engine, openvino_session
    from vlm_vision_onnx.runtime import verify

    write_frames(tmp_path / "frames", 3, 240, 320)
    inputs = [*(photos[n] for n in PACK[:4]), "--video", tmp_path / "frames", "--package", qwen_dist / QWEN]
    assert embed([*inputs, "--out", tmp_path / "ort.npz", "--engine", "onnxruntime"], capsys)[0] == 0
    runs = [("f32", 1), *([("f32", 2)] if (os.cpu_count() or 1) >= 2 else []),
            *([("bf16", 1)] if openvino_session.bf16_supported() else [])]
    tolerance = json.loads((qwen_dist / QWEN / "manifest.json").read_text())["export"]["tolerance"]
    with np.load(tmp_path / "ort.npz") as ort_result:
        expected = {k: ort_result[k] for k in ort_result.files}
    for precision, threads in runs:
        out = tmp_path / f"ov-{precision}-{threads}.npz"
        options = ["--out", out, "--engine", "openvino", "--precision", precision]
        if threads == 1:
            code, _, err = embed([*inputs, *options], capsys)  # one thread: one stream, one entry at a time
            assert code == 0 and "at a time" not in err, err
        else:
            capsys.readouterr()
            code, err = runtime_cli.main(["embed", *map(str, [*inputs, *options]), "--threads", "2"]), \
                capsys.readouterr().err
            assert code == 0 and "the entries ran 2 at a time (OpenVINO's streams)" in err, err
            # each stage's line, as bench.cpu_race reads them to say where a process's time goes
            assert list(stages(err)) == ["load", "preprocess", "wait", "run"], err
        assert f"openvino {precision}" in err and "one entry per run" in err  # embed.entry_packs
        with np.load(out) as result:
            assert sorted(result.files) == sorted(expected)
            for key, ref in expected.items():
                if not np.issubdtype(ref.dtype, np.floating):
                    np.testing.assert_array_equal(result[key], ref)
                    continue
                metrics = compare(result[key], ref, tolerance)
                assert metrics["ok"] if precision == "f32" else metrics["min_token_cosine"] >= engine.BF16_FLOOR, \
                    f"{precision} {key}: {metrics}"
    assert "OpenVINO" in verify.run_openvino(json.loads((qwen_dist / QWEN / "manifest.json").read_text()),
                                             qwen_dist / QWEN, 1)


def test_precision_without_openvino_is_one_line(qwen_dist, photos, tmp_path, capsys):
    """--precision with --engine onnxruntime (alone it means OpenVINO: tests/test_path_choice.py)."""
    code, _, err = embed([photos["coffee"], "--package", qwen_dist / QWEN, "--out", tmp_path / "x.npz",
                          "--engine", "onnxruntime", "--precision", "bf16"], capsys)
    assert code == 2 and "needs --engine openvino" in single_error(err)
    assert not (tmp_path / "x.npz").exists()


def test_warm_feeds_follow_the_first_smoke_record(qwen_dist):
    """`embed.warm_feeds`: the package's first smoke record's input shapes, its integer values, zeros elsewhere;
    None for a manifest without a usable record (the session then compiles on its first run)."""
    from vlm_vision_onnx.runtime import embed as embed_mod

    manifest = json.loads((qwen_dist / QWEN / "manifest.json").read_text())
    record = manifest["smoke"][0]
    feeds = embed_mod.warm_feeds(manifest)
    assert {name: list(a.shape) for name, a in feeds.items()} == record["inputs"]
    assert feeds["grid_thw"].tolist() == record["values"]["grid_thw"] and not feeds["pixel_values"].any()
    for garbled in ({}, {"smoke": []}, {"smoke": ["x"]}, {"smoke": [{"inputs": {"grid_thw": [1, 3]},
                                                                    "values": {"grid_thw": [[1, 2]]}}]}):
        assert embed_mod.warm_feeds(garbled) is None, garbled
