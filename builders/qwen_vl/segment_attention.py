"""Attention per frame: one torch op, one ONNX lowering shared by both exporters.

Decision: the frame structure enters at export. The patched attention calls the torch custom op
`vlm_vision::segment_attention(query, key, value, grid_thw, num_heads, scale, chunk)`; both exporters
lower that op to the same ONNX function, `SEGMENT_ATTENTION` below (TorchScript through a registered symbolic
that emits it as a model-local function, torch.export through `custom_translation_table`; the
export inlines it, so both paths ship the same nodes). The function derives the frame boundaries
from `grid_thw` inside the graph. (Qwen2.5-VL's window blocks run `window_attention` instead: windows batched,
no Loop; this module's Loop over windows, its form until 2026-11-28, cost O(windows x N) in OpenVINO.)
When every frame has one size (one image, the frames of a video) of at most `chunk`
rows, an `If` runs them as one batch: one `com.microsoft.MultiHeadAttention` on [S, L, C], no Loop — ONNX
Runtime's flash path on all segments at once, and in OpenVINO one attention its CPU plugin fuses into an MHA
`Subgraph` (seen on an AVX2 CPU, `python -m bench.cpu_race` profiles it) instead of a Loop, which it ran at an
fp32-class rate on an AMX CPU. Otherwise the If's other branch runs a `Loop` over query chunks: each step one
`com.microsoft.MultiHeadAttention` without mask or bias of
up to Q = min(longest segment, `chunk`) query rows of one segment against all of that segment's keys, its
output padded to [1, Q, C]; the steps' outputs stack as the Loop's scan output [steps, 1, Q, C] and the padding
rows are dropped after (Compress). Why:
  * no tensor of size N x N exists anywhere, in the exported graph or the optimized one (the former
    packed form built a [1, 1, N, N] block-diagonal bias and [1, H, N, N] scores: 4,096 patches
    peaked at 3.1 GB, 16,384 did not fit in 20 GB);
  * ONNX Runtime's CPU MultiHeadAttention takes its flash-attention path (memory linear in the
    sequence) only without mask and bias: a segment is exactly an unmasked attention;
  * no cross-frame scores are computed, so a pack costs what its frames cost alone;
  * every Loop step's output has one size. The former form collected steps of each segment's own size in a
    sequence (SequenceInsert, ConcatFromSequence): right in ONNX Runtime, but OpenVINO's CPU Loop sizes such an
    output as trip count x the last step's size and crashes or corrupts its heap on any pack whose frames
    differ (`bench/openvino_loop_bug.py`). Padding costs at most Q - 1 rows per segment (none for one image
    or the frames of a video); `bench/segment_loop.py` measures both forms;
  * ONNX has no standard fused attention below opset 23 (the TorchScript path stops at opset 20). With
    `--ops standard` the export lowers each MultiHeadAttention to MatMul + Softmax
    (quantize/passes/standard_attention.py), whose scores are a tensor of heads x Q x segment rows: that
    form chunks at CHUNK_ROWS["standard"] rows, so a large frame never builds its frame x frame scores.
    The default keeps the ORT contrib op (the pipeline targets ONNX Runtime, and its fused op is faster).
bench/attention_ops.py (retired at commit c9ada23; bench/results/attention-ops.md) measured the alternatives (ONNX
`Attention` of opset 23, the old bias form).
A segment is a frame here; `segment_sizes` also lists windows (for `window_attention` and the benchmarks, which
run a Loop over windows by handing this function one [1, 1, size] "frame" per window).

Shapes: query, key, value float32 [1, N, H*D] (rotary already applied), grid_thw int64 [I, 3]
(t, h, w per image, patches laid out image after image, frame after frame) -> [1, N, H*D].
"""

import onnxscript
import torch
from onnxscript import BOOL, FLOAT, INT64
from onnxscript import opset18 as op
from onnxscript.values import Opset

