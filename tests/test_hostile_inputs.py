"""Untrusted packages, checkpoints and images (issue 34): no code from them runs, no user file is lost, no two
models mix in one dataset, costs are bounded before the work, and what used to be a traceback is one `error:` line
(or an error row of a collection, the run going on). Each test is one case of the issue, numbered as there.

The package is the tiny Qwen3-VL one (`tests/conftest.py`'s `qwen_dist`, made once per module), copied where a
test edits it; the stage folders are copies of the session's tiny export and optimize outputs.
"""

from __future__ import annotations

import builtins
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from PIL import Image

from tests.conftest import single_error, snapshot
from tests.support import QWEN
from vlm_vision_onnx.release import manifest as manifest_mod
from vlm_vision_onnx.release.package import sums_text
from vlm_vision_onnx.runtime import __main__ as runtime_cli
from vlm_vision_onnx.runtime import images, unpack
from vlm_vision_onnx.runtime.verify import sha256

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def runtime(argv: list, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = runtime_cli.main([*map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def quantize(argv: list) -> int:
    from quantize.__main__ import main

    return main([*map(str, argv)])


def vision(argv: list) -> int:
    from builders.vision import main  # torch: imported only by the tests that export

    return main([*map(str, argv)])


@pytest.fixture
def package(qwen_dist, tmp_path) -> Path:
    """A copy of the tiny Qwen3-VL package (tests edit it)."""
    return Path(shutil.copytree(qwen_dist / QWEN, tmp_path / QWEN))


@pytest.fixture
def photo(tmp_path) -> Path:
    path = tmp_path / "photos" / "photo.png"
    path.parent.mkdir()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 80, 3), dtype=np.uint8)).save(path)
    return path


def reseal(folder: Path) -> None:
    """Record every payload file in the manifest and SHA256SUMS again, as a forger would: the checksums pass."""
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"] = {p.relative_to(folder).as_posix(): manifest_mod.file_record(p) for p in sorted(folder.rglob("*"))
                         if p.is_file() and p.name not in ("manifest.json", "README.md", "SHA256SUMS")}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    (folder / "SHA256SUMS").write_text(sums_text(folder))


# --- 1. no code from a package or an image runs -----------------------------------------------------------------

EVIL = """import pathlib
pathlib.Path({marker!r}).write_text("the package's code ran")
from transformers.image_processing_utils import BaseImageProcessor


class EvilImageProcessor(BaseImageProcessor):
    pass
"""


@pytest.fixture
def evil_package(package, tmp_path) -> tuple[Path, Path]:
    """The package with a processor `auto_map` to its own Python file (and no model_type), checksums resealed;
    and the file the code would write."""
    marker = tmp_path / "pwned.txt"
    (package / "evil.py").write_text(EVIL.format(marker=str(marker)))
    config = json.loads((package / "preprocessor_config.json").read_text())
    config.pop("image_processor_type", None)
    config["auto_map"] = {"AutoImageProcessor": "evil.EvilImageProcessor"}
    (package / "preprocessor_config.json").write_text(json.dumps(config))
    model_config = json.loads((package / "config.json").read_text())
    model_config.pop("model_type", None)
    (package / "config.json").write_text(json.dumps(model_config))
    reseal(package)
    return package, marker


@pytest.mark.parametrize("command, code", [("verify", 1), ("embed", 2), ("embed-collection", 2)])
def test_1_auto_map_never_runs_the_packages_code(evil_package, photo, tmp_path, capsys, monkeypatch, command, code):
    """Case 1: a user who answers "y" to transformers' trust_remote_code prompt is never asked: nothing runs."""
    package, marker = evil_package
    asked = []
    monkeypatch.setattr(builtins, "input", lambda *a: asked.append(a) or "y")
    argv = {"verify": ["verify", package],
            "embed": ["embed", photo, "--package", package, "--out", tmp_path / "o.npz"],
            "embed-collection": ["embed-collection", package, photo.parent, tmp_path / "out", "--scheduler", "local"],
            }[command]
    got, _, err = runtime(argv, capsys)
    assert got == code and "auto_map" in single_error(err)
    assert not marker.exists() and not asked
    assert not (tmp_path / "o.npz").exists() and not (tmp_path / "out").exists()


