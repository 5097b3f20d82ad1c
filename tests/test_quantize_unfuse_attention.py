"""Fused com.microsoft Attention -> MatMul q/k/v + MultiHeadAttention, so that int4/int8 quantize q/k/v.

On the tiny Phi-4 pipeline (3 encoder layers, as in test_phi4_optimize: ORT's fusion skips the first layer, and
with the config's 2 only that one runs): the unfused model matches the fused one at every validation layout, the
attention outputs themselves included, padded patches made loud; `quantize int4` then quantizes q/k/v and
writes a smaller file than with the pass off. Synthetic one-node graphs check each supported Attention form
against ORT's own Attention kernel, and that an unsupported one is left as it is with a reason."""

import json

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantize import __main__ as quantize_cli
from quantize import stage
from quantize.passes import unfuse_attention
from tests import builds, support
from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.families.phi4_mm import crops, spec

PARITY = 1e-5


@pytest.fixture(scope="module")
def optimized():
    """The optimize stage's folder of the tiny Phi-4 config with 3 encoder layers (one fused Attention), after the
    surgery stage (tests.builds). Read-only."""
    export = builds.export_config("phi-4-mm-tiny", "phi-4-mm-tiny-3", {"num_hidden_layers": 3})
    return builds.path(builds.chain(export, ("surgery", "surgery"), ("optimized", "optimize"))["optimized"])


def _loud_padding(inputs: dict) -> dict:
    """The pack with its padded patches' pixels at 100: a key the mask drops must have no influence."""
    pixels = inputs["pixel_values"].copy()
    padded = np.repeat(np.repeat(inputs["image_attention_mask"] == 0, crops.PATCH, axis=2), crops.PATCH, axis=3)
    pixels[np.broadcast_to(padded[:, :, None], pixels.shape)] = 100.0
    return {**inputs, "pixel_values": pixels}


def _with_attention_outputs(folder) -> tuple[ir.Model, list[str]]:
    """The optimized model with each Attention's output added as a graph output (what the mask acts on)."""
    model = onnx_io.load(folder / "model.onnx", in_memory=True)
    attentions = support.ops(model, "Attention")
    model.graph.outputs.extend(a.outputs[0] for a in attentions)
    return model, [a.name for a in attentions]


def test_unfused_model_matches_the_fused_one(optimized):
    source = stage.read_input(optimized, 1)  # the stage's validation layouts
    padded = [i for i, inputs in enumerate(source.inputs) if (inputs["image_attention_mask"] == 0).any()]
    assert padded and any(lay["case"].startswith("same tokens") for lay in source.layouts)
    cases = [(lay["case"], inputs) for lay, inputs in zip(source.layouts, source.inputs)]
    cases += [(f"{source.layouts[i]['case']}, loud padding", _loud_padding(source.inputs[i])) for i in padded]

    fused, names = _with_attention_outputs(optimized)
    assert names, "the 3-layer tiny Phi-4 must have a fused Attention"
    expected = [open_session(fused, 1).run(None, inputs) for _, inputs in cases]

    model, _ = _with_attention_outputs(optimized)
    refused = {}
    assert unfuse_attention.apply(model, refused) == len(names) and refused == {}
    assert not support.ops(model, "Attention")
    assert len(support.ops(model, "MultiHeadAttention")) == len(names)
    matmuls = {n.name: n for n in support.ops(model, "MatMul")}
    for name in names:
        for part in "qkv":
            weight = matmuls[f"{name}/MatMul_{part}"].inputs[1].const_value
            assert weight is not None and len(weight.shape) == 2
    sess = open_session(model, 1)
    worst = {}
    for (case, inputs), want in zip(cases, expected):
        got = sess.run(None, inputs)
        worst[case] = max(float(np.abs(g - w).max()) for g, w in zip(got, want))
    print(f"unfused vs fused, max abs over outputs (features and attention): {worst}")
    assert max(worst.values()) <= PARITY, worst

    # the check would catch a lost mask: without it the attention outputs move at the loud padded layouts
    for mha in support.ops(model, "MultiHeadAttention"):
        mha.replace_input_with(4, None)
    unmasked = open_session(model, 1)
    loud = [(c, w) for c, w in zip(cases, expected) if c[0].endswith("loud padding")]
    assert all(np.abs(unmasked.run(None, inputs)[-1] - want[-1]).max() > 100 * PARITY for (_, inputs), want in loud)


def _size(folder) -> int:
    return sum(onnx_io.file_sizes(folder / "model.onnx").values())


def test_int4_quantizes_q_k_v(optimized, tmp_path, monkeypatch, capsys):
    before, after = tmp_path / "int4-fused", tmp_path / "int4"
    with monkeypatch.context() as patch:  # the stage as it was: the pass off
        patch.setattr(unfuse_attention, "apply", lambda model, refused=None: 0)
        assert quantize_cli.main(["int4", str(optimized), str(before)]) == 0
    assert quantize_cli.main(["int4", str(optimized), str(after)]) == 0
    assert "unfused 1 Attention node(s)" in capsys.readouterr().err

    report = json.loads((after / "report.json").read_text())
    old_report = json.loads((before / "report.json").read_text())
    assert report["quantized_nodes"] == old_report["quantized_nodes"] + 3
    model = onnx_io.load(after / "model.onnx", in_memory=True)
    assert not support.ops(model, "Attention")
    kept = {w["weight"] for w in report["fp32_weight_nodes"]}
    for mha in support.ops(model, "MultiHeadAttention"):
        producers = [v.producer() for v in mha.inputs[:3]]
        assert all(p.op_type == "MatMulNBits" or p.inputs[1].name in kept for p in producers), mha.name
    hidden = int(onnx_io.metadata(optimized / "model.onnx")[spec.METADATA_WIDTH])
    left = [name for name, v in model.graph.initializers.items()
            if v.const_value is not None and v.const_value.dtype == ir.DataType.FLOAT
            and tuple(v.const_value.shape) in ((hidden, 3 * hidden), (hidden, hidden)) and name not in kept]
    assert left == [], f"fp32 q/k/v-sized weights left unquantized and unreported: {left}"
    sizes = {"pass off": _size(before), "pass on": _size(after)}
    print(f"tiny Phi-4 (3 layers) int4 model.onnx bytes: {sizes}")
    assert sizes["pass on"] < sizes["pass off"]