DOMAIN = "vlm_vision"
OP_NAME = f"{DOMAIN}::segment_attention"
_msft = Opset("com.microsoft", 1)
#: Query rows of one Loop step at most, per `--ops` of the export (bench/segment_loop.py measures the choice):
#: ONNX Runtime's MultiHeadAttention keeps its memory linear itself, and fewer, longer steps are as fast or faster,
#: so the contrib form chunks only frames past 2048x2048; the standard form's scores are a tensor of
#: heads x chunk x segment rows, so it chunks at 1024 rows (a 2048x2048 Qwen3-VL frame: 1 GiB of scores, not 16).
CHUNK_ROWS = {"contrib": 16384, "standard": 1024}


@onnxscript.script(Opset(DOMAIN, 1), default_opset=op)
def SegmentAttention(query: FLOAT, key: FLOAT, value: FLOAT, grid_thw: INT64, num_heads: int, scale: float,
                     chunk: int) -> FLOAT:
    """[1, N, C] x 3, grid_thw [I, 3] -> [1, N, C]: MultiHeadAttention on each frame's rows.

    A segment is a frame. Its query rows go in chunks of Q = min(longest segment, chunk) rows against all of
    its keys; each Loop step's output is padded to [1, Q, C] (a fixed size: see the module docstring) and the
    padding dropped after.
    """
    t = op.Gather(grid_thw, 0, axis=1)  # [I] frames per image
    h = op.Gather(grid_thw, 1, axis=1)  # [I] patch rows per frame
    w = op.Gather(grid_thw, 2, axis=1)  # [I] patch columns per frame
    segments = op.ReduceSum(t, keepdims=0)  # S, scalar: a segment per frame
    segment = op.Range(0, segments, 1)  # [S]
    # image of each segment: how many images end at or before it (S x I compare, no N-sized tensor)
    image_ends = op.CumSum(t, 0)
    image = op.ReduceSum(op.Cast(op.GreaterOrEqual(op.Unsqueeze(segment, [1]), op.Unsqueeze(image_ends, [0])),
                                 to=INT64.dtype), [1], keepdims=0)  # [S]
    rows, cols = op.Gather(h, image), op.Gather(w, image)  # [S]
    size = op.Mul(rows, cols)  # [S]
    ends = op.CumSum(size, 0)  # [S] exclusive end row of each segment
    starts = op.Sub(ends, size)
    longest = op.ReduceMax(size, keepdims=0)  # scalar
    # Q, the Loop's query rows per step (computed out here: ORT's symbolic shape inference, which its transformer
    # optimizer runs, fails on a value_int Constant inside a subgraph)
    q = op.Min(longest, op.Constant(value_int=chunk))
    # One size for every segment (one image, the frames of a video), within a step's rows and
    # filling the pack exactly: all segments as one batch of one attention, no Loop. Else the Loop below.
    # The three equalities as one int64 sum of differences compared with 0: integer arithmetic, which a GPU
    # runtime keeps on its CPU with the rest of the grid math. (As a bool And, ONNX Runtime's WebGPU EP took the
    # And: an upload and a read-back that waits for the GPU, in every block: bench.gpu_webgpu's profile.)
    mismatch = op.Add(op.Add(op.Abs(op.Sub(op.ReduceMin(size, keepdims=0), longest)), op.Abs(op.Sub(q, longest))),
                      op.Abs(op.Sub(op.Mul(segments, longest), op.Squeeze(op.Shape(query, start=1, end=2)))))
    uniform = op.Equal(mismatch, 0)
    if uniform:
        batch = op.Concat(op.Reshape(segments, [1]), op.Reshape(longest, [1]), op.Shape(query, start=2, end=3),
                          axis=0)  # [S, L, C]
        batched = _msft.MultiHeadAttention(op.Reshape(query, batch), op.Reshape(key, batch),
                                           op.Reshape(value, batch), num_heads=num_heads, scale=scale)
        attended = op.Reshape(batched, op.Shape(query))  # [1, N, C]
    else:
        # query chunks: Q rows each (the last of a segment shorter), C in all
        per_segment = op.Div(op.Sub(op.Add(size, q), 1), q)  # [S] chunks of each segment (ceil)
        chunk_ends = op.CumSum(per_segment, 0)
        chunks = op.ReduceSum(per_segment, keepdims=0)  # C, scalar
        piece = op.Range(0, chunks, 1)  # [C]
        owner = op.ReduceSum(op.Cast(op.GreaterOrEqual(op.Unsqueeze(piece, [1]), op.Unsqueeze(chunk_ends, [0])),
                                     to=INT64.dtype), [1], keepdims=0)  # [C] segment of each chunk (C x S compare)
        kv_starts, kv_ends = op.Gather(starts, owner), op.Gather(ends, owner)  # [C] its segment's rows
        q_starts = op.Add(kv_starts, op.Mul(op.Sub(piece, op.Gather(op.Sub(chunk_ends, per_segment), owner)), q))
        q_ends = op.Min(op.Add(q_starts, q), kv_ends)  # [C]
        q_rows = op.Unsqueeze(q, [0])  # [1]
        # The body's constants, made here by ops: a Constant node (or a Python literal) inside a Loop that sits in
        # an If's branch is dropped by ONNX Runtime's transformer optimizer (it keeps only what is read one level
        # down), which leaves the optimized model invalid.
        one = op.Shape(q_rows)  # [1] = 1
        zero = op.Sub(one, one)  # [0] = 0
        pad_head = op.Concat(zero, zero, zero, zero, axis=0)  # [4] zeros

        @onnxscript.graph()
        def chunk_step(i: INT64, cond: BOOL):
            at = op.Unsqueeze(i, zero)
            after = op.Add(at, one)
            start, end = op.Slice(q_starts, at, after), op.Slice(q_ends, at, after)  # [1] each
            kv_start, kv_end = op.Slice(kv_starts, at, after), op.Slice(kv_ends, at, after)
            piece_out = _msft.MultiHeadAttention(op.Slice(query, start, end, one),
                                                 op.Slice(key, kv_start, kv_end, one),
                                                 op.Slice(value, kv_start, kv_end, one), num_heads=num_heads,
                                                 scale=scale)  # [1, rows, C]
            # the rows attended, counted from the tensor: a grid_thw that claims more rows than the pack holds gets
            # shorter slices, and the step's output still has Q rows (what the ops after make of such input is theirs)
            rows = op.Shape(piece_out, start=1, end=2)  # [1]
            padded = op.Pad(piece_out, op.Concat(pad_head, op.Sub(q_rows, rows), zero, axis=0))  # [1, Q, C]
            return op.Identity(cond), padded, rows

        # An explicit (always true) condition: ORT's symbolic shape inference needs the Loop's second input.
        stacked, attended_rows = op.Loop(chunks, op.Constant(value=True), body=chunk_step)  # [C, 1, Q, C], [C, 1]
        flat = op.Reshape(stacked, op.Concat([1, -1], op.Shape(query, start=2, end=3), axis=0))  # [1, C * Q, C]
        real = op.Less(op.Unsqueeze(op.Range(0, q, 1), [0]), attended_rows)  # [C, Q]: the rows that are not padding
        # Compress straight on [1, C * Q, C]: an Unsqueeze after it would copy its N rows once more in ONNX Runtime.
        # (Reading each short chunk on into the rows after it instead of padding, a copy less, costs more where frames
        # differ: those rows attend too.)
        attended = op.Compress(flat, op.Reshape(real, [-1]), axis=1)  # [1, N, C]
    return attended


