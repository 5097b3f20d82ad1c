"""Outlier input channels of the MatMuls kept in fp32: LLM.int8()'s mixed-precision decomposition.

Trained ViTs carry a few hidden channels whose activations are 20-100x the rest (`quantize.outliers`
makes a copy of the model that has them). A quantizer that gives a whole activation tensor one scale
(dynamic INT8), or a block of 32 channels one scale (MatMulNBits accuracy level 4), then loses every
other channel's resolution, and the weight rows that multiply those channels dominate each output, so
their rounding error does too. This pass takes the outlier channels out of the quantized product:
for each quantizable MatMul Y = X @ W (X [..., K], W [K, M]) whose input has outlier channels C,

    Y = MatMul(X * keep, W) + MatMul(Gather(X, C, axis=-1), W[C, :])      keep = 1, except 0 at C

The first MatMul is the original node (same name, same weight), quantized as before but seeing only
the normal channels; the second is tiny ([..., |C|] x [|C|, M]), is named `<node>` + SUFFIX and stays
fp32. The Add writes the original output tensor, so everything downstream is unchanged.

Channels are found by calibration, from the model's own activations: one fp32 run of the model at the
given inputs with every quantizable MatMul's input tapped; channel k of a MatMul's input is an
outlier when max |X[..., k]| over all tokens exceeds `ratio` x the median over k of those maxima. A
model without such channels (random weights have none) is left unchanged.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper

from core import onnx_io
from core.session import open_session
from quantize import quantizers

#: Name suffix of the fp32 MatMul that takes a node's outlier channels (the quantizers skip it).
SUFFIX = "/outlier_channels"
#: A channel whose max |activation| exceeds this many times the median channel's is an outlier.
DEFAULT_RATIO = 6.0
#: At most this fraction of a MatMul's input channels is taken out (the largest first).
MAX_FRACTION = 1 / 16

Quantizer = Callable[[Path, Path, list[str]], None]


def tap(model_file: Path, names: list[str], feeds: list[dict], threads: int) -> dict[str, list[np.ndarray]]:
    """{tensor name: [its value at each feed]} for intermediate tensors of the main graph.

    The graph is saved beside `model_file` (a new temporary name) with `names` as extra outputs (external weights resolve only
    within the model's folder; the weights themselves are not copied) and run once per feed.
    """
    proto = onnx.load(str(model_file), load_external_data=False)
    outputs = {o.name for o in proto.graph.output}
    proto.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None)
                              for n in sorted(set(names) - outputs))
    fd, name = tempfile.mkstemp(prefix=".tapped-", suffix=".onnx", dir=model_file.parent)  # a name nobody has
    os.close(fd)
    tapped = Path(name)
    onnx.save(proto, str(tapped))
    del proto
    try:
        session = open_session(tapped, threads)
        got = [o.name for o in session.get_outputs()]
        values: dict[str, list[np.ndarray]] = {n: [] for n in names}
        for feed in feeds:
            for name, value in zip(got, session.run(None, feed)):
                if name in values:
                    values[name].append(value)
        del session
    finally:
        tapped.unlink()
    return values


def outliers_of(values: list[np.ndarray], ratio: float) -> list[int]:
    """Outlier channels (last axis, ascending) of one tensor seen at several inputs: at most MAX_FRACTION of
    them, the largest kept when more pass the ratio."""
    peak = np.max([np.abs(v.reshape(-1, v.shape[-1])).max(axis=0) for v in values], axis=0)
    median = float(np.median(peak))
    found = np.flatnonzero(peak > ratio * median) if median > 0 else np.array([], dtype=np.int64)
    found = found[np.argsort(-peak[found])][: max(1, int(len(peak) * MAX_FRACTION))]
    return sorted(int(k) for k in found)


def find(model_file: Path, feeds: list[dict], threads: int, ratio: float) -> dict[str, list[int]]:
    """{MatMul node name: its outlier input channels} of every quantizable MatMul that has any."""
    model = onnx_io.load(model_file)
    inputs = {node.name: node.inputs[0].name for node, _ in quantizers.quantizable(model)}
    del model
    values = tap(model_file, sorted(set(inputs.values())), feeds, threads)
    found = {node: outliers_of(values[x], ratio) for node, x in inputs.items()}
    return {node: channels for node, channels in found.items() if channels}


def split(model: ir.Model, channels: dict[str, list[int]]) -> list[str]:
    """Rewrite `model` in place (see the module docstring); returns the names of the fp32 MatMuls added."""
    added = []
    for node, _ in quantizers.quantizable(model):
        picked = channels.get(node.name)
        if not picked:
            continue
        x, weight, y = node.inputs[0], node.inputs[1], node.outputs[0]
        w = weight.const_value.numpy()
        keep = np.ones(w.shape[0], dtype=np.float32)
        keep[picked] = 0
        keep_v = _constant(model, f"{node.name}/normal_channels", keep)
        index_v = _constant(model, f"{node.name}/outlier_index", np.array(picked, dtype=np.int64))
        rows_v = _constant(model, f"{weight.name}/outlier_rows", np.ascontiguousarray(w[picked]))
        masked = ir.node("Mul", [x, keep_v], name=f"{node.name}/mask_outliers")
        gathered = ir.node("Gather", [x, index_v], attributes={"axis": -1}, name=f"{node.name}/gather_outliers")
        side = ir.node("MatMul", [gathered.outputs[0], rows_v], name=node.name + SUFFIX)
        uses = list(y.uses())
        was_output = [i for i, v in enumerate(model.graph.outputs) if v is y]
        add = ir.node("Add", [y, side.outputs[0]], name=f"{node.name}/add_outliers")
        name = y.name
        y.name = f"{name}/normal"
        add.outputs[0].name = name
        add.outputs[0].shape, add.outputs[0].type = y.shape, y.type
        for user, index in uses:
            user.replace_input_with(index, add.outputs[0])
        for i in was_output:
            model.graph.outputs[i] = add.outputs[0]
        node.replace_input_with(0, masked.outputs[0])
        model.graph.insert_before(node, [masked, gathered, side])
        model.graph.insert_after(node, [add])
        added.append(side.name)
    return added


def _constant(model: ir.Model, name: str, array: np.ndarray) -> ir.Value:
    value = ir.Value(name=name, const_value=ir.tensor(array, name=name))
    value.shape, value.type = ir.Shape(array.shape), ir.TensorType(ir.DataType.from_numpy(array.dtype))
    model.graph.register_initializer(value)
    return value


def keeping_outliers_fp32(quantize: Quantizer, feeds: list[dict], threads: int, ratio: float,
                          record: dict[str, dict[str, list[int]]]) -> Quantizer:
    """`quantize` with each input model's outlier channels split off into fp32 MatMuls first.

    Calibrates every model it is given at `feeds` (once per file), writes the split model to a temporary
    folder beside the output and quantizes that, skipping the added fp32 MatMuls. `record[src file
    name]` gets the channels found ({node: channels}; empty when none, and the model is then quantized
    as it is). A model whose inputs are not those of `feeds` (the outlier check's one-MatMul models, which
    keep their node's name) cannot be calibrated with them: it gets the channels last found for its nodes.
    """
    found: dict[tuple, dict[str, list[int]]] = {}
    last: dict[str, list[int]] = {}
    names = set(feeds[0]) if feeds else set()

    def run(src: Path, dst: Path, skip: list[str]) -> None:
        key = (str(src), src.stat().st_mtime_ns, src.stat().st_size)
        if key not in found:
            graph = onnx.load(str(src), load_external_data=False).graph
            inputs = {v.name for v in graph.input} - {t.name for t in graph.initializer}
            if inputs == names:
                found[key] = record[src.name] = find(src, feeds, threads, ratio)
                last.clear()
                last.update(found[key])
            else:
                return quantize_split(src, dst, skip, {n.name: last[n.name] for n in graph.node if n.name in last})
        quantize_split(src, dst, skip, found[key])

    def quantize_split(src: Path, dst: Path, skip: list[str], channels: dict[str, list[int]]) -> None:
        if not channels:
            quantize(src, dst, skip)
            return
        with tempfile.TemporaryDirectory(prefix=".outlier-split-", dir=dst.parent) as tmp:
            model = onnx_io.load(src)
            added = split(model, {n: c for n, c in channels.items() if n not in skip})
            split_file = Path(tmp) / onnx_io.MODEL_FILE
            onnx_io.save(model, split_file)
            del model
            quantize(split_file, dst, skip + added)

    return run
