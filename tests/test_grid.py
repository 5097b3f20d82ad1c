"""The vectorised grid math equals transformers' own loop/repeat_interleave implementations."""

import numpy as np
import pytest
import torch
from transformers import vision_utils

from builders.qwen_vl import grid, layouts

MERGE, SIDE = 2, 48
FIXED = [[[1, 18, 46]], [[1, 2, 64]], [[1, 4, 6], [2, 8, 10], [1, 2, 2]], [[3, 6, 4]], [[1, 64, 2], [1, 2, 64]]]
PACKS = FIXED + layouts.random_grids(np.random.default_rng(1234), MERGE, count=20)


@pytest.mark.parametrize("pack", PACKS, ids=str)
def test_position_ids_and_taps_match_transformers(pack):
    grid_thw = torch.tensor(pack)
    n = int(grid_thw.prod(-1).sum())
    layout = grid.patch_layout(grid_thw, n, MERGE)
    expected_ids = vision_utils.get_vision_position_ids(grid_thw, MERGE)
    assert torch.equal(grid.rotary_position_ids(layout), expected_ids)
    indices, weights = grid.interpolation_taps(layout, SIDE)
    ref_indices, ref_weights = vision_utils.get_vision_interpolation_indices_and_weights(
        grid_thw, SIDE, mode="bilinear", align_corners=True, spatial_merge_size=MERGE)
    assert torch.equal(indices, ref_indices)
    assert torch.equal(weights, ref_weights)  # bit for bit: the same float32 operations (grid.interpolation_taps)


def test_same_patch_count_layouts_differ_in_shape_only():
    example = [[1, 16, 16], [1, 12, 20]]
    found = layouts.same_patch_count_layouts(example, MERGE)
    assert len(found) >= 3
    for pack in found:
        assert pack != example
        assert sum(t * h * w for t, h, w in pack) == 496
        assert all(h % MERGE == 0 and w % MERGE == 0 for _, h, w in pack)
    assert any(t > 1 for pack in found for t, _, _ in pack)


def test_the_exported_grid_math_floors_nothing(tiny_exports):
    """The default export (TorchScript) carries the grid math as integer Div (no Mod, sign Xor or float Floor):
    ONNX Runtime's WebGPU EP took those bool and float ops, one upload and one read-back each; without them the tiny
    fp16 uploads 6 tensors per run, down from 17, and reads back none, down from 7 (its profiler on lavapipe,
    2026-11-27). The dynamo path (`--dynamo`) still has Floors: onnxscript lowers every integer division through
    float Div and Floor."""
    import onnx

    ops = {n.op_type for n in onnx.load(str(tiny_exports["torchscript"] / "model.onnx"),
                                        load_external_data=False).graph.node}
    assert "Div" in ops and not ops & {"Xor", "Mod", "Floor"}, sorted(ops & {"Xor", "Mod", "Floor"})
