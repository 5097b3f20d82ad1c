"""The bad-input suite: every command refuses bad input with exit 2 (or 1 for a failed check) and one
`error:` line naming the cause, no traceback, every file that existed before byte-identical after, and
nothing new left behind. Cases come from a new user's trial (issue "Never lose a user's file")."""

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests.conftest import single_error, snapshot


def cli(name: str):
    """The `main(argv)` of a command, imported lazily (builders needs torch)."""
    if name == "vision":
        from builders.vision import main
    elif name == "quantize":
        from quantize.__main__ import main
    elif name == "surgery":
        from surgery.cli import main
    else:
        from vlm_vision_onnx.runtime.__main__ import main
    return main


@pytest.fixture
def work(tmp_path, tiny_exports, monkeypatch):
    """A scratch folder holding a copy of the tiny export (`export/`), a pack (`pack.npz`), user files
    (`mine/notes.txt`); the working folder is `work/`."""
    shutil.copytree(tiny_exports["torchscript"], tmp_path / "export")
    np.savez(tmp_path / "pack.npz", pixel_values=np.ones((120, 1536), np.float32), grid_thw=np.array([[1, 10, 12]]))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("my notes\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def refused(work: Path, capsys, command: str, argv: list[str], code: int = 2, watch: Path | None = None) -> str:
    """Run the command; assert exit `code`, one `error:` line, no traceback, nothing changed or added."""
    root = watch or work
    before = snapshot(root)
    got = cli(command)(argv)
    error = single_error(capsys.readouterr().err)
    assert got == code, error
    after = snapshot(root)
    assert sorted(after) == sorted(before), f"files added or removed: {set(after) ^ set(before)}"
    changed = [name for name in before if before[name] != after[name]]
    assert not changed, f"changed: {changed}"
    return error


# --- output safety ----------------------------------------------------------------------------------

@pytest.mark.parametrize("command, argv", [
    ("quantize", ["optimize", "export", "mine"]),
    ("quantize", ["int4", "export", "mine"]),
    ("vision", ["--model", "qwen3-vl-tiny", "--out", "mine"]),
    ("surgery", ["debake", "export", "mine"]),
])
def test_existing_user_folder_is_never_replaced(work, capsys, command, argv):
    assert "refusing to replace it" in refused(work, capsys, command, argv)


@pytest.mark.parametrize("command, argv", [
    ("quantize", ["optimize", "export", "export"]),
    ("quantize", ["optimize", "export/model.onnx", "export"]),
    ("quantize", ["optimize", "export", "export/inner"]),
    ("quantize", ["optimize", "export", "."]),
    ("quantize", ["optimize", "export", ".."]),
    ("surgery", ["debake", "export/model.onnx", "export/model.onnx"]),
    ("runtime", ["encode", "export/model.onnx", "--inputs", "pack.npz", "--out", "export/model.onnx"]),
    ("runtime", ["encode", "export/model.onnx", "--inputs", "pack.npz", "--out", "pack.npz"]),
])
def test_out_that_is_or_holds_the_input_is_refused(work, capsys, command, argv):
    message = refused(work, capsys, command, argv, watch=work.parent if ".." in argv else None)
    assert "OUT" in message


def test_surgery_never_replaces_another_stages_report(work, capsys):
    message = refused(work, capsys, "surgery", ["debake", "export/model.onnx", "export/d.onnx"])
    assert "export stage's report.json" in message


def test_existing_file_is_not_replaced_without_force(work, capsys):
    """A file this tool did not write is refused, --force or not (--clobber is the only way to replace it)."""
    (work / "out.npz").write_bytes(b"not mine to delete")
    for force in ([], ["--force"]):
        message = refused(work, capsys, "runtime", ["encode", "export/model.onnx", "--inputs", "pack.npz",
                                                    "--out", "out.npz", *force])
        assert "not written by this tool" in message and "--clobber" in message


def test_encode_out_is_a_folder(work, capsys):
    assert "is a folder" in refused(work, capsys, "runtime", ["encode", "export/model.onnx", "--inputs",
                                                              "pack.npz", "--out", "mine"])


@pytest.mark.parametrize("command, argv", [
    ("quantize", ["optimize", "export", "mine/notes.txt/out"]),
    ("vision", ["--model", "qwen3-vl-tiny", "--out", "mine/notes.txt/out"]),
    ("surgery", ["debake", "export", "mine/notes.txt/out.onnx"]),
    ("surgery", ["debake", "export", "new/out.onnx", "--report", "mine/notes.txt/r.json"]),
    ("runtime", ["encode", "export/model.onnx", "--inputs", "pack.npz", "--out", "mine/notes.txt/o.npz"]),
])
def test_unwritable_out_is_found_before_the_work(work, capsys, command, argv):
    assert "cannot write" in refused(work, capsys, command, argv)


def test_stage_out_named_like_a_model_is_refused(work, capsys):
    assert "names a .onnx file" in refused(work, capsys, "quantize", ["optimize", "export", "out.onnx"])


def test_force_replaces_and_a_rerun_replaces_its_own_output(work, capsys):
    """The positive side: a second run replaces the first run's OUT; --clobber writes into a user folder (issue 34:
    --force never does; tests/test_hostile_inputs.py has --force replacing another stage's output)."""
    main = cli("surgery")
    assert main(["debake", "export", "new"]) == 0
    assert main(["debake", "export", "new"]) == 0
    assert main(["debake", "export", "mine", "--clobber"]) == 0
    assert json.loads((work / "mine" / "report.json").read_text())["stage"] == "surgery"


# --- bad input files -------------------------------------------------------------------------------

def _broken_models(work: Path) -> dict[str, Path]:
    """0-byte, truncated and not-ONNX model files, and a model with missing / short external data."""
    good = (work / "export" / "model.onnx").read_bytes()
    (work / "bad").mkdir()
    files = {"empty": b"", "truncated": good[: len(good) // 3], "text": b"my notes, not a model\n"}
    paths = {}
    for name, data in files.items():
        paths[name] = work / "bad" / name / "model.onnx"
        paths[name].parent.mkdir()
        paths[name].write_bytes(data)
    from vlm_vision_onnx.core import onnx_io

    for name in ("missing-data", "short-data"):
        folder = work / "bad" / name
        folder.mkdir()
        onnx_io.save(onnx_io.load(work / "export", in_memory=True), folder / "model.onnx", external=True)
        data = folder / "model.onnx.data"
        if name == "missing-data":
            data.unlink()
        else:
            data.write_bytes(data.read_bytes()[:100])
        paths[name] = folder / "model.onnx"
    return paths


@pytest.mark.parametrize("kind, words", [
    ("empty", "is empty"), ("truncated", "is not an ONNX model"), ("text", "is not an ONNX model"),
    ("missing-data", "which is missing"), ("short-data", "is truncated"),
])
@pytest.mark.parametrize("command", ["quantize-optimize", "quantize-int4", "quantize-fp16", "surgery-audit",
                                     "surgery-debake", "runtime-encode"])
def test_broken_model_files(work, capsys, kind, words, command):
    model = _broken_models(work)[kind]
    argv = {
        "quantize-optimize": ["optimize", str(model), "out"],
        "quantize-int4": ["int4", str(model), "out"],
        "quantize-fp16": ["fp16", str(model), "out"],
        "surgery-audit": ["audit", str(model)],
        "surgery-debake": ["debake", str(model), "out"],
        "runtime-encode": ["encode", str(model), "--inputs", "pack.npz", "--out", "out.npz"],
    }[command]
    assert words in refused(work, capsys, command.split("-")[0], argv)


def test_bad_report_beside_the_input(work, capsys):
    (work / "export" / "report.json").write_text("{not json")
    assert "is not valid JSON" in refused(work, capsys, "quantize", ["optimize", "export", "out"])


def test_newer_ir_version_names_the_reason(work, capsys):
    proto = onnx.load(str(work / "export" / "model.onnx"))
    proto.ir_version = 14
    (work / "new").mkdir()
    onnx.save(proto, str(work / "new" / "model.onnx"))
    message = refused(work, capsys, "quantize", ["optimize", "new", "out"])
    assert "IR version 14" in message and "reads at most 13" in message


# --- bad values ----------------------------------------------------------------------------------------

def test_nonfinite_pixels(work, capsys):
    pixels = np.ones((120, 1536), np.float32)
    pixels[3, 7] = np.nan
    pixels[5, 0] = np.inf
    np.savez(work / "nan.npz", pixel_values=pixels, grid_thw=np.array([[1, 10, 12]]))
    message = refused(work, capsys, "runtime", ["encode", "export", "--inputs", "nan.npz", "--out", "o.npz"])
    assert "2 non-finite value(s)" in message and "[3, 7]" in message and "--allow-nonfinite" in message


def test_allow_nonfinite_runs(work, capsys):
    pixels = np.ones((120, 1536), np.float32)
    pixels[3, 7] = np.nan
    np.savez(work / "nan.npz", pixel_values=pixels, grid_thw=np.array([[1, 10, 12]]))
    assert cli("runtime")(["encode", "export/model.onnx", "--inputs", "nan.npz", "--out", "o.npz",
                           "--allow-nonfinite"]) == 0


def test_grid_that_overflows(work, capsys):
    np.savez(work / "huge.npz", pixel_values=np.ones((4, 1536), np.float32),
             grid_thw=np.array([[2**31, 2**31, 2**31 + 2]]))
    message = refused(work, capsys, "runtime", ["encode", "export/model.onnx", "--inputs", "huge.npz",
                                                "--out", "o.npz"])
    assert "patches" in message and "2,147,483,647" in message


def test_example_grid_too_large_for_the_machine(work, capsys):
    message = refused(work, capsys, "vision", ["--model", "qwen3-vl-tiny", "--example-grid", "1,4096,4096",
                                               "--out", "out"])
    assert "GiB" in message and "--no-memory-check" in message


TINY_VISION = {"depth": 2, "hidden_size": 64, "num_heads": 4, "intermediate_size": 128, "out_hidden_size": 96,
               "deepstack_visual_indexes": [1], "num_position_embeddings": 2304}


def test_a_config_that_is_not_text(work, capsys):
    """Found by tools/fuzz: bytes that are not UTF-8 ended in a UnicodeDecodeError traceback."""
    (work / "bad.yaml").write_bytes(b"family: qwen3-vl\n\xae\xff vision: {}\n")
    assert "bad.yaml is not valid YAML" in refused(work, capsys, "vision", ["--config", "bad.yaml", "--out", "out"])


@pytest.mark.parametrize("change, words", [
    ({"depth": "abc"}, "vision.depth must be an integer >= 1, got 'abc'"),
    ({"hidden_size": 0}, "vision.hidden_size must be an integer >= 1, got 0"),
    ({"num_heads": 5}, "num_heads 5 does not divide hidden_size 64"),
    ({"deepstack_visual_indexes": [1, 7]}, "7 is not a layer of a depth-2 tower"),
    ({"export": {"opset": "abc"}}, "export.opset must be a positive integer"),
    ({"export": {"tolerance": "abc"}}, "export.tolerance must be a positive number"),
    ({"vision": "qwen"}, "vision must be a mapping"),
    ({"out_hidden_size": 10**12}, "vision.out_hidden_size must be an integer of at most 65536 in size"),  # fuzz
    ({"vision": {k: v for k, v in TINY_VISION.items() if k != "depth"}}, "vision lacks 'depth'"),  # fuzz
])
def test_bad_config_values(work, capsys, change, words):
    config = {"family": "qwen3-vl", "vision": dict(TINY_VISION)}
    for key, value in change.items():
        if key in ("export", "vision"):
            config[key] = value
        else:
            config["vision"][key] = value
    (work / "bad.yaml").write_text(json.dumps(config))  # JSON is YAML
    message = refused(work, capsys, "vision", ["--config", "bad.yaml", "--out", "out"])
    assert words in message and "bad.yaml" in message


@pytest.mark.parametrize("argv, words", [
    (["--seed", "-1"], "--seed must be in"),
    (["--opset", "0"], "opset 0 is not supported"),
    (["--opset", "abc"], "invalid int value"),
    (["--no-such-option"], "unrecognized arguments"),
])
def test_bad_export_options(work, capsys, argv, words):
    assert words in refused(work, capsys, "vision", ["--model", "qwen3-vl-tiny", *argv, "--out", "out"])


def _checkpoint(work: Path, kind: str) -> Path:
    folder = work / "ckpt"
    folder.mkdir()
    if kind == "config":
        (folder / "config.json").write_text("{broken")
        return folder
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3_vl", "vision_config": TINY_VISION}))
    if kind == "garbage":
        (folder / "model.safetensors").write_bytes(b"\x00garbage, not safetensors" * 10)
    else:
        import torch
        from safetensors.torch import save_file

        # the config's depth and widths are in the weights (checked from the header first), one shape is wrong
        save_file({"model.visual.patch_embed.proj.weight": torch.zeros(64, 3, 2, 16, 8),
                   **{f"model.visual.blocks.{i}.mlp.linear_fc1.weight": torch.zeros(128, 64) for i in range(2)},
                   "model.visual.merger.linear_fc2.weight": torch.zeros(96, 256)},
                  str(folder / "model.safetensors"))
    return folder


@pytest.mark.parametrize("kind, words", [
    ("config", "is not valid JSON"), ("garbage", "not a readable safetensors file"),
    ("shape", "has shape [64, 3, 2, 16, 8]"),
])
def test_bad_checkpoints(work, capsys, kind, words):
    folder = _checkpoint(work, kind)
    assert words in refused(work, capsys, "vision", ["--model", "qwen3-vl-tiny", "--checkpoint", str(folder),
                                                     "--out", "out"])


@pytest.mark.parametrize("command, argv, words", [
    ("quantize", ["optimize", "export", "out", "--threads", "-3"], "--threads must be >= 0"),
    ("runtime", ["encode", "export/model.onnx", "--inputs", "pack.npz", "--out", "o.npz", "--threads", "-3"],
     "--threads must be >= 1"),
    ("quantize", ["int4", "export", "out", "--block-size", "7"], "invalid choice"),
    ("quantize", ["nope"], "invalid choice"),
    ("surgery", ["debake", "export", "out", "--merge", "0"], "merge"),
    ("surgery", ["nope"], "invalid choice"),
    ("runtime", ["encode"], "required"),
])
def test_bad_options_give_one_line(work, capsys, command, argv, words):
    assert words in refused(work, capsys, command, argv)


def test_int4_excluding_everything(work, capsys):
    assert cli("quantize")(["optimize", "export", "opt"]) == 0
    capsys.readouterr()
    message = refused(work, capsys, "quantize", ["int4", "opt", "q4", "--exclude", "."])
    assert "nothing would be quantized" in message


def test_doctor_probe_with_another_row_count_finds_no_problem(work, capsys):
    """A healthy model probed at another patch count is still healthy (the grid follows the probe)."""
    assert cli("surgery")(["doctor", "export", "--probe", "pixel_values=100x1536"]) == 0
    assert "clean: no problem found" in capsys.readouterr().out
