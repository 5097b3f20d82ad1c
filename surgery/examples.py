"""Small demo models that show each problem `surgery` fixes; used by the tests and the README.

    python -m surgery.examples DIR     # writes every demo model to DIR/*.onnx
    python -m surgery.examples DIR --real ../shared/fixtures/real   # the naive batch script on SCRFD 500m

- `baked_merger`: a patch merger traced at one 22×30-patch image (an 11×15 merge grid): Reshape to
  [1, 11, 2, 15, 2, -1], Reshape to [165, -1], Slice/Range/Expand/Tile/Split/ConstantOfShape sized
  by the grid. `merger_reference` computes the right answer in numpy for any equal-size pack.
- `dynamic_encoder`: the shape of our own exports (pixel_values/grid_thw, everything computed at run
  time, mixed-size export grid) with architecture constants (16 heads, 64 wide) that equal
  per-image sizes of the export grid: debake must find nothing.
- `fpn` / `naive_batch_rewrite`: a 3-scale FPN detector at batch 1, and what a naive batch script
  makes of it (one `?` on every unknown dim -> ORT "Shape mismatch attempting to re-use buffer").
- `symbolic_batch`: an export meant for batch 4 that still declares a symbolic batch `s77`.
- `nonzero_model`: output size set by NonZero (data-dependent).
- `batch_baked_ops` / `interleaved_head` / `batch_mixing`: a batch-1 trace with the batch baked into
  Resize/Slice/Expand/ConstantOfShape/Tile/Reshape; an SCRFD 500m-style head whose samples
  interleave; an output that mixes samples (set-batch refuses it).
- `naive_fixed_batch`: the failure reports' batch script, for real detectors (`write_real`).
- `fixed_size`: runs at one image size only (default-probe tests).

Models are built with onnx.helper; weights are seeded random numbers.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
EXPORT_GRID_11x15 = [[1, 22, 30]]
EXPORT_GRID_MIXED = [[1, 16, 16], [1, 12, 20]]


def _model(nodes, inputs, outputs, inits, metadata: dict | None = None, name="demo") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="surgery.examples")
    model.ir_version = 9
    for key, value in (metadata or {}).items():
        model.metadata_props.add(key=key, value=value)
    onnx.checker.check_model(model)
    return model


def _i64(name, values) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(values, dtype=np.int64), name)


def _f32(name, array) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array, dtype=np.float32), name)


def _grid_metadata(grid: list[list[int]], merge: int = 2) -> dict[str, str]:
    patches = sum(t * h * w for t, h, w in grid)
    return {
        "export_grid_thw": json.dumps(grid),
        "export_num_patches": str(patches),
        "export_num_tokens": str(patches // (merge * merge)),
        "spatial_merge_size": str(merge),
        "model": "demo",
        "exporter": "torchscript",
        "weights": "random",
    }


# ---------------------------------------------------------------------------------------------------
# Patch merger baked to an 11×15 merge grid


def merger_weights(channels: int = 8, out: int = 6, seed: int = 0) -> dict[str, np.ndarray]:
    """Weights of `baked_merger`: proj [4·channels, out], bias [1, out]."""
    rng = np.random.default_rng(seed)
    return {
        "proj": (rng.standard_normal((4 * channels, out)) * 0.3).astype(np.float32),
        "bias": rng.standard_normal((1, out)).astype(np.float32),
    }


def baked_merger(channels: int = 8, out: int = 6, folded_table: bool = False) -> onnx.ModelProto:
    """A merger traced at grid [[1, 22, 30]] (merge 2 -> 11×15 tokens), every grid size baked.

    Inputs: pixel_values [num_patches, channels] float32 (patches in raster order of each image),
    grid_thw [num_images, 3] int64 (unused by the baked graph: that is the bug).
    Outputs: image_embeds [num_tokens, out] = merge2x2(pixel_values) @ proj + 0.01·token index + bias;
    deepstack_embeds_0 [num_tokens, out] = merge2x2(pixel_values) @ proj.
    With `folded_table`, a constant [165, 1] table (like a constant-folded rotary table) is added to
    image_embeds: debake cannot fix that and must say so.
    """
    w = merger_weights(channels, out)
    n, tok = 660, 165
    inits = [
        _f32("proj", w["proj"]), _f32("bias", w["bias"]),
        _i64("slice_start", [0]), _i64("slice_end", [n]), _i64("slice_axis", [0]),
        _i64("merge_shape", [1, 11, 2, 15, 2, -1]), _i64("token_shape", [tok, -1]),
        _i64("range_start", 0), _i64("range_limit", tok), _i64("range_delta", 1),
        _i64("unsqueeze_axes", [1]), _i64("expand_shape", [tok, out]), _i64("tile_repeats", [tok, 1]),
        _i64("split_sizes", [tok]), _i64("ones_shape", [tok, 1]), _f32("pos_scale", 0.01),
    ]
    nodes = [
        helper.make_node("Slice", ["pixel_values", "slice_start", "slice_end", "slice_axis"], ["xs"], name="slice_patches"),
        helper.make_node("Reshape", ["xs", "merge_shape"], ["x6"], name="merge_reshape"),
        helper.make_node("Transpose", ["x6"], ["xt"], perm=[0, 1, 3, 2, 4, 5], name="merge_transpose"),
        helper.make_node("Reshape", ["xt", "token_shape"], ["merged"], name="token_reshape"),
        helper.make_node("MatMul", ["merged", "proj"], ["projected"], name="proj"),
        helper.make_node("Split", ["projected", "split_sizes"], ["split0"], axis=0, name="split_images"),
        helper.make_node("ConstantOfShape", ["ones_shape"], ["ones"], name="ones",
                         value=numpy_helper.from_array(np.array([1.0], np.float32))),
        helper.make_node("Mul", ["split0", "ones"], ["deepstack_embeds_0"], name="deepstack"),
        helper.make_node("Range", ["range_start", "range_limit", "range_delta"], ["pos_i"], name="positions"),
        helper.make_node("Cast", ["pos_i"], ["pos_f"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["pos_f", "unsqueeze_axes"], ["pos_col"]),
        helper.make_node("Expand", ["pos_col", "expand_shape"], ["pos_x"], name="expand_positions"),
        helper.make_node("Mul", ["pos_x", "pos_scale"], ["pos_s"]),
        helper.make_node("Tile", ["bias", "tile_repeats"], ["bias_t"], name="tile_bias"),
        helper.make_node("Add", ["projected", "pos_s"], ["with_pos"]),
        helper.make_node("Add", ["with_pos", "bias_t"], ["embeds" if folded_table else "image_embeds"]),
    ]
    if folded_table:
        table = np.cos(np.arange(tok, dtype=np.float32))[:, None]
        inits.append(_f32("rotary_cos_table", table))
        nodes.append(helper.make_node("Add", ["embeds", "rotary_cos_table"], ["image_embeds"], name="add_table"))
    inputs, outputs = _encoder_io(channels, out)
    return _model(nodes, inputs, outputs, inits, _grid_metadata(EXPORT_GRID_11x15), "baked_merger")


def _encoder_io(channels: int, out: int) -> tuple[list, list]:
    """The encoder I/O declarations: pixel_values [num_patches, channels], grid_thw [num_images, 3]
    -> image_embeds, deepstack_embeds_0 [num_tokens, out]."""
    inputs = [
        helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["num_patches", channels]),
        helper.make_tensor_value_info("grid_thw", TensorProto.INT64, ["num_images", 3]),
    ]
    outputs = [
        helper.make_tensor_value_info("image_embeds", TensorProto.FLOAT, ["num_tokens", out]),
        helper.make_tensor_value_info("deepstack_embeds_0", TensorProto.FLOAT, ["num_tokens", out]),
    ]
    return inputs, outputs


def merger_reference(pixel_values: np.ndarray, grid: list[list[int]], channels: int = 8, out: int = 6):
    """The right outputs of `baked_merger` for a pack of equal-size images (numpy).

    pixel_values [Σ t·h·w, channels] -> (image_embeds, deepstack_embeds_0), each [Σ t·h·w / 4, out].
    """
    if len({tuple(r) for r in grid}) != 1:
        raise ValueError("the demo merger is defined for packs of equal-size images only")
    w = merger_weights(channels, out)
    frames = sum(t for t, _, _ in grid)
    _, h, wd = grid[0]
    x = pixel_values.reshape(frames, h // 2, 2, wd // 2, 2, channels).transpose(0, 1, 3, 2, 4, 5)
    merged = x.reshape(-1, 4 * channels)
    projected = merged @ w["proj"]
    positions = np.arange(len(merged), dtype=np.float32)[:, None] * np.float32(0.01)
    return projected + positions + w["bias"], projected


# ---------------------------------------------------------------------------------------------------
# An encoder that is already dynamic (like our patched exports)


def dynamic_encoder(channels: int = 48, heads: int = 16, head_dim: int = 12, out: int = 64) -> onnx.ModelProto:
    """Everything computed from Shape(pixel_values) and grid_thw; exported at a mixed 2-image grid.

    Architecture constants deliberately equal per-image sizes of the export grid [[1,16,16],[1,12,20]]
    (16 heads = h[0], out 64 = tokens of image 0, head_dim 12 = h[1]): none of them is grid-baked.
    Inputs pixel_values [num_patches, channels], grid_thw [num_images, 3];
    outputs image_embeds, deepstack_embeds_0 [num_tokens, out].
    """
    rng = np.random.default_rng(1)
    hidden = heads * head_dim
    inits = [
        _f32("w_in", rng.standard_normal((channels, hidden)) * 0.1),
        _f32("w_out", rng.standard_normal((4 * hidden, out)) * 0.1),
        _i64("heads_shape", [-1, heads, head_dim]),
        _i64("zero", [0]), _i64("axis1", [1]), _i64("four", [4]), _i64("merged_width", [4 * hidden]),
        _i64("slice_end", [out]), _i64("hidden_shape", [-1, hidden]), _i64("r0", 0), _i64("r1", 1),
        _i64("sum_axes", [1]), _f32("id_scale", 0.01),
    ]
    nodes = [
        helper.make_node("MatMul", ["pixel_values", "w_in"], ["h"]),
        # image id of each patch: count of cumulative image ends <= patch index (from grid_thw values)
        helper.make_node("ReduceProd", ["grid_thw"], ["per_image"], axes=[1], keepdims=0),
        helper.make_node("CumSum", ["per_image", "zero"], ["ends"]),
        helper.make_node("Shape", ["pixel_values"], ["pv_shape"]),
        helper.make_node("Gather", ["pv_shape", "zero"], ["n_patches"], axis=0),
        helper.make_node("Squeeze", ["n_patches", "zero"], ["n_scalar"]),
        helper.make_node("Range", ["r0", "n_scalar", "r1"], ["patch_index"]),
        helper.make_node("Unsqueeze", ["patch_index", "axis1"], ["patch_col"]),
        helper.make_node("GreaterOrEqual", ["patch_col", "ends"], ["past"]),
        helper.make_node("Cast", ["past"], ["past_f"], to=TensorProto.FLOAT),
        helper.make_node("ReduceSum", ["past_f", "sum_axes"], ["image_id"], keepdims=1),
        helper.make_node("Mul", ["image_id", "id_scale"], ["id_feature"]),
        helper.make_node("Add", ["h", "id_feature"], ["h1"]),
        # per-head normalisation with the architecture's head shape
        helper.make_node("Reshape", ["h1", "heads_shape"], ["per_head"]),
        helper.make_node("Softmax", ["per_head"], ["per_head_sm"], axis=-1),
        helper.make_node("Reshape", ["per_head_sm", "hidden_shape"], ["h2"]),
        # merge 2×2: num_tokens = num_patches / 4, computed
        helper.make_node("Div", ["n_patches", "four"], ["n_tokens"]),
        helper.make_node("Concat", ["n_tokens", "merged_width"], ["merge_shape"], axis=0),
        helper.make_node("Reshape", ["h2", "merge_shape"], ["merged"]),
        helper.make_node("MatMul", ["merged", "w_out"], ["image_embeds"]),
        helper.make_node("Slice", ["image_embeds", "zero", "slice_end", "axis1"], ["deepstack_embeds_0"]),
    ]
    inputs, outputs = _encoder_io(channels, out)
    return _model(nodes, inputs, outputs, inits, _grid_metadata(EXPORT_GRID_MIXED), "dynamic_encoder")


# ---------------------------------------------------------------------------------------------------
# Multi-scale detector (SCRFD-style FPN)


def fpn(channels: int = 8, size: int = 64, seed: int = 0, baked_batch: bool = False) -> onnx.ModelProto:
    """A 3-scale FPN at batch 1: strides 2/4/8, top-down nearest Resize to the lateral's size.

    Input images [1, 3, size, size]; outputs score_{s} [1, 4, (size/s)²] for s in 2, 4, 8. Each head
    flattens its map with a Reshape to [0, 4, -1] (batch copied), or, with `baked_batch`, to
    [1, 4, -1] as a trace of `x.view(x.shape[0], 4, -1)` at batch 1 writes it.
    """
    rng = np.random.default_rng(seed)

    def weight(name, shape):
        return _f32(name, rng.standard_normal(shape) * 0.2)

    c = channels
    inits = [weight("stem", [c, 3, 3, 3]), weight("down1", [c, c, 3, 3]), weight("down2", [c, c, 3, 3])]
    inits += [weight(f"head{i}", [4, c, 1, 1]) for i in range(3)]
    inits += [_i64("flat_shape", [1 if baked_batch else 0, 4, -1]), _i64("hw_start", [2]), _i64("hw_end", [4]),
              _i64("nc_start", [0]), _i64("nc_end", [2])]
    conv = {"pads": [1, 1, 1, 1], "strides": [2, 2]}
    nodes = [
        helper.make_node("Conv", ["images", "stem"], ["c0"], **conv),
        helper.make_node("Relu", ["c0"], ["r0"]),
        helper.make_node("Conv", ["r0", "down1"], ["c1"], **conv),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "down2"], ["c2"], **conv),
        helper.make_node("Relu", ["c2"], ["p2"]),
    ]
    for coarse, lateral, up, fused in (("p2", "r1", "u1", "p1"), ("p1", "r0", "u0", "p0")):
        nodes += [  # F.interpolate(coarse, size=lateral.shape[-2:], mode="nearest") + lateral
            helper.make_node("Shape", [coarse], [f"{coarse}_shape"]),
            helper.make_node("Slice", [f"{coarse}_shape", "nc_start", "nc_end"], [f"{coarse}_nc"]),
            helper.make_node("Shape", [lateral], [f"{lateral}_shape"]),
            helper.make_node("Slice", [f"{lateral}_shape", "hw_start", "hw_end"], [f"{lateral}_hw"]),
            helper.make_node("Concat", [f"{coarse}_nc", f"{lateral}_hw"], [f"{up}_sizes"], axis=0),
            helper.make_node("Resize", [coarse, "", "", f"{up}_sizes"], [up], mode="nearest", name=f"upsample_{coarse}"),
            helper.make_node("Add", [lateral, up], [fused], name=f"fuse_{fused}"),
        ]
    for i, (feature, stride) in enumerate((("p0", 2), ("p1", 4), ("p2", 8))):
        nodes += [
            helper.make_node("Conv", [feature, f"head{i}"], [f"head{i}_map"], name=f"head{i}"),
            helper.make_node("Reshape", [f"head{i}_map", "flat_shape"], [f"score_{stride}"], name=f"flatten{i}"),
        ]
    inputs = [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])]
    outputs = [helper.make_tensor_value_info(f"score_{s}", TensorProto.FLOAT, [1, 4, (size // s) ** 2]) for s in (2, 4, 8)]
    model = _model(nodes, inputs, outputs, inits, name="fpn")
    return onnx.shape_inference.infer_shapes(model, data_prop=True)


def naive_batch_rewrite(model: onnx.ModelProto, symbol: str = "?") -> onnx.ModelProto:
    """What a typical batch script does: batch -> `symbol`, re-infer, `symbol` on every unknown dim.

    The same string on the spatial dims of all three scales tells ORT they are equal; its memory
    planner then re-uses a 16×16 buffer for a 32×32 tensor and fails.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    del out.graph.value_info[:]
    for vi in out.graph.input:
        vi.type.tensor_type.shape.dim[0].dim_param = symbol
    for vi in out.graph.output:
        vi.type.tensor_type.ClearField("shape")
    out = onnx.shape_inference.infer_shapes(out)
    for vi in list(out.graph.input) + list(out.graph.output) + list(out.graph.value_info):
        shape = vi.type.tensor_type.shape
        for i, dim in enumerate(shape.dim):
            if i == 0 or not dim.HasField("dim_value"):
                dim.dim_param = symbol
    return out


