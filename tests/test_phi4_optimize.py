"""Phi-4-multimodal through the optimize passes its family declares: ONNX Runtime fuses the vision
attention into `Attention` WITH the key-padding mask, so padded patches stay masked. Fails if a
fusion drops the mask (ORT's `vit` default, AttentionMaskFormat.NoMask, does): every fused attention
must take its mask from `image_attention_mask`, and parity must hold at padded layouts."""

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from builders.config import load_config
from builders.phi4_mm import family
from quantize.passes import gemm_to_matmul, ort_transformer, unfuse_skip_layer_norm
from tests.conftest import export_phi4_tiny
from vlm_vision_onnx.core import onnx_io, session
from vlm_vision_onnx.core.parity import compare
from vlm_vision_onnx.families.phi4_mm import crops, layouts, spec

# The model: conftest.export_phi4_tiny(layers=3). Two encoder layers run (of 3; features from the second-last):
# ORT's fusion skips the first layer, whose residual is the embedding sum, so the second one must fuse.
TOLERANCE = load_config("phi-4-mm-tiny").tolerance
PADDED = ["export example", "padded patch rows", "padded patch columns"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(metadata, exported ir.Model, [(name, inputs, eager features)] at padded layouts)."""
    _, embed, proto = export_phi4_tiny(layers=3)
    path = tmp_path_factory.mktemp("phi4opt") / "model.onnx"
    onnx_io.save_proto(proto, path)
    reference = family.reference(embed)
    cases = [(name, _loud_padding(inputs), reference(_loud_padding(inputs))[0])
             for name, inputs in family.validation_cases(embed, layouts.EXAMPLE_IMAGES, seed=0)
             if any(name.startswith(p) for p in PADDED)]
    assert len(cases) == len(PADDED) and all((c[1]["image_attention_mask"] == 0).any() for c in cases)
    return family.metadata(embed, layouts.EXAMPLE_IMAGES), path, cases


def _loud_padding(inputs):
    """The pack with its padded patches' pixels set to 100: a masked key must have no influence whatever it
    holds, and an unmasked one then shows (random small weights make attention too soft to show it)."""
    pixels = inputs["pixel_values"].copy()
    padded = np.repeat(np.repeat(inputs["image_attention_mask"] == 0, crops.PATCH, axis=2), crops.PATCH, axis=3)
    pixels[np.broadcast_to(padded[:, :, None], pixels.shape)] = 100.0
    return {**inputs, "pixel_values": pixels}


def _declared_passes(path, metadata) -> tuple[ir.Model, dict]:
    """The family's OPTIMIZE_PASSES (gemm, then ORT with the mask kept, then SkipLayerNormalization split) on
    the exported model; returns it and ORT's fusion counts."""
    assert spec.OPTIMIZE_PASSES == ("gemm", "ort", "unskipln")
    model = onnx_io.load(path, in_memory=True)
    gemm_to_matmul.apply(model)
    model, stats = ort_transformer.apply(model, num_heads=int(metadata[spec.METADATA_HEADS]),
                                         hidden_size=int(metadata[spec.METADATA_WIDTH]))
    assert unfuse_skip_layer_norm.apply(model) == stats.get("SkipLayerNormalization", 0)
    return model, stats


def _features(sess, inputs) -> np.ndarray:
    return session.run(sess, inputs)[spec.OUTPUT_NAME]


# The mask input of ORT's fused attention ops: Attention's mask_index, MultiHeadAttention's key_padding_mask.
MASK_INPUT = {"Attention": 3, "MultiHeadAttention": 4}


def _mask_sources(model: ir.Model) -> list[str]:
    """For every fused attention: the graph input its mask is computed from, or '' without a mask."""
    sources = []
    for node in model.graph:
        if node.op_type not in MASK_INPUT:
            continue
        index = MASK_INPUT[node.op_type]
        value = node.inputs[index] if len(node.inputs) > index else None
        while value is not None and value.producer() is not None:
            value = value.producer().inputs[0]
        sources.append(value.name if value is not None else "")
    return sources


def test_attention_is_fused_with_the_mask(built):
    metadata, path, cases = built
    model, stats = _declared_passes(path, metadata)
    assert stats.get("Attention", 0) >= 1, stats
    assert _mask_sources(model) == ["image_attention_mask"] * stats["Attention"]
    sess = session.open_session(model)
    for name, inputs, expected in cases:
        metrics = compare(_features(sess, inputs), expected, TOLERANCE)
        assert metrics["ok"], f"{name}: {metrics}"


def test_the_ort_pass_holds_out_only_weights_no_fusion_reads(built, monkeypatch):
    """At published dims every weight is large. The ORT pass hands the Attention fusion the q, k, v weights and
    biases it concatenates (and BiasGelu its biases), holds out the other MatMul weights (o, fc1, fc2: 3/4 of
    the encoder's bytes at published dims) and puts them back: the same fusions, the same outputs."""
    metadata, path, cases = built
    _, plain = _declared_passes(path, metadata)
    monkeypatch.setattr(ort_transformer, "HOLD_OUT_BYTES", 1)  # every weight counts as large
    handed = {}
    optimize_model = ort_transformer.optimize_model

    def spy(proto, **options):
        handed["held"] = {t.name for t in proto.graph.initializer if t.data_location == onnx.TensorProto.EXTERNAL}
        handed["kept"] = {t.name for t in proto.graph.initializer} - handed["held"]
        return optimize_model(proto, **options)

    monkeypatch.setattr(ort_transformer, "optimize_model", spy)
    model, stats = _declared_passes(path, metadata)
    assert stats == plain and stats.get("Attention", 0) >= 1, (stats, plain)
    # held: o, fc1, fc2 of every layer and the projector's two; all still plain MatMul weights afterwards
    layers = stats["Attention"] + sum(n.op_type == "Softmax" for n in model.graph)  # fused + left unfused
    assert len(handed["held"]) >= 3 * layers + 2, sorted(handed["held"])
    matmul_weights = {n.inputs[1].name for n in model.graph if n.op_type == "MatMul"}
    assert handed["held"] <= matmul_weights
    # kept: the q, k, v weights the Attention fusion packed (no longer initializers of their own)
    assert len({name for name in handed["kept"] if name not in model.graph.initializers}) >= 3 * stats["Attention"]
    sess = session.open_session(model)
    for name, inputs, expected in cases:
        metrics = compare(_features(sess, inputs), expected, TOLERANCE)
        assert metrics["ok"], f"{name}: {metrics}"
