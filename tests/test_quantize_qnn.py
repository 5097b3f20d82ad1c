"""quantize/qnn.py without the QNN EP: the calibrator's session runs in PRIORITY_BASED order inside
`reductions_run_early` (ORT's own method again after it), which changes the memory, never the QDQ model; `at_opset`
converts the graph alone and loads the weights after, outputs unchanged, and runs after ORT's QNN preprocessing,
whose Erf -> Gelu fusion does not run at opset 20 and up."""

import contextlib

import numpy as np
import onnx
import onnxruntime as ort
from onnxruntime.quantization import calibrate

from quantize import qnn
from vlm_vision_onnx.core.onnx_io import metadata


def test_the_early_reductions_leave_the_qdq_model_as_it_was(tiny_static, tmp_path, monkeypatch):
    src = tiny_static["qwen3-vl-tiny", "64x64"] / "model.onnx"
    feeds = qnn.photo_feeds(qnn.CALIBRATION[:2], metadata(src))
    original = calibrate.CalibraterBase.create_inference_session
    (tmp_path / "a").mkdir()
    qnn.quantize_qdq(src, tmp_path / "early.onnx", feeds, tmp_path / "a")
    assert calibrate.CalibraterBase.create_inference_session is original  # ORT's method is back
    monkeypatch.setattr(qnn, "reductions_run_early", contextlib.nullcontext)
    (tmp_path / "b").mkdir()
    qnn.quantize_qdq(src, tmp_path / "default.onnx", feeds, tmp_path / "b")
    early, default = onnx.load(str(tmp_path / "early.onnx")), onnx.load(str(tmp_path / "default.onnx"))
    assert {t.name: t.SerializeToString() for t in early.graph.initializer} == \
           {t.name: t.SerializeToString() for t in default.graph.initializer}
    assert [n.SerializeToString() for n in early.graph.node] == [n.SerializeToString() for n in default.graph.node]
    ops = {n.op_type for n in early.graph.node}
    assert "Gelu" in ops and "Erf" not in ops  # fused before the opset-21 conversion (the HTP refuses Erf)


def test_at_opset_converts_the_graph_and_keeps_the_weights(tiny_static, tmp_path):
    src = tiny_static["qwen3-vl-tiny", "64x64"] / "model.onnx"
    external = tmp_path / "model.onnx"  # the weights in an external file, as at published dims
    onnx.save(onnx.load(str(src)), str(external), save_as_external_data=True, location="model.onnx.data",
              size_threshold=0)
    converted = qnn.at_opset(external, qnn.QDQ_OPSET)
    assert max(o.version for o in converted.opset_import if o.domain in ("", "ai.onnx")) == qnn.QDQ_OPSET
    assert not any(t.external_data for t in converted.graph.initializer)  # loaded after the conversion
    pixels = np.random.default_rng(0).standard_normal(
        [d.dim_value for d in onnx.load(str(src)).graph.input[0].type.tensor_type.shape.dim]).astype(np.float32)
    want = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, {"pixel_values": pixels})
    got = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"pixel_values": pixels})
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)
