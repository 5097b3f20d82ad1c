"""Outlier channels of the MatMuls kept in fp32: LLM.int8()'s mixed-precision decomposition, both sides.

Trained ViTs carry a few hidden channels whose activations are 20-100x the rest (`quantize.outliers`
makes a copy of the model that has them). A quantizer that gives a whole activation tensor one scale
(dynamic INT8), or a block of 32 channels one scale (MatMulNBits accuracy level 4), then loses every
other channel's resolution, and the weight rows that multiply those channels dominate each output, so
their rounding error does too. This pass takes the outlier channels out of the quantized product, on
both sides of each quantizable MatMul Y = X @ W (X [..., K], W [K, M]):

- input channels C of X (the MatMuls reading the residual stream through a LayerNorm):
      Y = MatMul(X * keep, W) + MatMul(Gather(X, C, axis=-1), W[C, :])      keep = 1, except 0 at C
  the second MatMul is tiny ([..., |C|] x [|C|, M]), named `<node>` + SUFFIX, fp32.
- output columns D of Y (the MatMuls writing the residual stream: patch embedding, attention output,
  MLP down): those columns hold most of the stream's norm, so their relative rounding error is what
  the stream's per-token cosine sees, and every later block reads it back through the outlier input
  channels (measured on the outlier-stress copy at 2B width, 8 blocks, weights rounded to int8 per column and
  activations exact: the stream's min per-token cosine 0.987 with the input split alone, 0.996 with
  both sides):
      Y = MatMul(X, W * keep_columns) + MatMul(MatMul(X, W[:, D]), E)        E [|D|, M] one-hot at D
  `<node>` + COLUMNS_SUFFIX ([..., K] x [K, |D|]) and `<node>` + SCATTER_SUFFIX ([..., |D|] x [|D|, M]),
  both fp32 and small (|D| / M of the MatMul's work each).

The quantized MatMul is the original node (same name), seeing only the normal channels; Adds write the
original output tensor, so everything downstream is unchanged.

Channels are found by calibration, from the model's own activations: one fp32 run of the model at the
given inputs with every quantizable MatMul's input and output tapped; channel k of a tensor is an outlier
when max |value[..., k]| over all tokens exceeds `ratio` x the median over k of those maxima. A model
without such channels (random weights have none) is left unchanged.
"""

from __future__ import annotations

import gc
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir

from quantize import quantizers
from vlm_vision_onnx.core import onnx_io, taps

#: Name suffix of the fp32 MatMul that takes a node's outlier input channels (the quantizers skip it).
SUFFIX = "/outlier_channels"
#: Name suffixes of the fp32 MatMuls computing a node's outlier output columns and putting them in place.
COLUMNS_SUFFIX = "/outlier_columns"
SCATTER_SUFFIX = "/outlier_columns_scatter"
#: What `find` returns: {"inputs": {node: input channels}, "outputs": {node: output columns}}, nodes with any.
Found = dict[str, dict[str, list[int]]]
SIDES = ("inputs", "outputs")
#: A channel whose max |activation| exceeds this many times the median channel's is an outlier.
DEFAULT_RATIO = 6.0
#: At most this fraction of a MatMul's input channels is taken out (the largest first).
MAX_FRACTION = 1 / 16

Quantizer = Callable[[Path, Path, list[str]], None]


def channel_peaks(value: np.ndarray) -> np.ndarray:
    """max |value| per channel (last axis) over every other axis: [channels]."""
    return np.abs(value.reshape(-1, value.shape[-1])).max(axis=0)


def outliers_of(values: list[np.ndarray], ratio: float) -> list[int]:
    """Outlier channels (last axis, ascending) of one tensor seen at several inputs (the values, or their
    `channel_peaks`): at most MAX_FRACTION of them, the largest kept when more pass the ratio."""
    peak = np.max([channel_peaks(v) for v in values], axis=0)
    median = float(np.median(peak))
    found = np.flatnonzero(peak > ratio * median) if median > 0 else np.array([], dtype=np.int64)
    found = found[np.argsort(-peak[found])][: max(1, int(len(peak) * MAX_FRACTION))]
    return sorted(int(k) for k in found)


