"""Qwen2.5-VL's window attention: windows batched, no Loop. One torch op, one ONNX lowering for both exporters.

The window blocks call the torch custom op `vlm_vision::window_attention(query, key, value, grid_thw, num_heads,
scale, window)`; both exporters lower it to `WINDOW_ATTENTION` below (registered as `segment_attention` registers
its own: a TorchScript symbolic and the torch.export translation table). The function derives the windows from
`grid_thw` inside the graph: window x window patches of each frame, cut back at its bottom and right edges, on
the window-ordered sequence (frame after frame, windows row-major: transformers' `get_vision_window_index`).

  * every window full (frames whose sides are multiples of the window): one batch [S, W*W, C], one unmasked
    `com.microsoft.MultiHeadAttention` (as `segment_attention` batches frames of one size);
  * otherwise two batches: the full windows gathered into [F, W*W, C], unmasked, and the windows cut at an edge
    gathered into [E, W*W, C] (rows past a window's size repeat its first row) with a key padding mask; each
    row gathered back to its place after.

Why not the Loop over windows (`segment_attention`'s Loop with a window a segment, the shipped form until
2026-11-28): OpenVINO's CPU plugin hands every input of a Loop body to every step, so a Loop over windows costs
O(windows x N): one window attention of a 1024x1024 frame (100 windows, 5,476 rows, Qwen2.5-VL-3B dims, 2 threads)
took 4.94 s in bf16 against 0.057 s batched, and Qwen2.5-VL-3B's whole tower 151 s against PyTorch bf16's 31 s;
batched, 23.6 s (bench/results/window-attention.md, cpu-race-families-avx512-bf16[-qwen2.5-windows].md). In ONNX
Runtime the batched form costs 1.19x the Loop on the window attention alone (the Loop's small calls stay in
cache), within 3% at the whole model (bench/results/runtimes-qwen2.5-vl-3b-windows.md). No tensor is N x N:
scores are [F or E, H, W*W, W*W].

Shapes: query, key, value float32 [1, N, H*D] (rotary already applied, rows in window order), grid_thw int64
[I, 3] (t, h, w per image; h, w in patches) -> [1, N, H*D]. A grid_thw that claims more rows than the pack holds
fails in a Gather (the windows index rows that are not there); one that claims fewer gives fewer rows out.
"""

import onnxscript
import torch
from onnxscript import FLOAT, INT32, INT64
from onnxscript import opset18 as op
from onnxscript.values import Opset

from builders.qwen_vl import segment_attention as segments

OP_NAME = f"{segments.DOMAIN}::window_attention"
_msft = Opset("com.microsoft", 1)


