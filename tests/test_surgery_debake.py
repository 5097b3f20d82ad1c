"""debake: grid-baked constants are found, rewritten from grid_thw, and right at other grids."""

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from surgery import examples as ex
from surgery.debake import debake
from surgery.grid import Grid, Mono, grid_from_metadata
from surgery.grid_scan import find
from surgery.run import run, try_run

GRID_11x15 = Grid(((1, 22, 30),))


def _feeds(grid_rows, channels=8, seed=0):
    patches = sum(t * h * w for t, h, w in grid_rows)
    rng = np.random.default_rng(seed)
    return {
        "pixel_values": rng.standard_normal((patches, channels)).astype(np.float32),
        "grid_thw": np.array(grid_rows, dtype=np.int64),
    }


@pytest.fixture(scope="module")
def baked():
    return ir.from_proto(ex.baked_merger())


@pytest.fixture(scope="module")
def debaked(baked):
    model, report = debake(baked, grid_from_metadata(baked))
    return model, report


def test_finds_every_baked_shape_input(baked):
    findings = find(baked, GRID_11x15)
    assert {(f.op, f.tensor) for f in findings} == {
        ("Slice", "slice_end"), ("Reshape", "merge_shape"), ("Reshape", "token_shape"),
        ("Split", "split_sizes"), ("ConstantOfShape", "ones_shape"), ("Range", "range_limit"),
        ("Expand", "expand_shape"), ("Tile", "tile_repeats"),
    }
    assert all(f.fixable for f in findings)


def test_merge_reshape_entries_become_grid_expressions(baked):
    merge = next(f for f in find(baked, GRID_11x15) if f.tensor == "merge_shape")
    # the two 2s are the merge size and -1 is free: they stay; 1 becomes images·frames = N/(h·w)
    assert {e.index: e.mono for e in merge.entries} == {
        0: Mono.of("N") / (Mono.of("h_0") * Mono.of("w_0")),
        1: Mono.of("h_0") / Mono.const(2),
        3: Mono.of("w_0") / Mono.const(2),
    }
    assert merge.replacement() == "[N/(h_0·w_0), h_0/2, 2, w_0/2, 2, -1]"


def test_debaked_matches_original_at_export_grid(baked, debaked):
    feeds = _feeds(GRID_11x15.rows)
    got, ref = run(debaked[0], feeds), run(baked, feeds)
    for name in ref:
        np.testing.assert_array_equal(got[name], ref[name])


@pytest.mark.parametrize("grid_rows", [
    [[1, 14, 14]],
    [[1, 16, 20]],
    [[1, 14, 14], [1, 14, 14]],  # a pack of two equal images: the leading 1 becomes 2
    [[2, 16, 20]],  # a 2-frame video
], ids=["14x14", "16x20", "pack-of-two", "video-t2"])
def test_debaked_is_right_at_other_grids(baked, debaked, grid_rows):
    feeds = _feeds(grid_rows)
    embeds, deepstack = ex.merger_reference(feeds["pixel_values"], grid_rows)
    got = run(debaked[0], feeds)
    np.testing.assert_allclose(got["image_embeds"], embeds, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["deepstack_embeds_0"], deepstack, rtol=1e-5, atol=1e-5)
    # the original is wrong by construction here: it fails or gives other sizes/values
    original, error = try_run(baked, feeds)
    assert error is not None or original["image_embeds"].shape != embeds.shape or not np.allclose(
        original["image_embeds"], embeds, atol=1e-3)


def test_nothing_to_fix_on_dynamic_export():
    model = ir.from_proto(ex.dynamic_encoder())
    new, report = debake(model, grid_from_metadata(model))
    assert report["findings"] == [] and report["fixed"] == 0
    assert new is model


def test_architecture_constants_equal_to_grid_sizes_are_not_flagged():
    # uniform grid 16×12: h = 16 = head count, w = 12 = head_dim; the Reshape [-1, 16, 12] is vetoed
    # because its -1 absorbs the dynamic num_patches; 64 (width) is a weight dim
    model = ir.from_proto(ex.dynamic_encoder())
    _, report = debake(model, Grid(((1, 16, 12),)))
    assert report["findings"] == []
    assert any("num_tokens = 48" in c for c in report["collisions"])


def test_constant_folded_table_is_unfixable():
    model = ir.from_proto(ex.baked_merger(folded_table=True))
    new, report = debake(model, GRID_11x15)
    unfixable = [f for f in report["findings"] if not f["fixable"]]
    assert [f["tensor"] for f in unfixable] == ["rotary_cos_table"]
    assert report["fixed"] == 8 and report["unfixable"] == 1
    assert find(new, GRID_11x15)[0].tensor == "rotary_cos_table"  # still there, still reported


def _split_model(sizes):
    """x [N, 4] -> Split into per-image sizes -> each scaled by its index+1 -> Concat."""
    outs = [f"part{i}" for i in range(len(sizes))]
    nodes = [helper.make_node("Split", ["pixel_values", "sizes"], outs, axis=0, name="split_images")]
    for i, name in enumerate(outs):
        nodes.append(helper.make_node("Mul", [name, f"scale{i}"], [f"scaled{i}"]))
    nodes.append(helper.make_node("Concat", [f"scaled{i}" for i in range(len(sizes))], ["image_embeds"], axis=0))
    inits = [numpy_helper.from_array(np.array(sizes, np.int64), "sizes")]
    inits += [numpy_helper.from_array(np.array(i + 1.0, np.float32), f"scale{i}") for i in range(len(sizes))]
    graph = helper.make_graph(nodes, "split", [
        helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["num_patches", 4]),
        helper.make_tensor_value_info("grid_thw", TensorProto.INT64, ["num_images", 3]),
    ], [helper.make_tensor_value_info("image_embeds", TensorProto.FLOAT, ["num_patches", 4])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 9
    onnx.checker.check_model(proto)
    return ir.from_proto(proto)


def test_split_into_per_image_patch_counts_reads_grid_rows():
    grid = Grid(((1, 16, 16), (1, 12, 20)))  # mixed sizes: Split [256, 240]
    model = _split_model([256, 240])
    new, report = debake(model, grid)
    (finding,) = report["findings"]
    assert finding["replacement"] == "[t_0·h_0·w_0, t_1·h_1·w_1]"
    assert any("exactly that many images" in note for note in finding["notes"])
    rows = [[1, 10, 6], [2, 4, 8]]
    feeds = _feeds(rows, channels=4)
    x = feeds["pixel_values"]
    expected = np.concatenate([x[:60] * 1.0, x[60:] * 2.0])
    np.testing.assert_allclose(run(new, feeds)["image_embeds"], expected, rtol=1e-6)


def test_square_grid_takes_h_then_w_and_says_it_is_ambiguous():
    model = ir.from_proto(ex.baked_merger())
    square = Grid(((1, 22, 22),))  # pretend the export was 22×22: the merge shape would be [1,11,2,11,2,-1]
    tensor = model.graph.initializers["merge_shape"]
    tensor.const_value = ir.tensor(np.array([1, 11, 2, 11, 2, -1], np.int64), name="merge_shape")
    merge = next(f for f in find(model, square) if f.tensor == "merge_shape")
    assert [e.expr for e in merge.entries] == ["N/(h_0·w_0)", "h_0/2", "w_0/2"]
    assert any("square export grid" in note for note in merge.notes)