def find(model_file: Path, feeds: list[dict], threads: int, ratio: float) -> Found:
    """{"inputs": {node: outlier input channels}, "outputs": {node: outlier output columns}} of every
    quantizable MatMul that has any (one tapped run per feed)."""
    model = onnx_io.load(model_file)
    tensors = {node.name: (node.inputs[0].name, node.outputs[0].name) for node, _ in quantizers.quantizable(model)}
    del model
    peaks = taps.tap(model_file, sorted({name for pair in tensors.values() for name in pair}), feeds, threads,
                     channel_peaks=True)
    found: Found = {side: {} for side in SIDES}
    for node, pair in tensors.items():
        for side, name in zip(SIDES, pair):
            channels = outliers_of(peaks[name], ratio)
            if channels:
                found[side][node] = channels
    return found


def is_empty(found: Found) -> bool:
    return not any(found.get(side) for side in SIDES)


def fp32_reasons(found: Found) -> dict[str, str]:
    """{name of an fp32 MatMul `split` adds: why it is there} (for the stage report)."""
    return {**{n + SUFFIX: "outlier input channels (fp32)" for n in found.get("inputs", {})},
            **{n + suffix: "outlier output columns (fp32)" for n in found.get("outputs", {})
               for suffix in (COLUMNS_SUFFIX, SCATTER_SUFFIX)}}


def split(model: ir.Model, found: Found) -> list[str]:
    """Rewrite `model` in place (see the module docstring); returns the names of the fp32 MatMuls added.

    Output columns first (their fp32 product reads the node's whole input), then input channels (from the
    weight with those columns zeroed, so nothing is counted twice)."""
    added = []
    for node, _ in quantizers.quantizable(model):
        columns = found.get("outputs", {}).get(node.name)
        if columns:
            added += _split_columns(model, node, columns)
        channels = found.get("inputs", {}).get(node.name)
        if channels:
            added += _split_inputs(model, node, channels)
    return added


def _split_inputs(model: ir.Model, node: ir.Node, picked: list[int]) -> list[str]:
    x, weight = node.inputs[0], node.inputs[1]
    w = weight.const_value.numpy()
    keep = np.ones(w.shape[0], dtype=np.float32)
    keep[picked] = 0
    keep_v = _constant(model, f"{node.name}/normal_channels", keep)
    index_v = _constant(model, f"{node.name}/outlier_index", np.array(picked, dtype=np.int64))
    rows_v = _constant(model, f"{node.name}/outlier_rows", np.ascontiguousarray(w[picked]))
    masked = ir.node("Mul", [x, keep_v], name=f"{node.name}/mask_outliers")
    gathered = ir.node("Gather", [x, index_v], attributes={"axis": -1}, name=f"{node.name}/gather_outliers")
    side = ir.node("MatMul", [gathered.outputs[0], rows_v], name=node.name + SUFFIX)
    node.replace_input_with(0, masked.outputs[0])
    model.graph.insert_before(node, [masked, gathered, side])
    _add_to_output(model, node, side.outputs[0], f"{node.name}/add_outliers")
    return [side.name]


def _split_columns(model: ir.Model, node: ir.Node, picked: list[int]) -> list[str]:
    x, weight = node.inputs[0], node.inputs[1]
    w = weight.const_value.numpy()
    normal = w.copy()
    normal[:, picked] = 0
    onehot = np.zeros((len(picked), w.shape[1]), dtype=w.dtype)
    onehot[np.arange(len(picked)), picked] = 1
    columns_v = _constant(model, f"{node.name}/outlier_columns", np.ascontiguousarray(w[:, picked]))
    onehot_v = _constant(model, f"{node.name}/outlier_columns_onehot", onehot)
    if len(weight.uses()) == 1 and weight.name in model.graph.initializers:  # no fp32 copy of W left behind
        weight.const_value = ir.tensor(normal, name=weight.name)
    else:
        node.replace_input_with(1, _constant(model, f"{node.name}/normal_columns", normal))
    side = ir.node("MatMul", [x, columns_v], name=node.name + COLUMNS_SUFFIX)
    scatter = ir.node("MatMul", [side.outputs[0], onehot_v], name=node.name + SCATTER_SUFFIX)
    model.graph.insert_before(node, [side, scatter])
    _add_to_output(model, node, scatter.outputs[0], f"{node.name}/add_outlier_columns")
    return [side.name, scatter.name]


