"""Every grid-dependent tensor of a Qwen vision tower as vectorised tensor math.

The eager model derives rotary position ids, position-embedding interpolation taps and attention
boundaries from `grid_thw` with Python loops, `.tolist()` and `repeat_interleave`; traced, those bake the
export grid into the graph. Here each is computed from `grid_thw` int64 [I, 3] and the patch count N
(`pixel_values.shape[0]`) with arange / compare / gather / integer arithmetic only, so one graph is
right for every layout. Every operand is non-negative, so integer division truncates (`_div`: one ONNX `Div`;
torch's floor division exports as Div + Mod + sign tests + Where, whose bool ops a GPU EP takes: on ONNX
Runtime's WebGPU EP an upload and a read-back each, bench/results/gpu-webgpu-profile-h100.json). Patches are
laid out as the Qwen processor emits them: image after image, frame after frame, and inside a frame in
spatial-merge-block order (block_row, block_col, in_row, in_col).
The attention's frame (and window) segments are derived inside its own ONNX lowering (`segment_attention`).
Shared by every Qwen generation; Qwen2.5-VL's window permutation is `window_order`.
"""

from dataclasses import dataclass

import torch


@dataclass
class PatchLayout:
    """Per-patch coordinates, each int64 [N]."""

    row: torch.Tensor  # patch row inside its frame, 0..h-1
    col: torch.Tensor  # patch column inside its frame, 0..w-1
    height: torch.Tensor  # h of the patch's image
    width: torch.Tensor  # w of the patch's image
    frame_start: torch.Tensor  # index of the first patch of the patch's frame


def _div(a: torch.Tensor, b) -> torch.Tensor:
    """a // b for non-negative integers: truncation, which equals floor there and exports as one `Div`."""
    return torch.div(a, b, rounding_mode="trunc")


def patch_layout(grid_thw: torch.Tensor, num_patches: torch.Tensor | int, merge: int) -> PatchLayout:
    """Decode each of the N packed patches into (row, col) and its image's (height, width).

    grid_thw int64 [I, 3]; num_patches = N = sum(t*h*w) (a traced size, not a Python constant).
    """
    t, h, w = grid_thw[:, 0], grid_thw[:, 1], grid_thw[:, 2]  # [I]
    counts = t * h * w
    ends = torch.cumsum(counts, 0)  # [I] exclusive end of each image
    starts = ends - counts
    index = torch.arange(num_patches, device=grid_thw.device)  # [N]
    image = (index[:, None] >= ends[None, :]).sum(1)  # [N] how many images end at or before it
    height, width = h[image], w[image]
    in_image = index - starts[image]
    frame_size = height * width
    frame = _div(in_image, frame_size)
    within = in_image - frame * frame_size  # position inside the frame, merge-block order
    blocks_w = _div(width, merge)
    block = _div(within, merge * merge)
    in_block = within - block * (merge * merge)
    in_row = _div(in_block, merge)
    in_col = in_block - in_row * merge
    block_row = _div(block, blocks_w)
    block_col = block - block_row * blocks_w
    return PatchLayout(
        row=block_row * merge + in_row,
        col=block_col * merge + in_col,
        height=height,
        width=width,
        frame_start=index - within,
    )


def rotary_position_ids(layout: PatchLayout) -> torch.Tensor:
    """int64 [N, 2]: (row, col) of each patch, the ids the 2D rotary embedding rotates by."""
    return torch.stack([layout.row, layout.col], dim=-1)


def _axis_taps(index: torch.Tensor, size: torch.Tensor, side: int):
    """One axis of bilinear align_corners=True interpolation, the taps in integers: target position `index` of an
    axis of `size` (int64 [N] each) maps to source position num / den, num = index * (side-1),
    den = max(size-1, 1). Returns taps int64 [N, 2] (low = num // den, min(low+1, side-1)), num and den int64 [N].
    `low` equals transformers' float floor (`vision_utils._interpolation_axis_taps_weights`): an exact quotient is
    exact in float32, and an inexact one is more than a float32 ulp from an integer at these sizes."""
    num = index * (side - 1)
    den = torch.clamp(size - 1, min=1)
    low = _div(num, den)
    return torch.stack([low, torch.clamp(low + 1, max=side - 1)], dim=-1), num, den


