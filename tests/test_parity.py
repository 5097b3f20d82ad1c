"""core.parity's per-token cosine on non-finite rows, and core.session's owned outputs."""

import gc

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from vlm_vision_onnx.core import parity
from vlm_vision_onnx.core.session import Session, open_session, outputs


def test_a_nonfinite_row_is_the_worst_cosine_not_a_perfect_one():
    reference = np.ones((3, 4), np.float32)
    output = reference.copy()
    assert parity.min_token_cosine(output, reference) == 1.0
    output[1, 2] = np.nan
    assert parity.min_token_cosine(output, reference) == parity.NONFINITE_COSINE
    output[1, 2] = np.inf
    assert parity.min_token_cosine(output, reference) == parity.NONFINITE_COSINE
    assert parity.min_token_cosine(np.array([np.nan, 1.0]), np.array([1.0, 1.0])) == parity.NONFINITE_COSINE
    zero = np.zeros((2, 4), np.float32)
    assert parity.min_token_cosine(zero, zero) == 1.0  # a zero row matches a zero row


def _relu(folder):
    """A one-Relu model file (x, y: float32 [n, 4])."""
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    path = folder / "relu.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10), path)
    return path


def test_kept_outputs_do_not_hold_onnx_runtime_memory(tmp_path):
    """ORT returns views of its own buffers; `outputs` returns arrays that own their memory, so keeping them
    keeps nothing of the session alive."""
    path = _relu(tmp_path)
    x = np.arange(-8, 8, dtype=np.float32).reshape(4, 4)
    sess = open_session(path, 1)
    raw = sess.run(None, {"x": x})[0]
    kept = outputs(sess, {"x": x})[0]
    assert not raw.flags.owndata  # what ORT 1.31 does; if this changes, `owned` is a harmless copy
    assert kept.flags.owndata and kept.base is None
    del sess, raw
    gc.collect()
    np.testing.assert_array_equal(kept, np.maximum(x, 0))


def test_sessions_keep_no_more_memory_than_a_run_needs(tmp_path):
    """Every stage's and the runtime's session plans memory tensor by tensor (core.session.MEMORY_PATTERN: with
    dynamic shapes ORT's per-shape pattern held 5.9 instead of 4.0 GB at Phi-4's 13-crop layout) and gives its
    arena's unused memory back after each run."""
    path = _relu(tmp_path)
    sess = open_session(path, 1)
    assert sess.get_session_options().enable_mem_pattern is False
    assert isinstance(sess, Session)  # every run shrinks ORT's arena at its end (core.session.ARENA_SHRINKAGE)
    x = np.ones((2, 4), np.float32)
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], x)
    np.testing.assert_array_equal(sess.run(None, {"x": -x}, ort.RunOptions())[0], 0 * x)  # a run's own options
