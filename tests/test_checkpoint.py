"""--checkpoint: a tiny Qwen3VLForConditionalGeneration saved with save_pretrained, exported and compared."""

import json

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import save_file
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

from builders import vision
from builders.config import CONFIG_DIR
from builders.qwen_vl import layouts
from builders.qwen_vl.model import reference_outputs
from tests.conftest import single_error
from tests.support import TEXT
from vlm_vision_onnx.core import session


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory):
    """(folder, model): a tiny full VLM saved in the standard layout, with seeded random weights."""
    vision_cfg = yaml.safe_load((CONFIG_DIR / "qwen3-vl-tiny.yaml").read_text())["vision"]
    torch.manual_seed(11)
    model = Qwen3VLForConditionalGeneration(Qwen3VLConfig(vision_config=vision_cfg, text_config=TEXT)).eval()
    folder = tmp_path_factory.mktemp("ckpt")
    model.save_pretrained(folder, max_shard_size="200KB")  # several shards + an index, like real ones
    return folder, model


@pytest.mark.parametrize("extra", [[], ["--dynamo"]], ids=["torchscript", "dynamo"])
def test_checkpoint_export_matches_the_saved_model(saved_model, tmp_path, extra):
    folder, model = saved_model
    out = tmp_path / "export"
    assert vision.main(["--model", "qwen3-vl-tiny", "--checkpoint", str(folder), "--out", str(out), *extra]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["weights"] == "checkpoint" and report["validation"]["passed"]
    # Compare with the vision tower of the model as saved (not the one the exporter rebuilt).
    visual = model.model.visual
    visual.config._attn_implementation = "eager"
    sess = session.open_session(out / "model.onnx")
    for pack in ([[1, 18, 46]], [[1, 12, 20], [2, 8, 8]]):
        pixels, grid = layouts.random_pixels(pack, 1536, np.random.default_rng(5))
        got = sess.run(None, {"pixel_values": pixels, "grid_thw": grid})
        for g, ref in zip(got, reference_outputs(visual, pixels, grid)):
            assert np.abs(g - ref).max() <= 1e-4 * max(1.0, np.abs(ref).max())


def test_checkpoint_without_vision_weights_is_refused(saved_model, tmp_path, capsys):
    folder, model = saved_model
    text_only = tmp_path / "text-only"
    text_only.mkdir()
    (text_only / "config.json").write_text((folder / "config.json").read_text())
    state = {k: v.contiguous() for k, v in model.state_dict().items() if "visual" not in k}
    save_file(state, str(text_only / "model.safetensors"))
    out = tmp_path / "out"
    assert vision.main(["--model", "qwen3-vl-tiny", "--checkpoint", str(text_only), "--out", str(out)]) == 2
    assert "no vision weights" in single_error(capsys.readouterr().err)
    assert not out.exists() and not list(tmp_path.glob(".out.*"))
