"""Activation smoothing (quantize/passes/smooth_activations.py): the fp32 model computes the same, an outlier
channel's range moves into the weights, and only LayerNorm output 0 and its MatMuls change.

Parity rule: core.parity's, max |smoothed - original| <= 1e-5 * max(1, max |original|) per output, i.e.
absolute for outputs within [-1, 1] (every output of the tiny models: max |ref| ~ 0.15-0.3), relative to the
output's largest value above that."""


import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantize import calibration
from quantize.passes import smooth_activations as smooth
from tests import support
from vlm_vision_onnx.core import onnx_io, parity
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.families import PHI4_MM, QWEN3_VL, validation

TOLERANCE = 1e-5
WIDTH, OUTLIER, OUTLIER_GAIN = 32, 3, 400.0


def synthetic(rng) -> ir.Model:
    """x, r [N, WIDTH] ->
    y1 = LayerNorm(x, gamma, beta1) -> MatMul W1 [WIDTH, 16], MatMul W2 [WIDTH, 24], Shape      (smoothed)
    y2, _, _, total = SkipLayerNorm(x, r, gamma, beta2) -> MatMul W3 [WIDTH, 16]; total an output (smoothed)
    y3 = LayerNorm(r, gamma, beta3) -> Add(y3, x)                                              (skipped)
    gamma (shared by all three) is ~1 with channel OUTLIER at OUTLIER_GAIN: y1, y2 carry an outlier channel."""
    gamma = (1 + 0.1 * rng.standard_normal(WIDTH)).astype(np.float32)
    gamma[OUTLIER] = OUTLIER_GAIN
    consts = {"gamma": gamma, **{f"beta{i}": (0.1 * rng.standard_normal(WIDTH)).astype(np.float32) for i in (1, 2, 3)},
              **{f"W{i}": (0.05 * rng.standard_normal((WIDTH, d))).astype(np.float32)
                 for i, d in ((1, 16), (2, 24), (3, 16))}}
    nodes = [
        helper.make_node("LayerNormalization", ["x", "gamma", "beta1"], ["y1"], axis=-1, epsilon=1e-5),
        helper.make_node("MatMul", ["y1", "W1"], ["m1"]), helper.make_node("MatMul", ["y1", "W2"], ["m2"]),
        helper.make_node("Shape", ["y1"], ["shape"]),
        helper.make_node("SkipLayerNormalization", ["x", "r", "gamma", "beta2"], ["y2", "mean", "inv_std", "total"],
                         domain="com.microsoft", epsilon=1e-5),
        helper.make_node("MatMul", ["y2", "W3"], ["m3"]),
        helper.make_node("LayerNormalization", ["r", "gamma", "beta3"], ["y3"], axis=-1, epsilon=1e-5),
        helper.make_node("Add", ["y3", "x"], ["added"]),
    ]
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", WIDTH]) for n in ("x", "r")]
    outputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, ["N", d])
               for n, d in (("m1", 16), ("m2", 24), ("m3", 16), ("total", WIDTH), ("added", WIDTH))]
    outputs.append(helper.make_tensor_value_info("shape", TensorProto.INT64, [2]))
    graph = helper.make_graph(nodes, "smooth", inputs, outputs, [numpy_helper.from_array(a, n) for n, a in consts.items()])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    return ir.from_proto(proto)


def ratio(maxima: np.ndarray) -> float:
    """The activation range a per-tensor scale must span, relative to a typical channel: max / median."""
    return float(maxima.max() / np.median(maxima))


def test_outlier_channel_range_moves_into_the_weights():
    rng = np.random.default_rng(0)
    model = synthetic(rng)
    feeds = [{name: rng.standard_normal((n, WIDTH), dtype=np.float32) for name in ("x", "r")} for n in (7, 64, 5)]
    expected = [support.run_graph(model, f) for f in feeds]
    candidates, skipped = smooth.find(model)
    assert [c.output.name for c in candidates] == ["y1", "y2"]
    assert [len(c.matmuls) for c in candidates] == [2, 1]  # the Shape consumer reads no value
    assert len(skipped) == 1 and "feeds Add" in skipped[0]["reason"]
    before = smooth.activation_maxima(model, feeds)
    assert [o.name for o in model.graph.outputs] == ["m1", "m2", "m3", "total", "added", "shape"]  # left as it was
    ops = [(n.op_type, [v.name for v in n.outputs]) for n in model.graph]

    report = smooth.apply(model, before)
    assert report["smoothed"] == 2 and report["skipped"] == 1
    assert [(n.op_type, [v.name for v in n.outputs]) for n in model.graph] == ops  # constants change, nodes do not
    skip_ln = next(n for n in model.graph if n.op_type == "SkipLayerNormalization")
    assert [u.node.name for u in skip_ln.outputs[3].uses()] == [] and skip_ln.outputs[3].is_graph_output()
    skipped_ln = next(n for n in model.graph if n.outputs[0].name == "y3")
    assert skipped_ln.inputs[1].name == "gamma"  # the shared gamma stays for the LayerNorm left alone
    np.testing.assert_array_equal(skipped_ln.inputs[1].const_value.numpy()[OUTLIER], OUTLIER_GAIN)

    for feed, want in zip(feeds, expected):
        got = support.run_graph(model, feed)
        np.testing.assert_array_equal(got[-1], want[-1])  # Shape
        for name, g, w in zip(["m1", "m2", "m3", "total", "added"], got, want):
            record = parity.compare(g, w, TOLERANCE)
            assert record["ok"], f"{name}: {record}"
        np.testing.assert_array_equal(got[3], want[3])  # the residual sum (SkipLN output 3) is untouched

    after = smooth.activation_maxima(model, feeds)
    for name in ("y1", "y2"):
        assert ratio(before[name]) > 100  # the outlier channel: hundreds of times a typical one
        reduction = ratio(before[name]) / ratio(after[name])
        assert reduction >= 10, f"{name}: range {ratio(before[name]):.1f} -> {ratio(after[name]):.1f}"
        node = next(n for n in report["nodes"] if n["output"] == name)
        np.testing.assert_allclose(node["act_max_after"]["ratio"], ratio(after[name]), rtol=1e-3)


