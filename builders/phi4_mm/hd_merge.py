"""Phi-4-multimodal's HD merge and patch positions as fixed-shape tensor math (no loops, no `.item()`).

The eager `Phi4MultimodalImageEmbedding.forward` loops over images and reads each image's useful
rows/columns with `.item()`: traced, those become constants of the export example; under torch.export
they raise GuardOnDataDependentSymNode. Here every image gets the same fixed number of candidate
token slots (the most its crop count allows), each slot holds the row of a source table it would take,
and one boolean-mask select keeps the valid slots, in the eager order.
"""

import torch


def token_sources(image_attention_mask: torch.Tensor, image_sizes: torch.Tensor, crop_size: int,
                  side: int) -> torch.Tensor:
    """Rows of the source table, int64 [num_image_tokens], in the order the eager model emits tokens.

    image_attention_mask [I, C, M, M] (M = patches per crop side; nonzero = real patch), image_sizes
    int64 [I, 2] (height, width of the HD canvas), `side` = pooled tokens per crop side (16).
    The source table is the pooled crops [I * C * side * side, D] (image i, crop c, row y, column x at
    ((i * C + c) * side + y) * side + x), then the sub-image row separator, then the global separator.

    Per image: HD rows y < useful_h, each of useful_w tokens and a row separator (useful_h, useful_w from
    the mask's [0::2, 0::2] subsampling, as eager), then the global separator, then the global crop's
    side rows of side tokens and a separator each.
    """
    count, crops = image_attention_mask.shape[0], image_attention_mask.shape[1]
    cell = side * side
    sub_separator = count * crops * cell
    global_separator = sub_separator + 1
    rows = image_sizes[:, 0:1] // crop_size  # [I, 1] HD crops down
    cols = image_sizes[:, 1:2] // crop_size  # [I, 1] HD crops across
    # Every crop's mask subsampled [0::2, 0::2]; crop 0 (global) is excluded by the conditions below, not
    # by slicing (a `[:, 1:]` slice makes torch.export guard max_num_crops >= 3).
    valid = (image_attention_mask[:, :, 0::2, 0::2] != 0).to(torch.int64)  # [I, C, side, side]
    hd_index = torch.arange(crops, device=valid.device).unsqueeze(0) - 1  # [1, C] HD crop index (-1: global)
    in_grid = (hd_index >= 0) & (hd_index < rows * cols)  # [I, C]
    first_column = in_grid & ((hd_index % cols) == 0)
    first_row = in_grid & (hd_index < cols)
    useful_h = (valid[:, :, :, 0].sum(-1) * first_column).sum(-1, keepdim=True)  # [I, 1]
    useful_w = (valid[:, :, 0, :].sum(-1) * first_row).sum(-1, keepdim=True)  # [I, 1]

    image = torch.arange(count, device=valid.device).unsqueeze(1)  # [I, 1]
    base = image * crops * cell  # [I, 1] first source row of each image's crop 0
    # HD slots: enough for every arrangement of C-1 crops (rows * (cols * side + 1) <= (C-1)(side^2+side)).
    slot = torch.arange((crops - 1) * (cell + side), device=valid.device).unsqueeze(0)  # [1, S]
    y, x = slot // (useful_w + 1), slot % (useful_w + 1)  # [I, S]
    hd_crop = 1 + (y // side) * cols + (x // side)
    hd = torch.where(x == useful_w, sub_separator, base + hd_crop * cell + (y % side) * side + (x % side))
    hd_valid = slot < useful_h * (useful_w + 1)
    # Global crop: side rows of side tokens and a separator.
    g = torch.arange(side * (side + 1), device=valid.device).unsqueeze(0)  # [1, G]
    gy, gx = g // (side + 1), g % (side + 1)
    glob = torch.where(gx == side, sub_separator, base + gy * side + gx)  # [I, G]
    table = torch.cat([hd, torch.full_like(base, global_separator), glob], dim=1)  # [I, S + 1 + G]
    keep = torch.cat([hd_valid, torch.ones_like(base, dtype=torch.bool), torch.ones_like(glob, dtype=torch.bool)],
                     dim=1)
    return table[keep]


def patch_position_ids(patch_mask: torch.Tensor, boundaries: torch.Tensor, per_side: int) -> torch.Tensor:
    """Position-embedding index of every patch, int64 [B, M * M], as `Phi4MultimodalVisionEmbeddings`.

    patch_mask bool [B, M, M]; boundaries float32 [per_side - 1] (the eager `torch.arange(1 / n, 1, 1 / n)`,
    passed in so both sides use the same values). The eager `torch.bucketize(right=True)` is the number
    of boundaries <= x, and its `torch.full` without dtype is an int64 zero here.
    """
    count = patch_mask.shape[0]
    rows = patch_mask[:, :, 0].sum(dim=1)  # [B]
    cols = patch_mask[:, 0, :].sum(dim=1)
    index = torch.arange(patch_mask.shape[1], device=patch_mask.device, dtype=torch.float32)
    frac_h = torch.clamp(index[None, :] * (1.0 / rows)[:, None], max=1.0 - 1e-6)  # [B, M]
    frac_w = torch.clamp(index[None, :] * (1.0 / cols)[:, None], max=1.0 - 1e-6)
    bucket_h = (frac_h.unsqueeze(-1) >= boundaries).to(torch.int64).sum(-1)  # [B, M]
    bucket_w = (frac_w.unsqueeze(-1) >= boundaries).to(torch.int64).sum(-1)
    ids = (bucket_h[:, :, None] * per_side + bucket_w[:, None, :]).reshape(count, -1)
    return torch.where(patch_mask.reshape(count, -1), ids, torch.zeros_like(ids))