def naive_fixed_batch(model: onnx.ModelProto, batch: int, symbol: str = "?") -> onnx.ModelProto:
    """The batch script of the shape-failure reports, on a real detector: axis 0 of the input and of
    every 4-D value_info set to `batch`, `symbol` on every other unknown dim (inputs, outputs,
    value_info). On SCRFD the `?` then claims the three FPN scales are equal: "Shape mismatch
    attempting to re-use buffer"."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    for vi in list(graph.input) + [vi for vi in graph.value_info if len(vi.type.tensor_type.shape.dim) == 4]:
        vi.type.tensor_type.shape.dim[0].dim_value = batch
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        for dim in vi.type.tensor_type.shape.dim:
            if not dim.HasField("dim_value"):
                dim.dim_param = symbol
    return out


def stale_value_info(model: onnx.ModelProto) -> onnx.ModelProto:
    """`model` after a careless edit: value_info of p1 still says 8×8 where the tensor is 16×16."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for vi in out.graph.value_info:
        if vi.name == "p1":
            dims = vi.type.tensor_type.shape.dim
            dims[2].dim_value, dims[3].dim_value = dims[2].dim_value // 2, dims[3].dim_value // 2
    return out


def batch_baked_ops(channels: int = 4, size: int = 8) -> onnx.ModelProto:
    """A batch-1 trace with the batch baked into every kind of shape input set-batch rewrites.

    Input x [1, C, s, s]; up = Resize(x, sizes [1, C, 2s, 2s]); kept = Slice(up, ends [1] on axis 0);
    bias = Expand(b [1, 2, 1, 1], [1, 2, 2s, 2s]); zeros = ConstantOfShape([1, 1, 2s, 2s]);
    grid = Tile(g [1, 1, 2s, 2s], [1, 1, 1, 1]); Concat(kept, bias, zeros, grid; axis 1) flattened
    by Reshape [1, -1] -> y [1, (C + 4)·4s²]. Right at batch 1; at batch 2 the Resize drops sample 1.
    """
    rng = np.random.default_rng(4)
    big = 2 * size
    inits = [
        _i64("up_sizes", [1, channels, big, big]), _i64("zero", [0]), _i64("one", [1]),
        _f32("b", rng.standard_normal((1, 2, 1, 1))), _i64("bias_shape", [1, 2, big, big]),
        _i64("zeros_shape", [1, 1, big, big]), _f32("g", rng.standard_normal((1, 1, big, big))),
        _i64("repeats", [1, 1, 1, 1]), _i64("flat", [1, -1]),
    ]
    nodes = [
        helper.make_node("Resize", ["x", "", "", "up_sizes"], ["up"], mode="nearest", name="upsample"),
        helper.make_node("Slice", ["up", "zero", "one", "zero"], ["kept"], name="keep"),
        helper.make_node("Expand", ["b", "bias_shape"], ["bias"], name="bias"),
        helper.make_node("ConstantOfShape", ["zeros_shape"], ["zeros"], name="zeros",
                         value=numpy_helper.from_array(np.array([0.5], np.float32))),
        helper.make_node("Tile", ["g", "repeats"], ["grid"], name="grid"),
        helper.make_node("Concat", ["kept", "bias", "zeros", "grid"], ["stacked"], axis=1, name="stack"),
        helper.make_node("Reshape", ["stacked", "flat"], ["y"], name="flatten"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, size, size])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, (channels + 4) * big * big])]
    return _model(nodes, inputs, outputs, inits, name="batch_baked_ops")