# --- synthetic one-node graphs: each supported form against ORT's Attention kernel, refusals ---------------

def attention_graph(rng, sizes=(8, 8, 8), heads=2, mask_rank=2, bias=True, attention_bias=False, past=False,
                    **attrs):
    """y = com.microsoft.Attention(x [B, S, 8], W [8, sum(sizes)][, b][, mask int32 [B], [B, S] or [B, S, S]]
    [, past][, attention_bias [1, heads, S, S]]) (mask_rank 0: none; bias "zeros": b = 0), and feeds with the first
    sequence padded. The same rng state gives the same W and inputs whatever the options."""
    batch, seq, width = 2, 5, 8
    inputs = ["x", "W", "b" if bias else "", "mask" if mask_rank else ""]
    inputs += ["past" if past else "", "attention_bias"] if attention_bias or past else []
    node = helper.make_node("Attention", inputs, ["y"], domain="com.microsoft", num_heads=heads, name="att", **attrs)
    mask_dims = ["B", "S"] if mask_rank == 2 else ["B", "S", "S"] if mask_rank == 3 else ["B"]
    io = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", width])]
    feeds = {"x": rng.standard_normal((batch, seq, width)).astype(np.float32)}
    if mask_rank:
        io.append(helper.make_tensor_value_info("mask", TensorProto.INT32, mask_dims))
        mask = np.ones([batch, seq, seq][:mask_rank], np.int32)
        if mask_rank > 1:
            mask[0, ..., 3:] = 0
        feeds["mask"] = mask if mask_rank > 1 else np.array([3, 5], np.int32)
    if attention_bias:
        io.append(helper.make_tensor_value_info("attention_bias", TensorProto.FLOAT, [1, heads, "S", "S"]))
        feeds["attention_bias"] = rng.standard_normal((1, heads, seq, seq)).astype(np.float32)
    if past:
        io.append(helper.make_tensor_value_info("past", TensorProto.FLOAT, [2, "B", heads, "P", 4]))
    weight, bias_value = rng.standard_normal((width, sum(sizes))), rng.standard_normal(sum(sizes))
    weights = [numpy_helper.from_array(weight.astype(np.float32), "W"),
               numpy_helper.from_array((bias_value if bias != "zeros" else 0 * bias_value).astype(np.float32), "b")]
    graph = helper.make_graph([node], "attention", io, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              weights)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    return ir.from_proto(proto), feeds


@pytest.mark.parametrize("form", [
    {}, {"scale": 0.3}, {"mask_filter_value": -3.4028234663852886e38}, {"unidirectional": 1}, {"bias": False},
    {"mask_rank": 0},  # no mask: MultiHeadAttention takes its flash path
    {"sizes": (8, 8, 4), "qkv_hidden_sizes": [8, 8, 4]}, {"mask_rank": 3}, {"attention_bias": True},
], ids=lambda form: ",".join(form) or "plain")
def test_each_supported_form_matches_ort_attention(form):
    model, feeds = attention_graph(np.random.default_rng(0), **form)
    reference = model
    if form.get("bias") is False:  # ORT 1.31's CPU Attention segfaults without its optional bias: use b = 0
        reference = attention_graph(np.random.default_rng(0), **{**form, "bias": "zeros"})[0]
    (want,) = support.run_graph(reference, feeds)
    refused = {}
    assert unfuse_attention.apply(model, refused) == 1, refused
    assert [n.op_type for n in model.graph] == ["MatMul"] * 3 + ["MultiHeadAttention"]
    (mha,) = support.ops(model, "MultiHeadAttention")
    copied = {k: form[k] for k in ("scale", "mask_filter_value", "unidirectional") if k in form}
    assert {k: a.value for k, a in mha.attributes.items()} == pytest.approx({"num_heads": 2, **copied})
    (got,) = support.run_graph(model, feeds)
    np.testing.assert_allclose(got, want, atol=PARITY, rtol=0)


@pytest.mark.parametrize("form, reason", [
    ({"do_rotary": 1}, "unsupported attribute(s) do_rotary=1"),
    ({"past_present_share_buffer": 1}, "unsupported attribute(s) past_present_share_buffer=1"),
    ({"mask_rank": 1}, "mask_index of rank 1"),
    ({"past": True}, "takes a past state"),
    ({"sizes": (8, 8, 4)}, "qkv_hidden_sizes [] does not split the 20 weight columns"),
])
def test_an_unsupported_attention_is_left_as_is(form, reason):
    model, _ = attention_graph(np.random.default_rng(0), **form)
    before = onnx_io.to_proto(model).SerializeToString()
    refused = {}
    assert unfuse_attention.apply(model, refused) == 0
    assert list(refused) == ["att"] and reason in refused["att"], refused
    assert onnx_io.to_proto(model).SerializeToString() == before
