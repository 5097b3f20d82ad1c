"""bench.ov_weight_int8: the int8-weight IR it races (OpenVINO's decompression pattern, run-time activation
quantization) is the fp32 model with int8 weights, the patch embedding float."""

import numpy as np
import pytest

pytest.importorskip("openvino", reason="the openvino extra is not installed (make install installs it)")

from bench import ov_weight_int8
from core import onnx_io
from core.openvino_session import OpenVINOSession
from core.parity import min_token_cosine
from core.session import open_session
from families import of_model
from families import validation as layouts_mod


def test_compressed_weights_are_int8_and_the_outputs_stay_near_fp32(tiny_optimized, tmp_path, monkeypatch):
    import openvino as ov

    from quantize.ov_int8 import pixel_matmuls

    monkeypatch.setattr(ov_weight_int8, "MIN_ELEMENTS", 1024)  # the tiny model's weights are small
    model_file = onnx_io.model_path(tiny_optimized)
    count = ov_weight_int8.compress(model_file, tmp_path / "model.xml")
    model = ov.Core().read_model(str(tmp_path / "model.xml"))
    matmuls = [op for op in model.get_ordered_ops() if op.get_type_name() == "MatMul"
               and op.input_value(1).get_node().get_type_name() == "Multiply"]
    assert count == len(matmuls) > 20
    for op in matmuls:
        convert = op.input_value(1).get_node().input_value(0).get_node()
        assert convert.input_value(0).get_node().get_element_type().get_type_name() == "i8"
    assert set(pixel_matmuls(model)).isdisjoint(op.get_friendly_name() for op in matmuls)

    metadata = onnx_io.metadata(model_file)
    family = of_model(metadata, model_file)
    layouts = layouts_mod.layouts_for(model_file, metadata, family)[:3]
    feeds = layouts_mod.layout_inputs(family, layouts, metadata)
    fp32 = open_session(model_file, 1)
    compressed = OpenVINOSession(tmp_path / "model.xml", 1, "f32")
    for feed in feeds:
        cosines = [min_token_cosine(q, r) for q, r in zip(compressed.run(None, feed), fp32.run(None, feed))]
        assert 0.99 < min(cosines) < 1.0, cosines
        assert all(np.isfinite(q).all() for q in compressed.run(None, feed))
