"""Phi-4-multimodal image embedding: both export paths against the eager model (eager attention) at the
processor's layouts, the attention trap, and a checkpoint round trip (tiny config)."""

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch

from builders import onnx_export
from builders.config import load_config
from builders.phi4_mm import family
from builders.phi4_mm.model import ImageFeatures
from tests.conftest import single_error
from vlm_vision_onnx.core import onnx_io, session
from vlm_vision_onnx.core.parity import compare
from vlm_vision_onnx.families.phi4_mm import crops, layouts, spec

PATHS = {"torchscript": onnx_export.export_torchscript, "dynamo": onnx_export.export_dynamo}
CONFIG = load_config("phi-4-mm-tiny")


@pytest.fixture(scope="module")
def tiny():
    return family.build(CONFIG, None, seed=0)[0]


@pytest.fixture(scope="module")
def cases(tiny):
    """(name, inputs, eager image_features) of every validation layout, the eager run done once."""
    reference = family.reference(tiny)
    return [(name, inputs, reference(inputs)[0])
            for name, inputs in family.validation_cases(tiny, layouts.EXAMPLE_IMAGES, seed=0)]


@pytest.fixture(scope="module")
def exports(tiny, tmp_path_factory):
    """{path: model.onnx} of the tiny embedding through both exporters."""
    io = family.io_spec(tiny)
    example = family.example_inputs(tiny, layouts.EXAMPLE_IMAGES, seed=0)
    args = tuple(example[name] for name in io.input_names)
    root = tmp_path_factory.mktemp("phi4")
    files = {}
    for path, export in PATHS.items():
        model = export(family.export_module(tiny), args, io, CONFIG.opset)
        onnx_export.name_io_dims(model, io)
        files[path] = root / f"{path}.onnx"
        onnx_io.save_proto(model, files[path])
    return files


