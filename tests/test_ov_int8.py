"""The OpenVINO INT8 variant (`python -m quantize ov-int8`, quantize/ov_int8.py) on the tiny Qwen3-VL model: at its
floor at every validation layout and on the outlier-stress copy, attention left float, shipped in a package as
openvino/vision_encoder_int8.xml, checked by `runtime verify` and run by `runtime embed --engine openvino`.

One stage run per session (the conftest's tiny optimized stage as IN), one package.
"""

import json

import numpy as np
import pytest

pytest.importorskip("nncf", reason="the openvino extra is not installed (make install installs it)")

from quantize import __main__ as quantize_cli
from quantize import ov_int8, photo_check
from tests import builds
from tests.conftest import single_error, snapshot
from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.openvino_session import OpenVINOSession
from vlm_vision_onnx.core.parity import min_token_cosine
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.families import of_model
from vlm_vision_onnx.families import validation as layouts_mod
from vlm_vision_onnx.runtime import __main__ as runtime_cli
from vlm_vision_onnx.runtime import sample_photos

STAGE = builds.stage(builds.QWEN3_VL_OPTIMIZED, "ov-int8", "--threads", "2")


@pytest.fixture(scope="module")
def stage():
    """The ov-int8 stage folder of the tiny optimized model, through the command with its defaults (two threads).
    Read-only."""
    return builds.path(STAGE)


@pytest.fixture(scope="module")
def dist():
    """dist/qwen3-vl-tiny/ of a build holding the export, optimize and ov-int8 stages. Read-only."""
    stages = {"export": builds.QWEN3_VL, "optimized": builds.QWEN3_VL_OPTIMIZED, "ov-int8": STAGE}
    return builds.path(builds.package("qwen3-vl-tiny", stages)) / "qwen3-vl-tiny"


def test_the_stage_is_at_its_floor_at_every_layout(stage, tiny_optimized):
    """The report's per-layout figures meet the floor; rerun here, independently of the report, the saved IR in
    OpenVINO against ONNX Runtime fp32 gives the same min per-token cosine at every validation layout."""
    report = json.loads((stage / "report.json").read_text())
    floor = report["config"]["min_cosine"]
    assert floor == ov_int8.DEFAULT_MIN_COSINE == 0.998
    model_file = onnx_io.model_path(tiny_optimized)
    metadata = onnx_io.metadata(model_file)
    layouts = layouts_mod.layouts_for(model_file, metadata, of_model(metadata, model_file))
    inputs = layouts_mod.layout_inputs(of_model(metadata, model_file), layouts, metadata)
    assert [c["case"] for c in report["validation"]["cases"]] == [lay["case"] for lay in layouts]
    assert report["reverse_order"] == {"identical": True, "cases": len(layouts)}
    assert any(lay["case"].startswith("same patch count") for lay in layouts)
    fp32 = open_session(model_file, 1)
    quantized = OpenVINOSession(stage / "model.xml", 1, report["validation"]["engine"].split()[-1])
    for layout, feeds, case in zip(layouts, inputs, report["validation"]["cases"]):
        cosines = [min_token_cosine(q, r) for q, r in zip(quantized.run(None, feeds), fp32.run(None, feeds))]
        assert min(cosines) >= floor, (layout["case"], cosines)
        recorded = min(o["min_token_cosine"] for o in case["outputs"].values())
        assert abs(min(cosines) - recorded) < 1e-6, (layout["case"], cosines, recorded)


def test_held_out_photos_measured_in_openvino(stage, tiny_optimized):
    """The stage records the held-out photos (quantize.photo_check) as the int8 stage does, computed in OpenVINO:
    one photo rerun here gives the recorded figure."""
    report = json.loads((stage / "report.json").read_text())
    photos = report["validation"]["photos"]
    assert photos["photos"] == list(photo_check.HELD_OUT) and len(photos["cases"]) == 4
    assert 0.9 < photos["min_token_cosine"] <= 1.0
    name, feeds = photo_check.named_feeds(onnx_io.model_path(tiny_optimized))[0]
    fp32 = open_session(onnx_io.model_path(tiny_optimized), 1).run(None, feeds)
    quantized = OpenVINOSession(stage / "model.xml", 1, report["validation"]["engine"].split()[-1]).run(None, feeds)
    recorded = next(c for c in photos["cases"] if c["case"] == name)
    got = min(min_token_cosine(q, r) for q, r in zip(quantized, fp32))
    assert abs(got - min(o["min_token_cosine"] for o in recorded["outputs"].values())) < 1e-6