def test_scales_are_one_where_undefined_and_clamped():
    act = np.array([4.0, 0.0, np.inf, 1e12, 1e-12, 1.0], dtype=np.float32)
    w = np.array([1.0, 2.0, 1.0, 1.0, 1.0, 0.0], dtype=np.float32)
    s = smooth.scales(act, w, 0.5)
    np.testing.assert_allclose(s, [2.0, 1.0, 1.0, smooth.CLAMP[1], smooth.CLAMP[0], 1.0])
    with pytest.raises(Exception, match="alpha"):
        smooth.apply(synthetic(np.random.default_rng(0)), {}, alpha=1.5)


def test_missing_maxima_skip_the_layer_norm():
    model = synthetic(np.random.default_rng(0))
    report = smooth.apply(model, {})
    assert report["smoothed"] == 0 and report["skipped"] == 3
    assert sum("no activation maxima" in s["reason"] for s in report["skips"]) == 2


def check_smoothed(model: ir.Model, feeds: list, layouts: list[dict], inputs: list[dict]) -> tuple[dict, float]:
    """Smooth `model` with maxima over `feeds`; return (report, worst max abs diff) after asserting
    parity within TOLERANCE at every layout against the model before."""
    reference = parity.run_all(open_session(model, 1), inputs)
    ops = [n.op_type for n in model.graph]
    report = smooth.smooth(model, feeds)
    assert report["smoothed"] >= 1 and [n.op_type for n in model.graph] == ops
    records = parity.check(open_session(model, 1), layouts, inputs, reference, TOLERANCE)
    assert all(r["ok"] for r in records), [r for r in records if not r["ok"]]
    worst = parity.worst(records)["max_abs"]
    print(f"smoothed {report['smoothed']}, skipped {report['skipped']}; max abs diff {worst:.2e} "
          f"over {len(layouts)} layouts")
    return report, worst


@pytest.fixture(scope="module")
def qwen_optimized(tiny_optimized):
    """The tiny Qwen3-VL config through `builders.vision` and `python -m quantize optimize` (shared)."""
    return tiny_optimized


def test_qwen_tiny_is_unchanged_at_every_layout(qwen_optimized):
    model_file = qwen_optimized / "model.onnx"
    feeds = calibration.for_model(model_file)  # the processor from the export's report, through `input`
    assert len(feeds) == len(calibration.PHOTOS) * len(calibration.SIZES) + 1
    layouts = validation.from_report(model_file, QWEN3_VL)
    names = [lay["case"] for lay in layouts]
    assert any(n.startswith("same patch count") for n in names) and "image 1024x1024" in names  # the largest
    inputs = validation.layout_inputs(QWEN3_VL, layouts, onnx_io.metadata(model_file))
    model = onnx_io.load(model_file, in_memory=True)
    report, worst = check_smoothed(model, feeds, layouts, inputs)
    # qkv and MLP-up of every block, and both deepstack mergers' MLP; the final merger's norm feeds a Reshape
    assert report["smoothed"] == 2 * support.DEPTH + 2
    assert [s["reason"].split(" '")[0] for s in report["skips"]] == ["output 0 feeds Reshape"]
    assert worst <= TOLERANCE


def test_phi4_tiny_is_unchanged_at_every_layout(tmp_path):
    """Three layers of the tiny Phi-4 config (the second-last feeds the features): ORT fuses the second
    layer's attention, so a LayerNorm that feeds Attention's qkv weight is smoothed too."""
    from builders.phi4_mm import family
    from quantize.passes import gemm_to_matmul, ort_transformer
    from tests.conftest import export_phi4_tiny
    from vlm_vision_onnx.families.phi4_mm import layouts as phi_layouts
    from vlm_vision_onnx.families.phi4_mm import spec

    config, embed, proto = export_phi4_tiny(layers=3)
    metadata = {k: str(v) for k, v in family.metadata(embed, phi_layouts.EXAMPLE_IMAGES).items()}
    model = ir.from_proto(proto)
    gemm_to_matmul.apply(model)
    model, _ = ort_transformer.apply(model, num_heads=int(metadata[spec.METADATA_HEADS]),
                                     hidden_size=int(metadata[spec.METADATA_WIDTH]))
    assert len(support.ops(model, "Attention")) == 1

    export = {"stage": "export", "family": PHI4_MM.name, "weights": "random", "config": str(config.path)}
    folder = calibration.processor_folder(export, metadata, tmp_path)
    feeds = calibration.items(metadata, folder)
    layouts = [{"case": name, **lay} for name, lay in PHI4_MM.default_layouts(metadata)]
    names = [lay["case"] for lay in layouts]
    assert any(n.startswith("same tokens") for n in names) and any("12 crops" in n for n in names)  # the largest
    inputs = validation.layout_inputs(PHI4_MM, layouts, metadata)
    report, worst = check_smoothed(model, feeds, layouts, inputs)
    assert report["smoothed"] == 4 and report["skipped"] == 0  # 2 layers x (attention in, MLP in)
    attention = support.ops(model, "Attention")[0]
    assert any(attention.name in n["matmuls"] for n in report["nodes"])
    assert worst <= TOLERANCE
