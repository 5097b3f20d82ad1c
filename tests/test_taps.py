"""core.taps: intermediate tensors whole, and their per-channel peaks reduced in the graph (what the outlier
channel search keeps: the whole tensors of every MatMul all live at once in ORT's outputs)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantize.outlier_channels import channel_peaks
from vlm_vision_onnx.core import taps


@pytest.mark.parametrize("opset", [17, 18])
def test_channel_peaks_in_the_graph_equal_numpy(tmp_path, opset):
    """x [B, S, 4] @ W -> h [B, S, 6] @ V -> y (a graph output) [B, S, 3], and a rank-2 Reshape of h."""
    rng = np.random.default_rng(0)
    w, v = rng.standard_normal((4, 6)).astype(np.float32), rng.standard_normal((6, 3)).astype(np.float32)
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("MatMul", ["h", "V"], ["y"]),
             helper.make_node("Reshape", ["h", "flat_shape"], ["flat"]), helper.make_node("Relu", ["flat"], ["z"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 4])],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z")],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(v, "V"),
         numpy_helper.from_array(np.array([-1, 6], np.int64), "flat_shape")])
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8), str(path))
    feeds = [{"x": rng.standard_normal((2, 5, 4), dtype=np.float32) * s} for s in (1.0, 30.0)]
    names = ["x", "h", "y", "flat"]
    whole = taps.tap(path, names, feeds, 1)
    peaks = taps.tap(path, names, feeds, 1, channel_peaks=True)
    assert set(peaks) == set(names) and sorted(p.name for p in tmp_path.iterdir()) == ["model.onnx"]
    for name in names:
        assert [p.shape for p in peaks[name]] == [(whole[name][0].shape[-1],)] * 2
        for got, value in zip(peaks[name], whole[name], strict=True):
            np.testing.assert_array_equal(got, channel_peaks(value))
