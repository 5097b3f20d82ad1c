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

from core.session import open_session, owned


def tap(model_file: Path, names: list[str], feeds: list[dict], threads: int,
        reduce: Callable[[np.ndarray], np.ndarray] | None = None,
        each: Callable[[str, np.ndarray], None] | None = None) -> dict[str, list[np.ndarray]]:
    """{tensor name: [its value at each feed]} for intermediate tensors of the main graph (`reduce(value)`
    instead of the value when given: what is kept of a run stays small; with `each`, `each(name, value)` is
    called instead and nothing is kept; `reduce` and `each` get ORT's own buffer, to read, not to keep).

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