def interleaved_head(channels: int = 4, anchors: int = 2) -> onnx.ModelProto:
    """An SCRFD 500m-style head: Conv -> Transpose(perm [2, 3, 0, 1]) -> Reshape [-1, 1].

    Input x [1, C, ?, ?]; output scores [H·W·anchors, 1]. At batch B the rows are ordered
    (h, w, sample, anchor): the samples interleave in blocks of `anchors` rows.
    """
    rng = np.random.default_rng(6)
    inits = [_f32("w", rng.standard_normal((anchors, channels, 1, 1))), _i64("flat", [-1, 1])]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["map"], name="head"),
        helper.make_node("Transpose", ["map"], ["hwbc"], perm=[2, 3, 0, 1], name="to_hwbc"),
        helper.make_node("Reshape", ["hwbc", "flat"], ["scores"], name="flatten"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, channels, "?", "?"])]
    outputs = [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["?", 1])]
    return _model(nodes, inputs, outputs, inits, name="interleaved_head")


def fixed_size(side: int = 320) -> onnx.ModelProto:
    """Input x [1, 3, ?, ?] that runs only at side×side (a Reshape to [1, 3·side²])."""
    nodes = [helper.make_node("Reshape", ["x", "flat"], ["y"], name="flatten")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, "?", "?"])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3 * side * side])]
    return _model(nodes, inputs, outputs, [_i64("flat", [1, 3 * side * side])], name="fixed_size")


