"""core.stage_outputs: a stage's outputs at its validation layouts are reused by the next stage only for the same
model bytes and the same inputs; the optimize stage keeps them and the weight stages use them."""

import json
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from quantize import __main__ as cli
from quantize import stage
from vlm_vision_onnx.core import parity, stage_outputs
from vlm_vision_onnx.core.session import open_session


def _model(folder, scale: float):
    weight = numpy_helper.from_array(np.full((4, 3), scale, np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], [weight])
    path = folder / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), path)
    return path


def _feeds(seed: int):
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((n, 4), dtype=np.float32)} for n in (2, 5)]


def test_kept_outputs_come_back_only_for_the_same_model_and_inputs(tmp_path):
    model = _model(tmp_path, 0.5)
    feeds = _feeds(0)
    outputs = parity.run_all(open_session(model, 1), feeds)
    stage_outputs.write(tmp_path, model, feeds, outputs)
    got = stage_outputs.read(model, feeds)
    assert got is not None and all(np.array_equal(a, b) for x, y in zip(got, outputs) for a, b in zip(x, y))
    assert stage_outputs.read(model, _feeds(1)) is None  # other inputs
    assert stage_outputs.read(model, feeds[:1]) is None  # fewer layouts
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(tmp_path / stage_outputs.FILE, other / stage_outputs.FILE)
    assert stage_outputs.read(_model(other, 0.25), feeds) is None  # other weights
    (tmp_path / stage_outputs.FILE).write_bytes(b"not an npz")
    assert stage_outputs.read(model, feeds) is None  # unreadable: run the model instead


def test_the_weight_stages_take_the_optimize_stage_outputs(tiny_optimized, tmp_path):
    """The optimize stage keeps its saved model's outputs; the reference a weight stage reads from them equals a
    fresh run of that model; the int8 report says where its reference came from."""
    assert (tiny_optimized / stage_outputs.FILE).is_file()
    source = stage.read_input(tiny_optimized, threads=1)
    assert source.reference_from.endswith("fingerprints match)")
    fresh = parity.run_all(open_session(tiny_optimized / "model.onnx", 1), source.inputs)
    for kept, run in zip(source.reference, fresh):
        for a, b in zip(kept, run):
            np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    out = tmp_path / "int8"
    assert cli.main(["int8", str(tiny_optimized), str(out), "--threads", "1", "--outliers", "off"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["reference_outputs"].startswith(str(tiny_optimized / stage_outputs.FILE))
    assert not (out / stage_outputs.FILE).exists()  # a quantized model is nobody's reference
