"""Intermediate tensors of a model: the model run with some of its main-graph tensors as extra outputs.

What calibration needs (outlier channels, SmoothQuant maxima, GPTQ Hessians, per-MatMul sensitivity): one
session over a copy of the graph whose outputs include the tensors asked for; the weights are not copied.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from vlm_vision_onnx.core.session import open_session, owned


def tap(model_file: Path, names: list[str], feeds: list[dict], threads: int,
        reduce: Callable[[np.ndarray], np.ndarray] | None = None,
        each: Callable[[str, np.ndarray], None] | None = None,
        channel_peaks: bool = False) -> dict[str, list[np.ndarray]]:
    """{tensor name: [its value at each feed]} for intermediate tensors of the main graph (`reduce(value)`
    instead of the value when given: what is kept of a run stays small; with `each`, `each(name, value)` is
    called instead and nothing is kept; `reduce` and `each` get ORT's own buffer, to read, not to keep).
    `channel_peaks`: each tensor's max |value| per channel (last axis) [C] instead, computed in the graph
    (`_add_channel_peaks`): ORT hands every output of a run over at once, so whole tapped activations all
    live together; reduced in the graph they are a few KiB (Phi-4-multimodal at published dims: the outlier
    channel search over every MatMul's input and output peaked at 13.8 GB with whole tensors).

    The graph is saved beside `model_file` (a new temporary name) with `names` as extra outputs (external weights
    resolve only within the model's folder; the weights themselves are not copied) and run once per feed.
    """
    proto = onnx.load(str(model_file), load_external_data=False)
    if channel_peaks:
        peaks_of = _add_channel_peaks(proto, sorted(set(names)))  # {peaks output: tapped tensor}
        extra = list(peaks_of)
    else:
        extra = sorted(set(names) - {o.name for o in proto.graph.output})
    proto.graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in extra)
    fd, name = tempfile.mkstemp(prefix=".tapped-", suffix=".onnx", dir=model_file.parent)  # a name nobody has
    os.close(fd)
    tapped = Path(name)
    onnx.save(proto, str(tapped))
    del proto
    try:
        session = open_session(tapped, threads, in_order=channel_peaks)
        # the name each output is kept under (None: not kept; with channel_peaks only the peaks are)
        got = [peaks_of.get(o.name) if channel_peaks else o.name for o in session.get_outputs()]
        values: dict[str, list[np.ndarray]] = {n: [] for n in names}
        for feed in feeds:
            # ORT's outputs are views of its arena, valid while the session lives: `each` and `reduce` read them
            # as they are, and only a value kept whole is copied (`owned`). Copying every output first doubled
            # the memory of a tap of every MatMul input (gigabytes at Phi-4-multimodal's published dims).
            results = session.run(None, feed)
            for index, name in enumerate(got):
                value, results[index] = results[index], None
                if name in values:
                    if each is not None:
                        each(name, value)
                    else:
                        values[name].append(reduce(value) if reduce else owned([value])[0])
                del value
        del session
    finally:
        tapped.unlink()
    return values


PEAKS_SUFFIX = "::channel_peaks"


def _add_channel_peaks(proto: onnx.ModelProto, names: list[str]) -> dict[str, str]:
    """For each tensor x of `names` (rank >= 2), nodes computing ReduceMax(Abs(Reshape(x, [-1, C])), axis 0)
    [C] into `x + PEAKS_SUFFIX`; returns {that output: x}. Each reduction goes right after the node that makes x,
    and the session runs nodes in that order (`open_session(in_order=True)`): in ORT's default order the
    reductions ran after the whole model and kept every tapped tensor alive until then (Phi-4-multimodal's
    int8 stage at published dims, `python -m bench.export_bench --model phi-4-mm --stages int8`: 12,720 MiB in
    ORT's default order, 5270 MiB in graph order)."""
    minus_one = helper.make_tensor(PEAKS_SUFFIX + "/minus_one", TensorProto.INT64, [1], [-1])
    zero = helper.make_tensor(PEAKS_SUFFIX + "/zero", TensorProto.INT64, [1], [0])
    proto.graph.initializer.extend([minus_one, zero])
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 18)
    # ReduceMax takes its axes as an input from opset 18, as an attribute before
    reduce_max = (lambda x, y: helper.make_node("ReduceMax", [x, zero.name], [y], keepdims=0)) if opset >= 18 else \
        (lambda x, y: helper.make_node("ReduceMax", [x], [y], axes=[0], keepdims=0))

    def reduction(name: str) -> list[onnx.NodeProto]:
        out = name + PEAKS_SUFFIX
        return [helper.make_node("Shape", [name], [out + "/width"], start=-1),
                helper.make_node("Concat", [minus_one.name, out + "/width"], [out + "/rows"], axis=0),
                helper.make_node("Reshape", [name, out + "/rows"], [out + "/2d"]),
                helper.make_node("Abs", [out + "/2d"], [out + "/abs"]),
                reduce_max(out + "/abs", out)]

    wanted = set(names)
    produced = {out for node in proto.graph.node for out in node.output}
    nodes = [n for name in names if name not in produced for n in reduction(name)]  # graph inputs: first
    for node in proto.graph.node:
        nodes.append(node)
        nodes += [n for name in node.output if name in wanted for n in reduction(name)]
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    return {name + PEAKS_SUFFIX: name for name in names}