def batch_mixing() -> onnx.ModelProto:
    """y = x + ReduceSum(x over the batch): every sample's output depends on the others."""
    nodes = [
        helper.make_node("ReduceSum", ["x", "axis0"], ["total"], keepdims=1),
        helper.make_node("Add", ["x", "total"], ["y"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6])]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6])]
    return _model(nodes, inputs, outputs, [_i64("axis0", [0])], name="batch_mixing")


# ---------------------------------------------------------------------------------------------------
# Symbolic batch on a model meant to be static; data-dependent output


def symbolic_batch(batch: int = 4, size: int = 8) -> onnx.ModelProto:
    """A dynamo-style export meant for batch 4 that still declares batch `s77`.

    Input x [s77, 3, size, size]. features = Reshape(Conv(x), Concat(Shape(·)[0], [-1])) (shape
    arithmetic that freeze folds); pooled = Reshape(Conv(x), [4, -1]) @ w2 (the batch 4 baked by the
    trace). Outputs features [s77, 10], pooled [s77, 5]. Runs at 4 only.
    """
    rng = np.random.default_rng(2)
    flat = 4 * size * size
    inits = [
        _f32("conv_w", rng.standard_normal((4, 3, 3, 3)) * 0.2),
        _f32("w1", rng.standard_normal((flat, 10)) * 0.1),
        _f32("w2", rng.standard_normal((flat, 5)) * 0.1),
        _i64("zero", [0]), _i64("minus_one", [-1]), _i64("baked_shape", [batch, -1]),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "conv_w"], ["a"], pads=[1, 1, 1, 1]),
        helper.make_node("Shape", ["a"], ["a_shape"]),
        helper.make_node("Gather", ["a_shape", "zero"], ["b"], axis=0),
        helper.make_node("Concat", ["b", "minus_one"], ["flat_shape"], axis=0),
        helper.make_node("Reshape", ["a", "flat_shape"], ["a_flat"]),
        helper.make_node("MatMul", ["a_flat", "w1"], ["features"]),
        helper.make_node("Reshape", ["a", "baked_shape"], ["a_baked"], name="flatten_baked"),
        helper.make_node("MatMul", ["a_baked", "w2"], ["pooled"], name="pool"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["s77", 3, size, size])]
    outputs = [
        helper.make_tensor_value_info("features", TensorProto.FLOAT, ["s77", 10]),
        helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["s77", 5]),
    ]
    return _model(nodes, inputs, outputs, inits, name="symbolic_batch")