def test_weights_and_activations_int8_attention_float(stage):
    """Most weight MatMuls take int8 activations and weights (one FakeQuantize each, before them or before a
    reshape, that feeds nothing but them; int8 constants); the
    attention (OpenVINO's ScaledDotProductAttention in the If and Loop bodies), the patch embedding (a MatMul
    reading pixel_values since the optimize stage's patch pass) and the output heads (the mergers' MLPs) stay
    float; whatever else stays float is named with its reason."""
    import openvino as ov

    report = json.loads((stage / "report.json").read_text())
    model = ov.Core().read_model(str(stage / "model.xml"))
    quantized = ov_int8.quantized_matmuls(model)
    assert len(quantized) == report["quantized_nodes"] >= 10
    weighted, _ = ov_int8.matmuls(model)
    assert len(quantized) >= len(weighted) // 2
    attention = report["attention"]
    sdpa = attention["in_subgraphs"]["ScaledDotProductAttention"] + attention["in_main_graph"]["ScaledDotProductAttention"]
    assert sdpa >= 4 and attention["in_subgraphs"]["FakeQuantize"] == 0 and attention["quantized"] == []
    pixels = ov_int8.pixel_matmuls(model)
    assert len(pixels) == 1 and pixels[0] not in quantized
    assert {"node": pixels[0], "reason": ov_int8.WHY_PIXELS} in report["float_weight_nodes"]
    heads = ov_int8.head_matmuls(model)  # each merger's fc1 and fc2: 2 per output
    assert len(heads) == 2 * len(model.outputs) and not set(heads) & set(quantized)
    assert all({"node": n, "reason": ov_int8.WHY_HEAD} in report["float_weight_nodes"] for n in heads)
    fake_quantize = [op for op in model.get_ordered_ops() if op.get_type_name() == "FakeQuantize"]
    assert fake_quantize and len(fake_quantize) == len(quantized)
    readers, todo = set(), [op.output(0) for op in fake_quantize]
    while todo:  # what each quantized activation reaches through data movement: only MatMuls
        for target in todo.pop().get_target_inputs():
            node = target.get_node()
            if node.get_type_name() in ov_int8.MOVERS:
                todo.append(node.output(0))
            else:
                readers.add(node.get_type_name())
    assert readers == {"MatMul"}, readers
    for record in report["float_weight_nodes"]:
        assert record["reason"] and record["node"] not in quantized
    nodes = {op.get_friendly_name(): op for op in model.get_ordered_ops()}
    assert all(ov_int8._int8_weight(nodes[name].input_value(1)) for name in quantized)


def test_nncf_quantizes_the_if_model_as_one_graph_to_the_same_ir(tiny_optimized, tmp_path):
    """`ov_int8.if_bodies_as_ops`: NNCF's plain path on the main graph (each If one op) writes byte for byte the IR
    of its body-by-body If path, which runs the whole model once per If node over the calibration set: the bodies
    (the attention, left float) get no quantizer either way. Its precondition holds (no body has a weight MatMul),
    and a body with one sends NNCF its own way."""
    import hashlib

    import nncf.openvino.quantization.quantize_model as nncf_ov

    from quantize import calibration
    from vlm_vision_onnx.core import openvino_session

    ov = openvino_session._openvino()
    model_file = onnx_io.model_path(tiny_optimized)
    fp32 = ov_int8.read_fp32(model_file, tmp_path)
    assert any(op.get_type_name() == "If" for op in fp32.get_ordered_ops())
    assert not ov_int8.if_bodies_quantizable(fp32)
    feeds, _ = calibration.stage_set(model_file)
    quantizer = ov_int8.Quantizer(fp32, feeds()[:3], ov_int8.OvInt8Options())
    digests = {}
    for how in ("one graph", "body by body"):
        if how == "body by body":  # NNCF's own way: what if_bodies_as_ops does when a body has a quantizable MatMul
            counted, ov_int8.if_bodies_quantizable = ov_int8.if_bodies_quantizable, lambda model: True
        try:
            model = quantizer([])
        finally:
            if how == "body by body":
                ov_int8.if_bodies_quantizable = counted
        assert nncf_ov.get_number_if_op(model) > 0  # put back after the call
        ov.save_model(model, str(tmp_path / "q.xml"), compress_to_fp16=False)
        digests[how] = [hashlib.sha256((tmp_path / "q.bin").read_bytes()).hexdigest(),
                        _ir_graph((tmp_path / "q.xml").read_text())]
    assert digests["one graph"] == digests["body by body"]


