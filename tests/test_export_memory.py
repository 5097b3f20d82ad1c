"""The TorchScript export never serialises the weights: the exporter writes the graph alone to a file
(no BytesIO, no 2 GiB protobuf limit) and the weights it settled on are added from memory afterwards,
giving the same model as the exporter's own weights-included output."""

import contextlib
import io
import warnings
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch

from builders import onnx_export
from builders.config import load_config
from builders.qwen_vl.family import BUILDERS
from builders.qwen_vl.model import build_random

family = BUILDERS["qwen3-vl"]
GRID = np.array([[1, 16, 16], [1, 12, 20]])


@pytest.fixture(scope="module")
def tiny():
    model = build_random(load_config("qwen3-vl-tiny"), seed=0)
    spec = family.io_spec(model)
    inputs = family.example_inputs(model, GRID, 0)
    return model, spec, tuple(inputs[n] for n in spec.input_names), {k: v.numpy() for k, v in inputs.items()}


def weight_bytes(model: torch.nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def test_the_exporter_writes_the_graph_alone_to_a_file(tiny, monkeypatch):
    model, spec, args, _ = tiny
    real, calls = torch.onnx.export, []

    def recording(module, args, f, **kwargs):
        result = real(module, args, f, **kwargs)
        calls.append({"f": f, "export_params": kwargs.get("export_params"), "bytes": Path(f).stat().st_size})
        return result

    monkeypatch.setattr(torch.onnx, "export", recording)
    proto = onnx_export.export_torchscript(family.export_module(model), args, spec, 18)
    assert len(calls) == 1 and isinstance(calls[0]["f"], str) and calls[0]["export_params"] is False
    assert calls[0]["bytes"] < weight_bytes(model) / 4  # the file the exporter wrote holds no weights
    assert sum(len(t.raw_data) for t in proto.graph.initializer) >= weight_bytes(model) * 0.9


def test_same_model_as_the_exporter_with_its_weights(tiny):
    model, spec, args, feeds = tiny
    ours = onnx_export.export_torchscript(family.export_module(model), args, spec, 18)
    buffer = io.BytesIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(family.export_module(model), args, buffer, dynamo=False, input_names=spec.input_names,
                          output_names=spec.output_names, dynamic_axes=spec.dynamic_axes, opset_version=18,
                          do_constant_folding=True)
    theirs = onnx_export.inline_functions(onnx.load_from_string(buffer.getvalue()))
    assert [n.op_type for n in ours.graph.node] == [n.op_type for n in theirs.graph.node]
    assert [v.name for v in ours.graph.input] == [v.name for v in theirs.graph.input] == spec.input_names
    mine = {t.name: onnx.numpy_helper.to_array(t) for t in ours.graph.initializer}
    reference = {t.name: onnx.numpy_helper.to_array(t) for t in theirs.graph.initializer}
    assert mine.keys() == reference.keys()
    for name, value in reference.items():
        np.testing.assert_array_equal(mine[name], value, err_msg=name)
    got = ort.InferenceSession(ours.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    expected = ort.InferenceSession(theirs.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(a, b)


def test_no_initializers_reported_is_an_error():
    graph = onnx.helper.make_graph([], "g", [], [])
    with pytest.raises(ValueError, match="no initializers"):
        onnx_export.add_initializers(onnx.helper.make_model(graph), {})


def test_bfloat16_weights_keep_their_bits():
    tensor = torch.randn(3, 5).to(torch.bfloat16)
    proto = onnx_export._tensor_proto("w", tensor)
    assert proto.data_type == onnx.TensorProto.BFLOAT16 and list(proto.dims) == [3, 5]
    assert proto.raw_data == tensor.view(torch.uint16).numpy().tobytes()