def nonzero_model() -> onnx.ModelProto:
    """Keeps the positive entries of x [4, 6]: NonZero makes the output size data-dependent.

    Outputs: positives [nnz] (data-dependent), row_sum [4, 1] (sizes inferable from x's shape via
    Shape -> Slice -> Concat -> Reshape).
    """
    inits = [_i64("zero", [0]), _i64("one", [1]), _i64("minus_one", [-1]), _f32("fzero", 0.0)]
    nodes = [
        helper.make_node("Greater", ["x", "fzero"], ["mask"]),
        helper.make_node("NonZero", ["mask"], ["where"]),
        helper.make_node("Transpose", ["where"], ["where_t"], perm=[1, 0]),
        helper.make_node("GatherND", ["x", "where_t"], ["positives"]),
        helper.make_node("ReduceSum", ["x", "one"], ["sums"], keepdims=0),
        helper.make_node("Shape", ["x"], ["x_shape"]),
        helper.make_node("Slice", ["x_shape", "zero", "one"], ["rows"]),
        helper.make_node("Concat", ["rows", "one"], ["col_shape"], axis=0),
        helper.make_node("Reshape", ["sums", "col_shape"], ["row_sum"]),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])]
    outputs = [
        helper.make_tensor_value_info("positives", TensorProto.FLOAT, ["nnz"]),
        helper.make_tensor_value_info("row_sum", TensorProto.FLOAT, [4, 1]),
    ]
    return _model(nodes, inputs, outputs, inits, name="nonzero")