def _ir_graph(xml: str) -> str:
    """An IR's XML without what differs between two equal graphs: the numbers of generated node names (a process-
    wide counter: `Constant_45268`) and NNCF's note on the If bodies it renamed (`friendly_names_were_updated`)."""
    import re

    xml = re.sub(r'((?:friendly_)?name="[A-Za-z]+)_\d+"', r'\1_N"', xml)
    return re.sub(r"\s*<nncf>\s*<friendly_names_were_updated value=\"True\" />\s*</nncf>", "", xml)


def test_outlier_stress_gate_met(stage):
    report = json.loads((stage / "report.json").read_text())
    stress = report["outlier_stress"]
    assert stress["mode"] == "exclude" and stress["met"]
    assert stress["validation"]["min_token_cosine"] >= stress["target_min_token_cosine"] == 0.99
    assert {c["case"] for c in stress["validation"]["cases"]} == set(stress["gate_cases"])
    assert len(stress["channels"]) == 4


def test_bad_option_is_one_line_and_writes_nothing(tiny_optimized, tmp_path, capsys):
    before = snapshot(tmp_path)
    code = quantize_cli.main(["ov-int8", str(tiny_optimized), str(tmp_path / "out"), "--smooth-alpha", "2"])
    assert code == 2 and "--smooth-alpha must be in (0, 1)" in single_error(capsys.readouterr().err)
    assert snapshot(tmp_path) == before


def test_packaged_verified_and_run_by_embed(dist, tmp_path, capsys):
    """The package ships the IR (manifest: its files with checksums, its accuracy and engine); `verify` runs it in
    OpenVINO at its floor; `embed --engine openvino --variant ov-int8` on photos and a video is within the floor
    of `embed` fp32 (ONNX Runtime); with ONNX Runtime it is one error line and nothing written."""
    manifest = json.loads((dist / "manifest.json").read_text())
    record = next(v for v in manifest["variants"] if v["name"] == "ov-int8")
    assert record["file"] == "openvino/vision_encoder_int8.xml"
    assert record["files"] == ["openvino/vision_encoder_int8.bin", "openvino/vision_encoder_int8.xml"]
    assert all(manifest["files"][f]["sha256"] for f in record["files"])
    assert record["accuracy_vs_fp32"]["min_token_cosine"] >= 0.998
    assert record["accuracy_vs_fp32"]["engine"].startswith("openvino")
    assert record["accuracy_vs_fp32"]["photos"]["photos"] == list(photo_check.HELD_OUT)  # what --engine auto reads
    assert "ov-int8" not in json.loads((dist / "config.json").read_text())["onnx_variants"]

    assert runtime_cli.main(["verify", str(dist), "--threads", "1"]) == 0
    out = capsys.readouterr()
    assert "openvino/vision_encoder_int8.xml: OpenVINO" in out.err and "all checks passed" in out.out

    written = sample_photos.write(tmp_path / "photos")
    images = [str(p) for p in written if p.parent.name != "pan"]
    args = [*images, "--video", str(tmp_path / "photos" / "pan"), "--package", str(dist)]
    assert runtime_cli.main(["embed", *args, "--out", str(tmp_path / "fp32.npz"), "--engine", "onnxruntime"]) == 0
    assert runtime_cli.main(["embed", *args, "--out", str(tmp_path / "ov.npz"), "--engine", "openvino",
                             "--variant", "ov-int8"]) == 0
    fp32, ov = np.load(tmp_path / "fp32.npz"), np.load(tmp_path / "ov.npz")
    outputs = [k for k in fp32.files if k.endswith(("image_features", "deepstack_embeds_0", "deepstack_embeds_1"))]
    assert len(outputs) == 3 * len(fp32["entries"]) and set(outputs) <= set(ov.files)
    for key in outputs:
        assert min_token_cosine(ov[key], fp32[key]) >= 0.998, key
    capsys.readouterr()
    code = runtime_cli.main(["embed", *args, "--out", str(tmp_path / "ort.npz"), "--engine", "onnxruntime",
                             "--variant", "ov-int8"])
    assert code == 2 and "is an OpenVINO IR" in single_error(capsys.readouterr().err)
    assert not (tmp_path / "ort.npz").exists()