def test_1_postscript_posing_as_an_image_never_reaches_ghostscript(tmp_path, monkeypatch):
    """Case 1: pillow picks a decoder by content; an "image" holding PostScript would go to Ghostscript."""
    from PIL import EpsImagePlugin

    called = []

    def ghostscript(*args, **kwargs):
        called.append(args)
        raise OSError("Ghostscript ran")

    monkeypatch.setattr(EpsImagePlugin, "Ghostscript", ghostscript)
    path = tmp_path / "photo.png"
    path.write_bytes(b"%!PS-Adobe-3.0 EPSF-3.0\n%%BoundingBox: 0 0 16 16\nnewpath 0 0 moveto showpage\n%%EOF\n")
    with pytest.raises(images.UsageError, match="not an image in a format this runtime reads"):
        images.load_rgb(path)
    assert not called
    assert ".eps" not in images.image_suffixes()


# --- 2. a stage replaces only what it wrote ----------------------------------------------------------------------

@pytest.fixture
def stages(tiny_exports, tiny_optimized, tmp_path, monkeypatch) -> Path:
    """`export/` and `optimized/` (earlier outputs of those stages) and `mine/notes.txt`; the working folder."""
    shutil.copytree(tiny_exports["torchscript"], tmp_path / "export")
    shutil.copytree(tiny_optimized, tmp_path / "optimized")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("my notes\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def refused(root: Path, capsys, run, code: int = 2) -> str:
    """Run `run()`; assert exit `code`, one `error:` line and every file under `root` unchanged."""
    before = snapshot(root)
    capsys.readouterr()
    got = run()
    error = single_error(capsys.readouterr().err)
    assert got == code, error
    assert snapshot(root) == before
    return error


@pytest.mark.parametrize("added", ["notes.txt", "sub/photo.png"])
def test_2_rerun_into_its_own_output_keeps_the_users_files(stages, capsys, added):
    """Case 2: a re-run into the stage's earlier output refuses when the folder holds a file the stage did not
    write (it used to delete it)."""
    (stages / "optimized" / added).parent.mkdir(exist_ok=True)
    (stages / "optimized" / added).write_text("mine")
    error = refused(stages, capsys, lambda: quantize(["optimize", "export", "optimized"]))
    assert added in error and "did not write" in error and "--clobber" in error


def test_2_force_never_deletes_a_users_folder(stages, capsys):
    """Case 2: --force replaced any folder whole; now only --clobber may."""
    error = refused(stages, capsys, lambda: quantize(["optimize", "export", "mine", "--force"]))
    assert "not an output of this tool" in error and "--clobber" in error


def test_2_force_replaces_another_stages_output_and_clobber_a_users_folder(stages, capsys):
    """The positive side: --force replaces an output of another stage of this tool (the files its report lists);
    --clobber replaces a folder whatever it holds (`runtime.sample_photos`: a staged folder, written in a second)."""
    pytest.importorskip("skimage.data", reason="scikit-image (dev extra) ships the sample photos")
    from vlm_vision_onnx.runtime import sample_photos

    assert sample_photos.main(["export", "--force"]) == 0
    assert json.loads((stages / "export" / "report.json").read_text())["stage"] == sample_photos.STAGE
    assert not (stages / "export" / "model.onnx").exists()
    assert sample_photos.main(["export"]) == 0  # its own earlier output
    assert sample_photos.main(["mine", "--clobber"]) == 0
    assert not (stages / "mine" / "notes.txt").exists()


@pytest.mark.parametrize("command", ["embed", "encode"])
def test_2_result_files_it_did_not_write_are_kept(stages, qwen_dist, photo, capsys, command):
    """Case 2: `embed --out F.npz` / `encode --out F.npz` replaced an .npz of the user's that looked like theirs."""
    np.savez(stages / "mine.npz", entries=np.array(["mine"]), image_features=np.ones((2, 2), np.float32))
    np.savez(stages / "pack.npz", pixel_values=np.ones((120, 1536), np.float32), grid_thw=np.array([[1, 10, 12]]))
    for force in ([], ["--force"]):
        argv = (["embed", photo, "--package", qwen_dist / QWEN, "--out", "mine.npz", *force] if command == "embed"
                else ["encode", "export", "--inputs", "pack.npz", "--out", "mine.npz", *force])
        error = refused(stages, capsys, lambda argv=argv: runtime_cli.main([*map(str, argv)]))
        assert "not written by this tool" in error and "--clobber" in error


def _dead_pid() -> int:
    """The PID of a process that has ended."""
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True,
                          check=True)
    return int(done.stdout)


