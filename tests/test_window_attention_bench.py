"""The window-attention benchmark compares equal things: its padded-windows form equals the shipped loop over
windows (and both the torch op) on frames whose windows are cut at the edges, and on packs."""

import numpy as np
import onnxruntime as ort
import pytest
import torch

from bench import window_attention as bench
from builders.qwen_vl import segment_attention as seg

PACKS = [[[1, 32, 32]], [[1, 10, 14]], [[1, 6, 10], [2, 10, 6], [1, 2, 18]], [[1, 2, 2]]]


@pytest.mark.parametrize("pack", PACKS, ids=str)
def test_padded_windows_equal_the_loop(pack):
    width, heads = 32, 4
    sessions = [ort.InferenceSession(bench.build(form, width, heads).SerializeToString(),
                                     providers=["CPUExecutionProvider"]) for form in bench.FORMS]
    rng = np.random.default_rng(0)
    n = int(np.prod(pack, 1).sum())
    feed = {x: rng.standard_normal((1, n, width), dtype=np.float32) for x in ("query", "key", "value")}
    feed["grid_thw"] = np.asarray(pack, np.int64)
    loop, padded = (s.run(None, feed)[0] for s in sessions)
    expected = seg.segment_attention(*(torch.from_numpy(feed[x]) for x in ("query", "key", "value", "grid_thw")),
                                     heads, (width // heads) ** -0.5, bench.WINDOW, 0).numpy()
    np.testing.assert_allclose(loop, expected, rtol=0, atol=1e-5)
    np.testing.assert_allclose(padded, expected, rtol=0, atol=1e-5)