def test_validation_covers_the_required_layouts(cases):
    names = [name for name, _, _ in cases]
    shapes = {name: (inputs["pixel_values"].shape, len(ref)) for name, inputs, ref in cases}
    assert shapes["1 + 4 crops 896x896"][0][:2] == (1, 5)
    assert shapes["1 + 12 crops 1344x1792"][0][:2] == (1, 13)
    three = next(inputs for name, inputs, _ in cases if name.startswith("three images"))
    assert len({int(np.prod(s // crops.CROP)) for s in three["image_sizes"]}) == 3  # different crop counts
    padded = [name for name, inputs, _ in cases if (inputs["image_attention_mask"] == 0).any()]
    assert len(padded) >= 3
    same = [shapes[n] for n in names if n.startswith("same tokens")]
    assert len(same) == 2 and len(set(same)) == 1  # same input shapes and token count ...
    grids = {tuple(inputs["image_sizes"][0]) for name, inputs, _ in cases if name.startswith("same tokens")}
    assert len(grids) == 2  # ... two crop arrangements


@pytest.mark.parametrize("path", PATHS)
def test_parity_at_every_layout(exports, cases, path):
    sess = session.open_session(exports[path])
    for name, inputs, expected in cases:
        features = session.run(sess, inputs)[spec.OUTPUT_NAME]
        metrics = compare(features, expected, CONFIG.tolerance)
        assert metrics["ok"], f"{path} {name}: {metrics}"
        assert metrics["cosine"] > 0.99999, f"{path} {name}: {metrics}"


@pytest.mark.parametrize("path", PATHS)
def test_io_contract(exports, tiny, path):
    model = onnx.load(str(exports[path]))

    def dims(values):
        return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}

    assert dims(model.graph.input) == {
        "pixel_values": ["num_images", "max_num_crops", 3, 448, 448],
        "image_attention_mask": ["num_images", "max_num_crops", 32, 32],
        "image_sizes": ["num_images", 2],
    }
    assert dims(model.graph.output) == {"image_features": ["num_image_tokens", tiny.config.hidden_size]}
    types = {v.name: v.type.tensor_type.elem_type for v in model.graph.input}
    assert types == {"pixel_values": onnx.TensorProto.FLOAT, "image_attention_mask": onnx.TensorProto.FLOAT,
                     "image_sizes": onnx.TensorProto.INT64}


@pytest.mark.parametrize("path", PATHS)
def test_export_is_not_causal(exports, cases, tiny, path):
    """transformers' vision attention says is_causal=True: with sdpa and no padded patch the eager model
    runs causal. The export matches the bidirectional (eager attention) model, far from the causal one."""
    _, inputs, bidirectional = next(c for c in cases if c[0] == "one crop 448x448")
    assert not (inputs["image_attention_mask"] == 0).any()
    vision = tiny.config.vision_config
    vision._attn_implementation = "sdpa"
    try:
        (causal,) = family.reference(tiny)(inputs)
    finally:
        vision._attn_implementation = "eager"
    features = session.run(session.open_session(exports[path]), inputs)[spec.OUTPUT_NAME]
    assert compare(features, bidirectional, CONFIG.tolerance)["ok"]
    assert not compare(features, causal, CONFIG.tolerance)["ok"]


def test_patcher_restores_the_attention(tiny):
    from transformers.models.phi4_multimodal import modeling_phi4_multimodal as phi4

    original = phi4.Phi4MultimodalVisionAttention.forward
    inputs = family.example_inputs(tiny, [[448, 448]], seed=0)
    with torch.no_grad():
        ImageFeatures(tiny)(**inputs)
    assert phi4.Phi4MultimodalVisionAttention.forward is original
    assert all(m.is_causal for m in tiny.modules() if isinstance(m, phi4.Phi4MultimodalVisionAttention))


def test_checkpoint_round_trip(tiny, tmp_path):
    """A tiny Phi4MultimodalForCausalLM saved with save_pretrained: only the image embedding is read."""
    from transformers.models.phi4_multimodal.configuration_phi4_multimodal import Phi4MultimodalConfig
    from transformers.models.phi4_multimodal.modeling_phi4_multimodal import Phi4MultimodalForCausalLM

    config = Phi4MultimodalConfig(
        vision_config=tiny.config.vision_config.to_dict(), hidden_size=tiny.config.hidden_size,
        intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2,
        vocab_size=64, pad_token_id=0, bos_token_id=1, eos_token_id=2,
        audio_config={"hidden_size": 16, "intermediate_size": 16, "num_blocks": 1, "num_attention_heads": 2,
                      "ext_pw_out_channel": 16, "depthwise_separable_out_channel": 16, "nemo_conv_channels": 16})
    torch.manual_seed(1)
    full = Phi4MultimodalForCausalLM(config).eval()
    saved = full.model.embed_tokens_extend.image_embed
    with torch.no_grad():
        saved.sub_img_feature_extensor.normal_()
        saved.global_img_feature_extensor.normal_()
    full.save_pretrained(tmp_path)

    loaded, origin = family.build(CONFIG, str(tmp_path), seed=0)
    assert origin == {"weights": "checkpoint", "checkpoint": str(tmp_path)}
    expected = saved.state_dict()
    assert loaded.state_dict().keys() == expected.keys()
    assert all(torch.equal(v, expected[k]) for k, v in loaded.state_dict().items())
    # The loaded weights through ONNX against the eager model that saved them.
    io = family.io_spec(loaded)
    example = family.example_inputs(loaded, layouts.EXAMPLE_IMAGES, seed=0)
    proto = onnx_export.export_torchscript(family.export_module(loaded), tuple(example[n] for n in io.input_names),
                                           io, CONFIG.opset)
    inputs = layouts.pack([[500, 700]], np.random.default_rng(3))
    features = session.run(session.open_session(proto), inputs)[spec.OUTPUT_NAME]
    saved.config.vision_config._attn_implementation = "eager"  # the reference (sdpa may run causal)
    assert compare(features, family.reference(saved)(inputs)[0], CONFIG.tolerance)["ok"]


def test_metadata_names_the_example(tiny):
    meta = family.metadata(tiny, layouts.EXAMPLE_IMAGES)
    assert meta["family"] == "phi-4-mm" and json.loads(meta["export_image_sizes"]) == layouts.EXAMPLE_IMAGES
    example = family.example_inputs(tiny, layouts.EXAMPLE_IMAGES, seed=0)
    assert meta["export_num_crops"] == example["pixel_values"].shape[1]
    with torch.no_grad():
        assert meta["export_num_tokens"] == family.export_module(tiny)(**example).shape[0]


def _command(argv, capsys) -> tuple[int, str]:
    from builders import vision

    code = vision.main(argv)
    return code, capsys.readouterr().err


def test_checkpoint_without_image_embedding_is_refused(tmp_path, capsys):
    """A Phi-4 checkpoint whose safetensors hold no image-embedding weight: one error line, exit 2, no OUT."""
    from safetensors.torch import save_file

    folder = tmp_path / "ckpt"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({"model_type": "phi4_multimodal"}))
    save_file({"model.embed_tokens.weight": torch.zeros(4, 4)}, str(folder / "model.safetensors"))
    out = tmp_path / "out"
    code, err = _command(["--model", "phi-4-mm-tiny", "--checkpoint", str(folder), "--out", str(out)], capsys)
    assert code == 2
    line = single_error(err)
    assert "holds no vision weights" in line and "model.embed_tokens_extend.image_embed." in line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


@pytest.mark.parametrize("vision, message", [
    ({"image_size": 896}, "must be 448, 448, 14"),
    ({"num_attention_heads": 5}, "not a multiple of num_attention_heads"),
    ({"feature_layer": 7}, "feature_layer 7 is not a hidden state"),
    ({"hidden_size": "wide"}, "vision.hidden_size must be an integer"),
    ({"depth": 3}, "unknown vision config key 'depth'"),
])
def test_bad_config_is_refused(tmp_path, capsys, vision, message):
    import yaml

    raw = yaml.safe_load(Path(CONFIG.path).read_text())
    raw["vision"].update(vision)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(raw))
    code, err = _command(["--config", str(path), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and message in single_error(err)
    assert not (tmp_path / "out").exists()
