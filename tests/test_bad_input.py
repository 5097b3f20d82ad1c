"""Bad input: one clear `error:` line, exit 2, nothing written."""

import re

import numpy as np
import pytest

from builders import vision
from tests.conftest import single_error
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.qwen_vl import contract
from vlm_vision_onnx.runtime import __main__ as runtime_cli


def run_export(args, tmp_path, capsys):
    out = tmp_path / "out"
    code = vision.main([*args, "--out", str(out)])
    assert code == 2
    assert not out.exists() and not list(tmp_path.glob(".out.*")), "nothing half-written"
    return single_error(capsys.readouterr().err)


def test_unknown_model(tmp_path, capsys):
    assert "unknown model 'qwen9-vl'" in run_export(["--model", "qwen9-vl"], tmp_path, capsys)


def test_unknown_config_key(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("family: qwen3-vl\nvision: {depth: 1}\nexport: {opset: 18, batch: 4}\n")
    assert "unknown key export.'batch'" in run_export(["--config", str(bad)], tmp_path, capsys)


def test_unknown_vision_key(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("family: qwen3-vl\nvision: {depth: 1, hiden_size: 64}\n")
    assert "unknown vision config key 'hiden_size'" in run_export(["--config", str(bad)], tmp_path, capsys)


def test_missing_checkpoint_folder(tmp_path, capsys):
    """A local-looking path that does not exist: one line, never a hub lookup (issue 34)."""
    msg = run_export(["--model", "qwen3-vl-tiny", "--checkpoint", str(tmp_path / "nope")], tmp_path, capsys)
    assert "does not exist (a local path" in msg


def test_unsupported_opset(tmp_path, capsys):
    assert "opset 12 is not supported" in run_export(["--model", "qwen3-vl-tiny", "--opset", "12"], tmp_path, capsys)


def test_grid_not_multiple_of_merge(tmp_path, capsys):
    msg = run_export(["--model", "qwen3-vl-tiny", "--example-grid", "1,15,16"], tmp_path, capsys)
    assert "multiples of the spatial merge size 2" in msg


@pytest.mark.parametrize("grid, rows, message", [
    ([[1, 16, 16]], 255, "has 255 rows but grid_thw [[1, 16, 16]] needs sum(t*h*w) = 256"),
    ([[1, 16, 15]], 240, "multiples of the spatial merge size 2"),
    ([[1, 16]], 16, "shape [num_images, 3]"),
])
def test_contract_checks(grid, rows, message):
    with pytest.raises(UsageError, match=re.escape(message)):
        contract.check_inputs(np.zeros((rows, 1536), np.float32), np.array(grid), 2, 1536)


def test_runtime_encode_refuses_wrong_row_count(tiny_exports, tmp_path, capsys):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, pixel_values=np.zeros((100, 1536), np.float32), grid_thw=np.array([[1, 10, 12]]))
    out = tmp_path / "out.npz"
    code = runtime_cli.main(["encode", str(tiny_exports["torchscript"] / "model.onnx"),
                             "--inputs", str(inputs), "--out", str(out)])
    assert code == 2 and not out.exists()
    assert "needs sum(t*h*w) = 120" in single_error(capsys.readouterr().err)


def test_runtime_encode_runs_a_good_pack(tiny_exports, tmp_path):
    inputs = tmp_path / "in.npz"
    np.savez(inputs, pixel_values=np.ones((120, 1536), np.float32), grid_thw=np.array([[1, 10, 12]]))
    out = tmp_path / "out.npz"
    assert runtime_cli.main(["encode", str(tiny_exports["torchscript"] / "model.onnx"),
                             "--inputs", str(inputs), "--out", str(out)]) == 0
    result = np.load(out)
    assert result["image_features"].shape == (30, 96) and result["deepstack_embeds_1"].shape == (30, 96)


@pytest.mark.parametrize("key, value", [("patch_dim", ""), ("spatial_merge_size", "1e400"),
                                        ("export_grid_thw", "[1, 2"), ("deepstack_visual_indexes", "7")])
def test_metadata_that_is_not_what_the_export_writes(key, value):
    """Found by tools/fuzz: an empty `patch_dim` ended `surgery stage` in int()'s ValueError. Every stage and the
    runtime resolve the family through `of_model`, which checks the values they parse."""
    from vlm_vision_onnx.families import of_model

    metadata = {"family": "qwen3-vl", "patch_dim": "1536", "spatial_merge_size": "2", key: value}
    with pytest.raises(UsageError, match=f"model.onnx: metadata {key} = .* is not"):
        of_model(metadata, "model.onnx")


def test_a_checkpoint_whose_model_type_is_no_string(tmp_path):
    """Found by tools/fuzz: `model_type: {}` ended in a TypeError (unhashable) traceback."""
    import json

    from builders.checkpoint import family_of

    (tmp_path / "config.json").write_text(json.dumps({"model_type": {}}))
    with pytest.raises(UsageError, match="has model_type {}; this exporter takes"):
        family_of(str(tmp_path))