def test_2_stale_temp_folders_of_a_killed_run_are_removed(tmp_path):
    """Case 2 (and 5): a stage killed mid-write (SIGKILL: no cleanup ran) left `.OUT.tmp-PID-xxxx` for ever; the next
    run of that stage removes it, and keeps the temp folder of a run still alive."""
    from vlm_vision_onnx.core.staging import staged_folder

    stale = tmp_path / f".out.tmp-{_dead_pid()}-abcd1234"
    live = tmp_path / f".out.tmp-{os.getpid()}-efgh5678"
    for folder in (stale, live):
        folder.mkdir()
        (folder / "model.onnx").write_bytes(b"half written")
    with staged_folder(tmp_path / "out", "demo") as tmp:
        (tmp / "report.json").write_text(json.dumps({"stage": "demo"}))
    assert not stale.exists() and live.exists()
    assert json.loads((tmp_path / "out" / "report.json").read_text())["written_files"] == []


def test_2_a_killed_stage_s_work_folder_is_removed_by_the_next_run(tmp_path):
    """The work folders of the qnn, fp16, ov-int8 and int8/int4 stages (`WorkFolder`: their intermediate models,
    gigabytes at 2B dims; an OOM kill at 2B left 4.6 GiB of them) go the way of the temp folders: the next run writing
    the same OUT removes a dead process's, keeps a live one's, and removes its own when done."""
    from vlm_vision_onnx.core.staging import WorkFolder

    stale = tmp_path / f".qnn.work-{_dead_pid()}-abcd1234"
    live = tmp_path / f".qnn.work-{os.getpid()}-efgh5678"
    other = tmp_path / f".notes.work-{_dead_pid()}-abcd1234"  # another OUT's: not this run's to remove
    for folder in (stale, live, other):
        folder.mkdir()
        (folder / "fp32.onnx").write_bytes(b"an intermediate model")
    with WorkFolder(tmp_path / "qnn") as work:
        assert work.parent == tmp_path and work.name.startswith(f".qnn.work-{os.getpid()}-")
        (work / "fp32.onnx").write_bytes(b"x")
    assert not stale.exists() and live.exists() and other.exists() and not work.exists()


def test_2_a_tarball_unpacked_by_a_killed_run_is_removed(qwen_dist, tmp_path, monkeypatch):
    """The same for the temporary folder a package tarball is unpacked into (the whole package, in TMPDIR)."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    stale = tmp_path / f"{unpack.UNPACKED}{_dead_pid()}-abcd1234"
    stale.mkdir()
    (stale / "model.onnx").write_bytes(b"a package of a killed run")
    with unpack.opened(qwen_dist / f"{QWEN}.tar.gz") as folder:
        assert (folder / "manifest.json").is_file()
    assert not stale.exists() and list(tmp_path.iterdir()) == []


# --- 3. two models never mix in one dataset -----------------------------------------------------------------------

def _nudged(model: Path) -> None:
    """Change one weight of the model in place (another model of the same shape: what a swapped file is)."""
    proto = onnx.load(str(model))
    tensor = max(proto.graph.initializer, key=lambda t: len(t.raw_data))
    array = onnx.numpy_helper.to_array(tensor).copy()
    array.flat[0] += 1.0
    tensor.CopyFrom(onnx.numpy_helper.from_array(array, tensor.name))
    onnx.save(proto, str(model))


def test_3_a_swapped_model_file_is_refused_on_resume(package, photo, tmp_path, capsys):
    """Case 3: the checksum came from the manifest, so a swapped model resumed into the real package's dataset."""
    out = tmp_path / "out"
    argv = ["embed-collection", package, photo.parent, out, "--scheduler", "local", "--threads", "1"]
    assert runtime(argv, capsys)[0] == 0
    before = sha256(package / "onnx/vision_encoder.onnx")
    _nudged(package / "onnx/vision_encoder.onnx")  # the manifest still records the old sha256
    shutil.copy(photo, photo.with_name("second.png"))
    after = sha256(package / "onnx/vision_encoder.onnx")
    error = refused(tmp_path, capsys, lambda: runtime_cli.main([*map(str, argv)]))
    assert before in error and after in error