def write_all(folder: str | Path) -> list[Path]:
    """Write every demo model into `folder`; returns the paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    models = {
        "baked_merger": baked_merger(),
        "baked_merger_folded": baked_merger(folded_table=True),
        "dynamic_encoder": dynamic_encoder(),
        "fpn": fpn(),
        "fpn_baked_batch": fpn(baked_batch=True),
        "fpn_naive_batch": naive_batch_rewrite(fpn()),
        "fpn_stale": stale_value_info(fpn()),
        "batch_baked_ops": batch_baked_ops(),
        "symbolic_batch": symbolic_batch(),
        "nonzero": nonzero_model(),
    }
    paths = []
    for name, model in models.items():
        path = folder / f"{name}.onnx"
        onnx.save(model, str(path))
        paths.append(path)
    return paths


def write_real(folder: str | Path, fixtures: str | Path) -> list[Path]:
    """Write what the README's real-detector example starts from: `scrfd_500m_naive.onnx`, the
    naive batch script (`naive_fixed_batch`, batch 2) applied to `fixtures`/scrfd_500m.onnx."""
    source = Path(fixtures) / "scrfd_500m.onnx"
    if not source.is_file():
        sys.exit(f"error: {source} not found; give the folder holding the real detectors (../shared/fixtures/real)")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "scrfd_500m_naive.onnx"
    onnx.save(naive_fixed_batch(onnx.load(str(source)), 2), str(path))
    return [path]


if __name__ == "__main__":
    from vlm_vision_onnx.core.errors import Parser

    parser = Parser(prog="python -m surgery.examples",
                    description="Write the demo models that show each problem `python -m surgery` fixes into DIR.")
    parser.add_argument("folder", metavar="DIR")
    parser.add_argument("--real", metavar="FIXTURES",
                        help="instead: the real-detector example (scrfd_500m_naive.onnx) from the folder holding "
                             "the real detectors (../shared/fixtures/real)")
    args = parser.parse_args()
    written = write_real(args.folder, args.real) if args.real else write_all(args.folder)
    for path in written:
        print(path)
