"""The outlier-stress weight edit (quantize/outliers.py) and the fp32 restore of the exclusion search."""

from functools import partial

import numpy as np
import onnx_ir as ir
import pytest

from quantize import outlier_check, outliers, quantizers, stage
from tests import support
from vlm_vision_onnx.core import onnx_io, taps
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.families import QWEN3_VL


@pytest.fixture(scope="module")
def optimized(tiny_optimized):
    return tiny_optimized / "model.onnx"


def weights(model: ir.Model) -> dict[str, np.ndarray]:
    return {name: v.const_value.numpy().copy() for name, v in model.graph.initializers.items()
            if v.const_value is not None}


def test_writers_get_scaled_columns_and_nothing_else_changes(optimized):
    model = onnx_io.load(optimized, in_memory=True)
    before = weights(model)
    record = outliers.stress(model)
    after = weights(model)
    channels, factors = record["channels"], np.asarray(record["factors"], dtype=np.float32)
    assert len(channels) == outliers.NUM_CHANNELS and factors.min() == 20 and factors.max() == 100
    blocks = {f"visual.blocks.{i}.{n}.weight.matmul" for i in range(support.DEPTH) for n in ("attn.proj", "mlp.linear_fc2")}
    written = {w["weight"] for w in record["writers"]}
    assert blocks <= written and any("patch_embed" in w for w in written)
    for name in blocks:
        others = [c for c in range(before[name].shape[1]) if c not in channels]
        np.testing.assert_allclose(after[name][:, channels], before[name][:, channels] * factors, rtol=1e-6)
        np.testing.assert_array_equal(after[name][:, others], before[name][:, others])
    untouched = [n for n in before if n not in written and n in after and not n.startswith("visual.patch_embed")]
    assert untouched and all(np.array_equal(before[n], after[n]) for n in untouched)  # e.g. qkv, fc1, norms


def test_residual_stream_carries_the_outliers(optimized):
    """Every residual sum (SkipLayerNormalization output 3): the chosen channels >= 10x the others."""
    model = onnx_io.load(optimized, in_memory=True)
    record = outliers.stress(model)
    _, sums = outliers.residual_contributions(model)
    model.graph.outputs.extend(sums)
    feed = QWEN3_VL.layout_inputs({"grid_thw": [[1, 16, 16]]}, {}, np.random.default_rng(0))
    values = open_session(model, 1).run(None, feed)[-len(sums):]
    assert len(values) == 2 * support.DEPTH + 1
    for value in values:
        peak = np.abs(value).max(axis=0)
        others = np.delete(peak, record["channels"])
        assert peak[record["channels"]].min() >= 10 * others.max()


def test_restore_fp32_of_every_matmul_is_the_fp32_model(optimized, tmp_path):
    model = onnx_io.load(optimized, in_memory=True)
    stage.name_nodes(model)
    fp32 = tmp_path / "fp32.onnx"
    onnx_io.save(model, fp32)
    names = [n.name for n, _ in quantizers.quantizable(model)]
    feed = QWEN3_VL.layout_inputs({"grid_thw": [[1, 12, 20], [2, 8, 8]]}, {}, np.random.default_rng(1))
    reference = open_session(fp32, 1).run(None, feed)
    for quantize in (partial(quantizers.dynamic, per_channel=True, reduce_range=False),
                     partial(quantizers.matmul_nbits, bits=8, block_size=32, symmetric=True, accuracy_level=4)):
        quantize(fp32, tmp_path / "q.onnx", quantizers.input_readers(model))  # as the stages: the patch MatMul fp32
        outlier_check.restore_fp32(tmp_path / "q.onnx", fp32, names, tmp_path / "back.onnx")
        back = onnx_io.load(tmp_path / "back.onnx")
        assert not [n for n in back.graph if n.op_type in quantizers.QUANTIZED_OPS or "Quantize" in n.op_type]
        for got, ref in zip(open_session(tmp_path / "back.onnx", 1).run(None, feed), reference):
            np.testing.assert_array_equal(got, ref)


def test_embedding_only_copy_scales_the_patch_embedding_and_biases_alone(optimized):
    """writers="embedding": the outliers are made once (patch embedding) and pushed by the blocks' bias terms;
    no MatMul weight is touched, and the stream still carries them at every residual sum."""
    model = onnx_io.load(optimized, in_memory=True)
    record = outliers.stress(model, writers="embedding")
    assert [w["op"] for w in record["writers"]] == ["MatMul"]  # the patch embedding (quantize/passes/patch_matmul)
    _, sums = outliers.residual_contributions(model)
    model.graph.outputs.extend(sums)
    feed = QWEN3_VL.layout_inputs({"grid_thw": [[1, 16, 16]]}, {}, np.random.default_rng(0))
    values = open_session(model, 1).run(None, feed)[-len(sums):]
    for value in values:
        peak = np.abs(value).max(axis=0)
        assert peak[record["channels"]].min() >= 10 * np.median(np.delete(peak, record["channels"]))
    with pytest.raises(ValueError, match="writers"):
        outliers.stress(onnx_io.load(optimized, in_memory=True), writers="some")


def first_block_stream(model: ir.Model) -> ir.Value:
    """The residual stream the first block's LayerNorm reads: LayerNormalization input 0, or what a
    SkipLayerNormalization sums (its output 3)."""
    norm = next(n for n in model.graph if n.op_type in ("LayerNormalization", "SkipLayerNormalization"))
    return norm.inputs[0] if norm.op_type == "LayerNormalization" else norm.outputs[3]


def test_the_gate_copy_has_outlier_channels_in_the_first_blocks_layernorm_input(optimized, tmp_path):
    """The stage's gate (outliers written once, as in trained ViTs): max |x| of the outlier channels at the first
    block's LayerNorm input is >= 20x the median channel's, at a real layout."""
    stressed = tmp_path / "stressed.onnx"
    record = outlier_check.make_stressed(optimized, stressed)
    assert outlier_check.GATE_WRITERS == "embedding" and [w["op"] for w in record["writers"]] == ["MatMul"]
    stream = first_block_stream(onnx_io.load(stressed)).name
    feed = QWEN3_VL.layout_inputs({"grid_thw": [[1, 16, 16], [2, 8, 12]]}, {}, np.random.default_rng(0))
    value = taps.tap(stressed, [stream], [feed], 1)[stream][0]
    peak = np.abs(value).max(axis=0)
    ratio = peak[record["channels"]] / np.median(np.delete(peak, record["channels"]))
    assert ratio.min() >= 20, ratio
