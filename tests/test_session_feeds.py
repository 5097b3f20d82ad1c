"""core.session.check_feeds: inputs that contradict a model's declared static dims are one line (found by
tools/fuzz: a model file whose pixel_values declared 2^31 columns ended `release package`'s smoke run in ONNX
Runtime's InvalidArgument traceback)."""

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from vlm_vision_onnx.core import session
from vlm_vision_onnx.core.errors import UsageError


def test_a_feed_off_a_declared_static_dim_is_refused(tmp_path):
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 2**31])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 2**31])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, str(tmp_path / "model.onnx"))
    sess = session.open_session(tmp_path / "model.onnx", 1)
    with pytest.raises(UsageError, match=r"declares input 'x' as \['n', 2147483648\], but it is fed \[3, 1536\]"):
        session.run(sess, {"x": np.zeros((3, 1536), np.float32)})
    with pytest.raises(UsageError, match="but it is fed \\[3\\]"):
        session.run(sess, {"x": np.zeros(3, np.float32)})