# onnxscript lists only the top-level graph's domains in the function's imports; the Loop body uses
# com.microsoft too, and ONNX Runtime rejects a function that does not import it.
SegmentAttention.function_ir.opset_imports["com.microsoft"] = 1
SEGMENT_ATTENTION = SegmentAttention


@torch.library.custom_op(OP_NAME, mutates_args=())
def segment_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, grid_thw: torch.Tensor,
                      num_heads: int, scale: float, chunk: int) -> torch.Tensor:
    """Eager: softmax(q k^T * scale) v inside each frame, as the model's eager attention (`chunk` shapes only
    the ONNX form's steps). Shapes as above."""
    return attend_segments(query, key, value, segment_sizes(grid_thw.tolist(), 0), num_heads, scale)


def attend_segments(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, sizes: list[int], num_heads: int,
                    scale: float) -> torch.Tensor:
    """[1, N, H*D] x 3 -> [1, N, H*D]: softmax(q k^T * scale) v inside each run of `sizes` rows (eager)."""
    width = query.shape[-1]
    out = []
    for q, k, v in zip(*(x[0].split(sizes) for x in (query, key, value))):
        q, k, v = (x.reshape(x.shape[0], num_heads, -1).transpose(0, 1) for x in (q, k, v))  # [H, S, D]
        probs = torch.softmax(torch.matmul(q, k.transpose(1, 2)) * scale, dim=-1, dtype=torch.float32)
        out.append(torch.matmul(probs.to(v.dtype), v).transpose(0, 1).reshape(-1, width))
    return torch.cat(out)[None]