def test_3_manifest_paths_stay_inside_the_package(package, photo, tmp_path, capsys):
    """Case 3: a variant's `files` naming a file outside the package put that file's hash into the dataset."""
    secret = tmp_path / "secret.txt"
    secret.write_text("not the package's")
    manifest = json.loads((package / "manifest.json").read_text())
    manifest["variants"][0]["files"] = ["onnx/vision_encoder.onnx", "../secret.txt"]
    (package / "manifest.json").write_text(json.dumps(manifest))
    out = tmp_path / "out"
    code, _, err = runtime(["embed-collection", package, photo.parent, out, "--scheduler", "local"], capsys)
    assert code == 2 and "outside the package" in single_error(err)
    assert not out.exists()


def test_3_an_absolute_variant_path_is_one_line(package, photo, tmp_path, capsys):
    """Case 3: an absolute variant path was a traceback (and would have run a model outside the package)."""
    elsewhere = tmp_path / "elsewhere.onnx"
    shutil.copy(package / "onnx/vision_encoder.onnx", elsewhere)
    manifest = json.loads((package / "manifest.json").read_text())
    manifest["variants"][0]["file"] = str(elsewhere)
    (package / "manifest.json").write_text(json.dumps(manifest))
    code, _, err = runtime(["embed", photo, "--package", package, "--out", tmp_path / "o.npz"], capsys)
    assert code == 2 and "outside the package" in single_error(err)


# --- 4. costs bounded before the work -----------------------------------------------------------------------------

def test_4_an_image_past_the_pixel_budget_is_refused_before_decoding(qwen_dist, tmp_path, capsys):
    """Case 4: a 10 KB 1-bit PNG of 8300x8300 (under pillow's bomb limit, over 4x the processor's max_pixels)
    cost minutes and gigabytes before anything refused it."""
    path = tmp_path / "huge.png"
    Image.new("1", (8300, 8300)).save(path)
    assert path.stat().st_size < 100_000
    start = time.monotonic()
    code, _, err = runtime(["embed", path, "--package", qwen_dist / QWEN, "--out", tmp_path / "o.npz"], capsys)
    assert code == 2 and "past the image budget of 67,108,864" in single_error(err)
    assert time.monotonic() - start < 20


def test_4_the_pixel_budget_option(qwen_dist, photo, tmp_path, capsys):
    """--max-image-pixels sets the budget (here below the 64x80 photo: refused; at its size: embedded)."""
    argv = ["embed", photo, "--package", qwen_dist / QWEN, "--out", tmp_path / "o.npz", "--threads", "1"]
    code, _, err = runtime([*argv, "--max-image-pixels", str(64 * 80 - 1)], capsys)
    assert code == 2 and "past the image budget of 5,119" in single_error(err)
    assert runtime([*argv, "--max-image-pixels", str(64 * 80)], capsys)[0] == 0


def test_4_in_a_collection_an_image_past_the_budget_is_an_error_row(package, photo, tmp_path, capsys):
    """The same refusal in embed-collection: an error row naming the budget, the other images embedded."""
    small = photo.with_name("small.png")
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(small)
    out = tmp_path / "out"
    code, _, err = runtime(["embed-collection", package, photo.parent, out, "--scheduler", "local", "--threads", "1",
                            "--max-image-pixels", str(32 * 32)], capsys)
    assert code == 1 and "Traceback" not in err
    rows = {r["path"]: r for r in pq.read_table(out).to_pylist()}
    assert rows[str(small)]["status"] == "ok"
    assert rows[str(photo)]["status"] == "error" and "past the image budget of 1,024" in rows[str(photo)]["error"]


