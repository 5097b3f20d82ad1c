"""Attention per frame segment: one torch op, one ONNX lowering shared by both exporters.

Decision: the segment structure enters at export. The patched attention calls the torch custom op
`vlm_vision::segment_attention(query, key, value, grid_thw, num_heads, scale)`; both exporters lower
that op to the same ONNX function, `SEGMENT_ATTENTION` below (TorchScript through a registered symbolic
that emits it as a model-local function, torch.export through `custom_translation_table`; the
export inlines it, so both paths ship the same nodes). The function derives the frame boundaries
from `grid_thw` inside the graph and runs a `Loop` over the frames, each step one
`com.microsoft.MultiHeadAttention` without mask or bias on that frame's rows, collected in a
sequence and concatenated. Why:
  * no tensor of size N x N exists anywhere, in the exported graph or the optimized one (the former
    packed form built a [1, 1, N, N] block-diagonal bias and [1, H, N, N] scores: 4,096 patches
    peaked at 3.1 GB, 16,384 did not fit in 20 GB);
  * ONNX Runtime's CPU MultiHeadAttention takes its flash-attention path (memory linear in the
    sequence) only without mask and bias: a segment is exactly an unmasked attention;
  * no cross-frame scores are computed, so a pack costs what its frames cost alone;
  * ONNX has no standard fused attention below opset 23 (the TorchScript path stops at opset 20),
    and unfused standard ops inside the Loop would still build frame x frame scores, i.e. N x N
    for one large image: the export stage itself must run the sizes the model accepts. The price is
    an ORT contrib op in the exported graph (the pipeline targets ONNX Runtime throughout).
`bench/attention_ops.py` measures the alternatives (ONNX `Attention` of opset 23, the old bias form).

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


@onnxscript.script(Opset(DOMAIN, 1), default_opset=op)
def SegmentAttention(query: FLOAT, key: FLOAT, value: FLOAT, grid_thw: INT64, num_heads: int,
                     scale: float) -> FLOAT:
    """[1, N, C] x 3, grid_thw [I, 3] -> [1, N, C]: MultiHeadAttention on each frame's rows."""
    t = op.Gather(grid_thw, 0, axis=1)  # [I] frames per image
    frame_size = op.Mul(op.Gather(grid_thw, 1, axis=1), op.Gather(grid_thw, 2, axis=1))  # [I] patches per frame
    frames = op.ReduceSum(t, keepdims=0)  # F, scalar
    frame = op.Range(0, frames, 1)  # [F]
    # image of each frame: how many images end at or before it (F x I compare, no N-sized tensor)
    ends_of_images = op.CumSum(t, 0)
    image = op.ReduceSum(op.Cast(op.GreaterOrEqual(op.Unsqueeze(frame, [1]), op.Unsqueeze(ends_of_images, [0])),
                                 to=INT64.dtype), [1], keepdims=0)  # [F]
    size = op.Gather(frame_size, image)  # [F]
    ends = op.CumSum(size, 0)  # [F] exclusive end row of each frame
    starts = op.Sub(ends, size)
    @onnxscript.graph()
    def frame_step(i: INT64, cond: BOOL, done):
        at = op.Unsqueeze(i, [0])
        after = op.Add(at, [1])
        start, end = op.Slice(starts, at, after), op.Slice(ends, at, after)  # [1] each
        attended = _msft.MultiHeadAttention(op.Slice(query, start, end, [1]), op.Slice(key, start, end, [1]),
                                            op.Slice(value, start, end, [1]), num_heads=num_heads, scale=scale)
        return op.Identity(cond), op.SequenceInsert(done, attended)

    # An explicit (always true) condition: ORT's symbolic shape inference needs the Loop's second input.
    outputs = op.Loop(frames, op.Constant(value=True), op.SequenceEmpty(dtype=FLOAT.dtype), body=frame_step)
    return op.ConcatFromSequence(outputs, axis=1)


# onnxscript lists only the top-level graph's domains in the function's imports; the Loop body uses
# com.microsoft too, and ONNX Runtime rejects a function that does not import it.
SegmentAttention.function_ir.opset_imports["com.microsoft"] = 1
SEGMENT_ATTENTION = SegmentAttention


@torch.library.custom_op(OP_NAME, mutates_args=())
def segment_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, grid_thw: torch.Tensor,
                      num_heads: int, scale: float) -> torch.Tensor:
    """Eager: softmax(q k^T * scale) v inside each frame, as the model's eager attention. Shapes as above."""
    sizes = [int(h * w) for t, h, w in grid_thw.tolist() for _ in range(int(t))]
    width = query.shape[-1]
    out = []
    for q, k, v in zip(*(x[0].split(sizes) for x in (query, key, value))):
        q, k, v = (x.reshape(x.shape[0], num_heads, -1).transpose(0, 1) for x in (q, k, v))  # [H, S, D]
        probs = torch.softmax(torch.matmul(q, k.transpose(1, 2)) * scale, dim=-1, dtype=torch.float32)
        out.append(torch.matmul(probs.to(v.dtype), v).transpose(0, 1).reshape(-1, width))
    return torch.cat(out)[None]


@segment_attention.register_fake
def _(query, key, value, grid_thw, num_heads, scale):
    return torch.empty_like(query)


class _AtOpset:
    """SEGMENT_ATTENTION as TorchScript's `onnxscript_op` takes it, its body at the export's opset (a
    model-local function is inlined only when its imports match the model's; the ops it uses mean the
    same from opset 17 to 23)."""

    def __init__(self, opset: int):
        self.opset, self.name, self.version = SEGMENT_ATTENTION.opset, SEGMENT_ATTENTION.name, opset

    def to_function_proto(self):
        proto = SEGMENT_ATTENTION.to_function_proto()
        for entry in proto.opset_import:
            if entry.domain == "":
                entry.version = self.version
        return proto


def _torchscript_symbolic(g, query, key, value, grid_thw, num_heads, scale):
    from torch.onnx import symbolic_helper

    out = g.onnxscript_op(_AtOpset(g.opset), query, key, value, grid_thw,
                          num_heads_i=symbolic_helper._get_const(num_heads, "i", "num_heads"),
                          scale_f=symbolic_helper._get_const(scale, "f", "scale"))
    return out.setType(query.type())


torch.onnx.register_custom_op_symbolic(OP_NAME, _torchscript_symbolic, 1)

# torch.export path: what `torch.onnx.export(..., custom_translation_table=...)` needs.
TRANSLATION_TABLE = {torch.ops.vlm_vision.segment_attention.default: SEGMENT_ATTENTION}