def _add_to_output(model: ir.Model, node: ir.Node, extra: ir.Value, name: str) -> None:
    """Make `node`'s output tensor (its name, its readers, a graph output) node's product + `extra`."""
    y = node.outputs[0]
    uses = list(y.uses())
    was_output = [i for i, v in enumerate(model.graph.outputs) if v is y]
    add = ir.node("Add", [y, extra], name=name)
    tensor_name = y.name
    y.name = f"{tensor_name}/partial"
    add.outputs[0].name = tensor_name
    add.outputs[0].shape, add.outputs[0].type = y.shape, y.type
    for user, index in uses:
        user.replace_input_with(index, add.outputs[0])
    for i in was_output:
        model.graph.outputs[i] = add.outputs[0]
    model.graph.insert_after(node, [add])


def _constant(model: ir.Model, name: str, array: np.ndarray) -> ir.Value:
    value = ir.Value(name=name, const_value=ir.tensor(array, name=name))
    value.shape, value.type = ir.Shape(array.shape), ir.TensorType(ir.DataType.from_numpy(array.dtype))
    model.graph.register_initializer(value)
    return value


def keeping_outliers_fp32(quantize: Quantizer, feeds: list[dict], threads: int, ratio: float,
                          record: dict[str, Found]) -> Quantizer:
    """`quantize` with each input model's outlier channels split off into fp32 MatMuls first.

    Calibrates every model it is given at `feeds` (once per file), writes the split model to a temporary
    folder beside the output and quantizes that, skipping the added fp32 MatMuls. `record[src file
    name]` gets what `find` found (the model is quantized as it is when nothing is). A model whose inputs
    are not those of `feeds` (the outlier check's one-MatMul models, which keep their node's name) cannot
    be calibrated with them: it gets the channels last found for its nodes.
    """
    found: dict[tuple, Found] = {}
    last: Found = {side: {} for side in SIDES}
    names = set(feeds[0]) if feeds else set()

    def run(src: Path, dst: Path, skip: list[str]) -> None:
        key = (str(src), src.stat().st_mtime_ns, src.stat().st_size)
        if key not in found:
            proto = onnx.load(str(src), load_external_data=False)
            graph = proto.graph
            if set(onnx_io.input_names(proto)) == names:
                found[key] = record[src.name] = find(src, feeds, threads, ratio)
                last.update(found[key])
            else:
                nodes = {n.name for n in graph.node}
                return quantize_split(src, dst, skip, {side: {n: c for n, c in last[side].items() if n in nodes}
                                                       for side in SIDES})
        quantize_split(src, dst, skip, found[key])

    def quantize_split(src: Path, dst: Path, skip: list[str], channels: Found) -> None:
        channels = {side: {n: c for n, c in channels.get(side, {}).items() if n not in skip} for side in SIDES}
        if is_empty(channels):
            quantize(src, dst, skip)
            return
        with tempfile.TemporaryDirectory(prefix=".outlier-split-", dir=dst.parent) as tmp:
            model = onnx_io.load(src)
            added = split(model, channels)
            split_file = Path(tmp) / onnx_io.MODEL_FILE
            onnx_io.save(model, split_file)
            del model
            gc.collect()  # an onnx-ir model is full of reference cycles: its weights go before the quantizer loads its copy
            quantize(split_file, dst, skip + added)

    return run