def segment_sizes(grid_thw: list[list[int]], window: int) -> list[int]:
    """Rows of each segment in order: each frame's h*w (window 0), else its windows' rows x columns (window
    order: frame after frame, windows row-major, cut back at the bottom and right edges)."""
    sizes = []
    for t, h, w in grid_thw:
        side_h, side_w = (window, window) if window else (h, w)
        frame = [min(side_h, h - r) * min(side_w, w - c) for r in range(0, h, side_h) for c in range(0, w, side_w)]
        sizes += frame * t
    return sizes


@segment_attention.register_fake
def _(query, key, value, grid_thw, num_heads, scale, chunk):
    return torch.empty_like(query)


class AtOpset:
    """An ONNX function of this package as TorchScript's `onnxscript_op` takes it, its body at the export's
    opset (a model-local function is inlined only when its imports match the model's; the ops it uses mean the
    same from opset 17 to 23)."""

    def __init__(self, function, opset: int):
        self.function = function
        self.opset, self.name, self.version = function.opset, function.name, opset

    def to_function_proto(self):
        proto = self.function.to_function_proto()
        for entry in proto.opset_import:
            if entry.domain == "":
                entry.version = self.version
        return proto


def register_lowering(op_name: str, function, attributes: dict[str, str]) -> dict:
    """Lower the torch custom op `op_name` (query, key, value, grid_thw, then the constants `attributes` names in
    order, each with its ONNX attribute kind, "i" or "f") to the ONNX `function` in both exporters: registers the
    TorchScript symbolic and returns torch.export's translation table entry."""

    def symbolic(g, query, key, value, grid_thw, *constants):
        from torch.onnx import symbolic_helper

        attrs = {f"{name}_{kind}": symbolic_helper._get_const(constant, kind, name)
                 for (name, kind), constant in zip(attributes.items(), constants, strict=True)}
        return g.onnxscript_op(AtOpset(function, g.opset), query, key, value, grid_thw, **attrs).setType(query.type())

    torch.onnx.register_custom_op_symbolic(op_name, symbolic, 1)
    namespace, name = op_name.split("::")
    return {getattr(getattr(torch.ops, namespace), name).default: function}


# torch.export path: what `torch.onnx.export(..., custom_translation_table=...)` needs.
TRANSLATION_TABLE = register_lowering(OP_NAME, SEGMENT_ATTENTION, {"num_heads": "i", "scale": "f", "chunk": "i"})