def test_4_a_tarball_member_larger_than_declared_is_never_written(package, tmp_path, capsys):
    """Case 4: a small tarball holding a member far larger than the manifest declares was written out whole before
    its checksum failed."""
    (package / "onnx/vision_encoder.onnx").write_bytes(bytes(64 * 2**20))
    archive = tmp_path / f"{QWEN}.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(package, arcname=QWEN)
    assert archive.stat().st_size < 2**20
    dest = tmp_path / "dest"
    dest.mkdir()
    with pytest.raises(unpack.ArchiveError, match="manifest.json declares"):
        unpack.unpack(archive, dest)
    assert list(dest.iterdir()) == []
    code, _, err = runtime(["verify", archive], capsys)
    assert code == 1 and "manifest.json declares" in single_error(err)


def _checkpoint(folder: Path, vision_config: dict, top: dict | None = None) -> Path:
    """A checkpoint folder: config.json and safetensors of a 2-block tower (widths 64, 128, 96)."""
    import torch
    from safetensors.torch import save_file

    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3_vl", "vision_config": vision_config,
                                                    **(top or {})}))
    save_file({"model.visual.patch_embed.proj.weight": torch.zeros(64, 3, 2, 16, 16),
               **{f"model.visual.blocks.{i}.mlp.linear_fc1.weight": torch.zeros(128, 64) for i in range(2)},
               "model.visual.merger.linear_fc2.weight": torch.zeros(96, 256)}, str(folder / "model.safetensors"))
    return folder


TINY_VISION = {"depth": 2, "hidden_size": 64, "num_heads": 4, "intermediate_size": 128, "out_hidden_size": 96,
               "deepstack_visual_indexes": [1], "num_position_embeddings": 2304}


@pytest.mark.parametrize("change, words", [
    ({"depth": 3000}, "vision_config.depth is 3000, but its weights hold 2 layers (blocks.N)"),
    ({"hidden_size": 4096, "num_heads": 4}, "vision_config.hidden_size is 4096, but no weight has a dimension"),
])
def test_4_config_depth_and_widths_are_checked_against_the_weights(stages, capsys, change, words):
    """Case 4: a 1.5 KB config.json with a huge depth built the modules (gigabytes) before the weights were compared."""
    folder = _checkpoint(stages / "ckpt", {**TINY_VISION, **change})
    start = time.monotonic()
    error = refused(stages, capsys, lambda: vision(["--checkpoint", folder, "--out", "out"]))
    assert words in error
    assert time.monotonic() - start < 30


def test_4_a_mistyped_local_checkpoint_is_never_looked_up_on_the_hub(stages, capsys, monkeypatch):
    """Case 4: `ckpts/qwen3-vl-2b` (a folder `ckpts/` here, the name mistyped) went to the hub (26 s of retries)."""
    from builders import checkpoint

    looked_up = []
    monkeypatch.setattr(checkpoint, "_fetch_from_hub", lambda repo, prefixes: looked_up.append(repo) or
                        (_ for _ in ()).throw(checkpoint.UsageError("hub")))
    (stages / "ckpts").mkdir()
    for given in ("ckpts/qwen3-vl-2b", "~/qwen3-vl-2b"):
        error = refused(stages, capsys, lambda given=given: vision(["--checkpoint", given, "--out", "out"]))
        assert "does not exist" in error and given in error
    assert not looked_up


# --- 5. tracebacks become one line (or an error row) --------------------------------------------------------------