def test_weighted_matmuls_found_past_a_graph_deeper_than_the_recursion_limit():
    """Phi-4-multimodal at published dims: the search back from each MatMul's weight once recursed as deep as the
    graph and stopped the stage (RecursionError). A chain of 3,000 Adds before two MatMuls: one weighted (its weight
    a dequantized constant), one of two activations."""
    import openvino as ov
    from openvino import opset13 as ops

    x = ops.parameter([1, 8], np.float32, name="x")
    chain = x
    for _ in range(3000):
        chain = ops.add(chain, ops.constant(np.ones((1, 8), np.float32)))
    weight = ops.multiply(ops.convert(ops.constant(np.ones((8, 8), np.int8)), np.float32),
                          ops.constant(np.float32(0.5)))
    weighted = ops.matmul(chain, weight, False, False)
    weighted.set_friendly_name("weighted")
    both = ops.matmul(weighted, chain, False, True)
    both.set_friendly_name("activations")
    model = ov.Model([both.output(0)], [x])
    assert ov_int8.matmuls(model) == (["weighted"], ["activations"])
    assert ov_int8.pixel_matmuls(model) == []
    # back from the output past the MatMul of two activations (not a head), the weighted one; then the chain
    assert ov_int8.head_matmuls(model) == ["weighted"]


def test_sensitivity_ranks_weighted_matmuls_only():
    """Phi-4-multimodal's unfused attention: a MatMul of two activations reading a tensor NNCF quantized for the
    weighted MatMul beside it. The stress search's ranking emulates weighted MatMuls only (it once tried to read a
    weight off the activation MatMul and stopped the stage)."""
    import openvino as ov
    from openvino import opset13 as ops

    rng = np.random.default_rng(0)
    weight = rng.standard_normal((8, 8)).astype(np.float32)

    def model(quantized: bool):
        x = ops.parameter([4, 8], np.float32, name="x")
        source = ops.fake_quantize(x, *(ops.constant(np.float32(v)) for v in (-4, 4, -4, 4)), 256) \
            if quantized else x
        w = ops.multiply(ops.convert(ops.constant(np.round(weight * 16).astype(np.int8)), np.float32),
                         ops.constant(np.float32(1 / 16))) if quantized else ops.constant(weight)
        weighted = ops.matmul(source, w, False, False)
        weighted.set_friendly_name("weighted")
        scores = ops.matmul(source, x, False, True)
        scores.set_friendly_name("scores")
        return ov.Model([weighted.output(0), scores.output(0)], [x])

    fp32, quantized = model(False), model(True)
    assert sorted(ov_int8.quantized_matmuls(quantized)) == ["scores", "weighted"]
    records = ov_int8.sensitivity(fp32, quantized, {"x": rng.standard_normal((4, 8)).astype(np.float32)}, 1)
    assert [r["node"] for r in records] == ["weighted"]
    assert 0.99 < records[0]["min_token_cosine"] < 1.0
