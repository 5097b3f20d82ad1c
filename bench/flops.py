"""Analytic FLOPs of the Qwen3-VL vision encoder (matrix products only; 1 multiply-add = 2 FLOPs).

For a pack grid_thw [I, 3] with N = sum(t*h*w) patches, frames of S = h*w patches, hidden C,
MLP width F, merged width 4C (merge 2), output width O, depth L, k deepstack mergers:
    patch embedding   2 N P C                (P = 1536 = 3 x 2 x 16 x 16, a Conv as a matmul)
    per block         2 N C (3C + C + 2F) + 4 C sum_frames S^2   (qkv, proj, MLP; q k^T and p v)
    per merger        2 (N/4) 4C (4C + O)    (main + k deepstack)
Attention is counted per frame, as both the eager model and the ONNX graph (a Loop of
MultiHeadAttention over the frames) run it.
"""


def encoder_flops(vision: dict, grid_thw: list[list[int]]) -> float:
    c, f, o = vision["hidden_size"], vision["intermediate_size"], vision["out_hidden_size"]
    merge = vision.get("spatial_merge_size", 2)
    patch = vision.get("in_channels", 3) * vision.get("temporal_patch_size", 2) * vision.get("patch_size", 16) ** 2
    n = sum(t * h * w for t, h, w in grid_thw)
    square = sum(t * (h * w) ** 2 for t, h, w in grid_thw)
    tokens, merged = n // merge**2, c * merge**2
    blocks = vision["depth"] * (2 * n * c * (3 * c + c + 2 * f) + 4 * c * square)
    mergers = (1 + len(vision.get("deepstack_visual_indexes", []))) * 2 * tokens * merged * (merged + o)
    return float(2 * n * patch * c + blocks + mergers)