def interpolation_taps(layout: PatchLayout, side: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Bilinear (align_corners=True) taps into the square [side*side, hidden] position table.

    Returns indices int64 [N, 4] and weights float32 [N, 4], the model's `interp_indices` /
    `interp_weights`: transformers' kernel, the weights bit for bit (the same float32 operations on the same
    values: src = num / den, distance |src - low - offset|, weight 1 - distance; tests/test_grid.py). The taps
    stay int64 (`_axis_taps`) and no float is floored, so a GPU EP receives the indices and three [N, 2] float
    tensors and sends nothing back.
    """
    h_taps, h_num, h_den = _axis_taps(layout.row, layout.height, side)
    w_taps, w_num, w_den = _axis_taps(layout.col, layout.width, side)
    src = torch.stack([h_num, w_num], dim=-1).to(torch.float32) / torch.stack([h_den, w_den], dim=-1).to(
        torch.float32)  # [N, 2]: (row, col) source position
    frac = src - torch.stack([h_taps[:, 0], w_taps[:, 0]], dim=-1).to(torch.float32)
    h_weights = torch.stack([1 - frac[:, 0], 1 - (frac[:, 0] - 1).abs()], dim=-1)
    w_weights = torch.stack([1 - frac[:, 1], 1 - (frac[:, 1] - 1).abs()], dim=-1)
    indices = (h_taps[:, :, None] * side + w_taps[:, None, :]).reshape(-1, 4)
    weights = (h_weights[:, :, None] * w_weights[:, None, :]).reshape(-1, 4)
    return indices, weights


def window_order(layout: PatchLayout, merge: int, window: int) -> torch.Tensor:
    """Qwen2.5-VL's `window_index`, int64 [N / merge**2]: the merged token at each position of the window order.

    The window order (transformers' `get_vision_window_index`) keeps frames in place and, inside a frame, lists
    windows of window x window patches row-major, each window's merged tokens row-major; windows at the
    bottom and right edges are cut back to the frame. Computed here as each merged token's position in that
    order (windows above fill whole window rows; windows to the left have the window's full width and this
    window row's height), then inverted with one scatter.
    """
    unit = merge * merge
    first = torch.arange(0, layout.row.shape[0], unit, device=layout.row.device)  # [M] first patch of each token
    row = _div(layout.row[first], merge)  # merged row inside the frame
    col = _div(layout.col[first], merge)
    height = _div(layout.height[first], merge)  # merged rows of the frame
    width = _div(layout.width[first], merge)
    frame_start = _div(layout.frame_start[first], unit)  # in merged tokens
    side = window // merge  # window side in merged tokens
    window_row = _div(row, side)
    window_col = _div(col, side)
    rows_here = torch.clamp(height - window_row * side, max=side)  # rows of this token's window
    cols_here = torch.clamp(width - window_col * side, max=side)
    position = (frame_start + window_row * side * width + window_col * side * rows_here
                + (row - window_row * side) * cols_here + (col - window_col * side))
    return torch.zeros_like(position).scatter(0, position, torch.arange(position.shape[0], device=position.device))


def image_boundaries(grid_thw: torch.Tensor) -> torch.Tensor:
    """int64 [I + 1]: cumulative patch counts per image.

    Passed as the tower's `cu_seqlens` keyword only so that it does not compute its own with Python
    loops (which tracing would bake); the segment attention ignores it.
    """
    counts = grid_thw[:, 0] * grid_thw[:, 1] * grid_thw[:, 2]
    return torch.cat([torch.zeros(1, dtype=counts.dtype), torch.cumsum(counts, 0)])