def test_5_a_5000_character_path_in_a_parquet_list_is_an_error_row(package, photo, tmp_path, capsys):
    """Case 5: one 5,000-character path stopped embed-collection for good (every resume died on the same row)."""
    listing = tmp_path / "list.parquet"
    long_path = "/tmp/" + "x" * 5000 + ".png"
    pq.write_table(pa.table({"path": [str(photo), long_path]}), listing)
    out = tmp_path / "out"
    argv = ["embed-collection", package, listing, out, "--scheduler", "local", "--threads", "1"]
    for _ in range(2):  # the run, then the resume
        code, _, err = runtime(argv, capsys)
        assert code == 1 and "Traceback" not in err
    rows = {r["path"]: r for r in pq.read_table(out).to_pylist()}
    assert rows[str(photo)]["status"] == "ok"
    assert rows[long_path]["status"] == "error" and "File name too long" in rows[long_path]["error"]


def test_5_bad_utf8_in_the_path_column(package, tmp_path, capsys):
    listing = tmp_path / "list.parquet"
    pq.write_table(pa.table({"path": pa.array([b"ok.png", b"\xff\xfe.png"], pa.binary())}), listing)
    code, _, err = runtime(["embed-collection", package, listing, tmp_path / "out", "--scheduler", "local"], capsys)
    assert code == 2 and "row 2's path is not valid UTF-8" in single_error(err)
    assert not (tmp_path / "out").exists()


def test_5_the_cpu_allocator_running_out_of_memory(stages, capsys):
    """Case 5: ONNX Runtime's CPU allocator failing ("Failed to allocate memory for requested buffer") was a
    traceback; it is the out-of-memory line, exit 2. The model asks for 8 TiB at its first node."""
    from onnx import TensorProto, helper

    export = onnx.load(str(stages / "export" / "model.onnx"), load_external_data=False)
    shape = helper.make_node("Constant", [], ["shape"], value=helper.make_tensor("s", TensorProto.INT64, [1], [2**41]))
    fill = helper.make_node("ConstantOfShape", ["shape"], ["image_features"],
                            value=helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0]))
    graph = helper.make_graph([shape, fill], "oom", list(export.graph.input),
                              [helper.make_tensor_value_info("image_features", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    model.metadata_props.extend(export.metadata_props)
    onnx.save(model, str(stages / "oom.onnx"))
    np.savez(stages / "pack.npz", pixel_values=np.ones((120, 1536), np.float32), grid_thw=np.array([[1, 10, 12]]))
    error = refused(stages, capsys, lambda: runtime_cli.main(["encode", "oom.onnx", "--inputs", "pack.npz",
                                                              "--out", "o.npz"]))
    assert "out of memory" in error


@pytest.mark.parametrize("where", ["vision_config", "text_config"])
def test_5_a_config_field_of_the_wrong_type(stages, capsys, where):
    """Case 5: `rope_parameters: "x"` was a traceback."""
    top = {"text_config": {"rope_parameters": "x"}} if where == "text_config" else None
    vision_config = {**TINY_VISION, "rope_parameters": "x"} if where == "vision_config" else TINY_VISION
    folder = _checkpoint(stages / "ckpt", vision_config, top)
    error = refused(stages, capsys, lambda: vision(["--checkpoint", folder, "--out", "out"]))
    assert "rope_parameters" in error or "bad config" in error


def test_5_an_external_data_offset_that_is_not_a_number(stages, capsys):
    """Case 5: an external-data `offset` of "abc" was a traceback."""
    from vlm_vision_onnx.core import onnx_io

    (stages / "bad").mkdir()
    onnx_io.save(onnx_io.load(stages / "export", in_memory=True), stages / "bad" / "model.onnx", external=True)
    proto = onnx.load(str(stages / "bad" / "model.onnx"), load_external_data=False)
    tensor = next(t for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL)
    entry = next(e for e in tensor.external_data if e.key == "offset")
    entry.value = "abc"
    onnx.save(proto, str(stages / "bad" / "model.onnx"))
    error = refused(stages, capsys, lambda: quantize(["optimize", "bad", "out"]))
    assert "offset 'abc'" in error


def test_5_a_300_character_file_name_given_to_embed(qwen_dist, tmp_path, capsys):
    code, _, err = runtime(["embed", tmp_path / ("x" * 300 + ".png"), "--package", qwen_dist / QWEN,
                            "--out", tmp_path / "o.npz"], capsys)
    assert code == 2 and "File name too long" in single_error(err)