@onnxscript.script(Opset(segments.DOMAIN, 1), default_opset=op)
def WindowAttention(query: FLOAT, key: FLOAT, value: FLOAT, grid_thw: INT64, num_heads: int, scale: float,
                    window: int) -> FLOAT:
    """[1, N, C] x 3 in window order, grid_thw [I, 3] -> [1, N, C]: MultiHeadAttention inside each window."""
    t = op.Gather(grid_thw, 0, axis=1)  # [I] frames per image
    h = op.Gather(grid_thw, 1, axis=1)  # [I] patch rows per frame
    w = op.Gather(grid_thw, 2, axis=1)  # [I] patch columns per frame
    side = op.Constant(value_int=window)
    across_h = op.Div(op.Sub(op.Add(h, side), 1), side)  # [I] windows down a frame (ceil)
    across_w = op.Div(op.Sub(op.Add(w, side), 1), side)  # [I] windows across a frame
    per_frame = op.Mul(across_h, across_w)  # [I]
    per_image = op.Mul(t, per_frame)  # [I] windows of each image
    count = op.ReduceSum(per_image, keepdims=0)  # S, scalar
    segment = op.Range(0, count, 1)  # [S]
    # image of each window: how many images end at or before it (S x I compare, no N-sized tensor)
    image_ends = op.CumSum(per_image, 0)
    image = op.ReduceSum(op.Cast(op.GreaterOrEqual(op.Unsqueeze(segment, [1]), op.Unsqueeze(image_ends, [0])),
                                 to=INT64.dtype), [1], keepdims=0)  # [S]
    local = op.Sub(segment, op.Gather(op.Sub(image_ends, per_image), image))  # [S] index inside its image
    frame_windows = op.Gather(per_frame, image)
    in_frame = op.Sub(local, op.Mul(op.Div(local, frame_windows), frame_windows))  # [S] index inside its frame
    row = op.Div(in_frame, op.Gather(across_w, image))
    col = op.Sub(in_frame, op.Mul(row, op.Gather(across_w, image)))
    rows = op.Min(side, op.Sub(op.Gather(h, image), op.Mul(row, side)))  # [S] cut back at the bottom edge
    cols = op.Min(side, op.Sub(op.Gather(w, image), op.Mul(col, side)))  # [S] and at the right edge
    size = op.Mul(rows, cols)  # [S] rows of each window
    starts = op.Sub(op.CumSum(size, 0), size)  # [S] first row of each window
    area = op.Mul(side, side)  # W*W, the rows of a full window
    # Every window full and the windows filling the pack exactly (an int64 sum of differences compared with 0:
    # integer arithmetic, which a GPU runtime keeps on its CPU; see segment_attention).
    mismatch = op.Add(op.Abs(op.Sub(op.ReduceMin(size, keepdims=0), area)),
                      op.Abs(op.Sub(op.Mul(count, area), op.Squeeze(op.Shape(query, start=1, end=2)))))
    # The two batches' rows, for packs with cut windows (integer math on [S] and [S, W*W] tensors, out here: inside
    # the If's branch, OpenVINO's ONNX frontend gives NonZero's results no static rank, and its CPU plugin refuses
    # an If whose output has none).
    slots = op.Range(0, area, 1)  # [W*W] row offsets inside a window
    full = op.Equal(size, area)  # [S]
    full_starts = op.Gather(starts, op.Reshape(op.NonZero(full), [-1]))  # [F]
    cut = op.Reshape(op.NonZero(op.Not(full)), [-1])  # [E] the windows cut at an edge
    cut_starts = op.Unsqueeze(op.Gather(starts, cut), [1])  # [E, 1]
    valid = op.Less(op.Unsqueeze(slots, [0]), op.Unsqueeze(op.Gather(size, cut), [1]))  # [E, W*W]
    full_rows = op.Add(op.Unsqueeze(full_starts, [1]), op.Unsqueeze(slots, [0]))  # [F, W*W]
    cut_rows = op.Where(valid, op.Add(cut_starts, op.Unsqueeze(slots, [0])), cut_starts)  # [E, W*W]
    # back to window order: the slot (row of the two batches, flattened) that holds each row
    held = op.Concat(op.Reshape(full_rows, [-1]), op.Reshape(cut_rows, [-1]), axis=0)  # [(F+E)*W*W] row of a slot
    real = op.Concat(op.Expand(op.Constant(value=True), op.Shape(op.Reshape(full_rows, [-1]))),
                     op.Reshape(valid, [-1]), axis=0)  # [(F+E)*W*W] slots holding a row, not padding
    kept_slots = op.Reshape(op.NonZero(real), [-1])  # [N] (NonZero and Gather, not Compress: OpenVINO gives a
    kept_rows = op.Gather(held, kept_slots)  # [N] each row once      Compress without axis no static rank)
    slot_of_row = op.ScatterElements(kept_rows, kept_rows, kept_slots, axis=0)  # [N]
    key_mask = op.Cast(valid, to=INT32.dtype)  # [E, W*W]
    if op.Equal(mismatch, 0):
        batch = op.Concat(op.Reshape(count, [1]), op.Reshape(area, [1]), op.Shape(query, start=2, end=3),
                          axis=0)  # [S, W*W, C]
        batched = _msft.MultiHeadAttention(op.Reshape(query, batch), op.Reshape(key, batch),
                                           op.Reshape(value, batch), num_heads=num_heads, scale=scale)
        attended = op.Reshape(batched, op.Shape(query))  # [1, N, C]
    else:
        # [N, C] each (a Reshape to a shape of known length: OpenVINO's CPU plugin refuses an If whose output has no
        # static rank, which a Squeeze inside the branch gives it)
        flat_shape = op.Concat(op.Constant(value_ints=[-1]), op.Shape(query, start=2, end=3), axis=0)
        q, k, v = op.Reshape(query, flat_shape), op.Reshape(key, flat_shape), op.Reshape(value, flat_shape)
        full_out = _msft.MultiHeadAttention(op.Gather(q, full_rows), op.Gather(k, full_rows), op.Gather(v, full_rows),
                                            num_heads=num_heads, scale=scale)  # [F, W*W, C]
        cut_out = _msft.MultiHeadAttention(op.Gather(q, cut_rows), op.Gather(k, cut_rows), op.Gather(v, cut_rows),
                                           None, key_mask, num_heads=num_heads, scale=scale)  # [E, W*W, C]
        # [1, (F+E)*W*W, C], gathered on axis 1: an Unsqueeze after the Gather would copy the N rows once more in ORT
        batch_shape = op.Concat(op.Constant(value_ints=[1, -1]), op.Shape(query, start=2, end=3), axis=0)
        results = op.Concat(op.Reshape(full_out, batch_shape), op.Reshape(cut_out, batch_shape), axis=1)
        attended = op.Gather(results, slot_of_row, axis=1)  # [1, N, C]
    return attended


# onnxscript lists only the top-level graph's domains in the function's imports; the branches use com.microsoft.
WindowAttention.function_ir.opset_imports["com.microsoft"] = 1
WINDOW_ATTENTION = WindowAttention


@torch.library.custom_op(OP_NAME, mutates_args=())
def window_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, grid_thw: torch.Tensor,
                     num_heads: int, scale: float, window: int) -> torch.Tensor:
    """Eager: softmax(q k^T * scale) v inside each window, as the model's eager attention. Shapes as above."""
    return segments.attend_segments(query, key, value, segments.segment_sizes(grid_thw.tolist(), window), num_heads,
                                    scale)


@window_attention.register_fake
def _(query, key, value, grid_thw, num_heads, scale, window):
    return torch.empty_like(query)


# torch.export path: what `torch.onnx.export(..., custom_translation_table=...)` needs (and the TorchScript symbolic).
TRANSLATION_TABLE = segments.register_lowering(OP_NAME, WINDOW_ATTENTION,
                                               {"num_heads": "i", "scale": "f", "window": "i"})
