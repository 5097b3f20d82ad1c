"""The window-attention benchmark compares equal things: its Loop over windows (each window handed to the frames'
Loop as a frame of its own) equals the shipped windows batched (and both the torch op) on frames whose windows are
cut at the edges, and on packs."""

import numpy as np
import onnxruntime as ort
import pytest
import torch

from bench import window_attention as bench
from builders.qwen_vl import window_attention as win

PACKS = [[[1, 32, 32]], [[1, 10, 14]], [[1, 6, 10], [2, 10, 6], [1, 2, 18]], [[1, 2, 2]]]


@pytest.mark.parametrize("pack", PACKS, ids=str)
def test_loop_over_windows_equals_windows_batched(pack):
    width, heads = 32, 4
    sessions = {form: ort.InferenceSession(bench.build(form, width, heads).SerializeToString(),
                                           providers=["CPUExecutionProvider"]) for form in bench.FORMS}
    rng = np.random.default_rng(0)
    n = int(np.prod(pack, 1).sum())
    feed = {x: rng.standard_normal((1, n, width), dtype=np.float32) for x in ("query", "key", "value")}
    feed["grid_thw"] = np.asarray(pack, np.int64)
    outs = {form: s.run(None, bench.feed_of(form, feed))[0] for form, s in sessions.items()}
    expected = win.window_attention(*(torch.from_numpy(feed[x]) for x in ("query", "key", "value", "grid_thw")),
                                    heads, (width // heads) ** -0.5, bench.WINDOW).numpy()
    for form, out in outs.items():
        np.testing.assert_allclose(out, expected, rtol=0, atol=1e-5, err_msg=form)
