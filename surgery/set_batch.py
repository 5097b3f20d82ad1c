"""set-batch: change the batch of a model, right for multi-scale models, verified per sample.

A naive batch script writes one symbol on every unknown dim and leaves stale shapes behind; ORT
then plans memory wrongly ("Shape mismatch attempting to re-use buffer"). This pass instead:
- sets axis 0 of every input to N (or to the symbol `batch` for --batch dynamic);
- renames input symbols that stand for different sizes (as fix-dims does);
- turns a Reshape's leading constant equal to the old batch into 0 ("copy the input's dim 0")
  when the Reshape's input really has that batch as its dim 0: `[1, 4, -1]` -> `[0, 4, -1]`;
- drops every output shape and all value_info and re-infers them with ONNX shape inference.
`verify` then runs the result at the new batch and each sample (or chunk of the old batch) through
the original, and compares.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx_ir.passes.common import RemoveUnusedNodesPass

from surgery.fix_dims import check_claims, infer, rename_input_symbols
from core.errors import CheckFailed, UsageError
from surgery.probe import conflicts, declared, drop_shape_claims, neutral, observe, probe_feeds
from surgery.run import compare_outputs, open_session, random_array, try_run


def old_batch(model: ir.Model) -> int | None:
    """The static batch (axis 0) shared by all inputs, None when it is symbolic.

    Raises:
        UsageError: inputs disagree on a static batch, or an input is a scalar.
    """
    batches = set()
    for value in model.graph.inputs:
        if value.shape is None or len(value.shape) == 0:
            raise UsageError(f"input '{value.name}' has no axis 0 to batch; set-batch needs a batch axis on every input")
        dim = value.shape[0]
        batches.add(dim if isinstance(dim, int) else None)
    if len(batches) > 1 and None not in batches:
        raise UsageError(f"inputs have different static batches {sorted(batches)}; set-batch needs one batch")
    return next(iter(batches)) if len(batches) == 1 else None


def _reshape_leading_batch(model: ir.Model, real: dict, batch: int) -> list[str]:
    """Rule: Reshape shape [b, ...] with b == old batch == input's real dim 0 -> [0, ...], in place."""
    changed = []
    graph = model.graph
    for node in list(graph):
        if node.op_type != "Reshape" or node.attributes.get_int("allowzero", 0) != 0:
            continue
        tensor = ir.convenience.get_const_tensor(node.inputs[1])
        data = real.get(node.inputs[0].name)
        if tensor is None or data is None or not data[0]:
            continue
        values = tensor.numpy().reshape(-1).tolist()
        if values and values[0] == batch and data[0][0] == batch:
            const = ir.node("Constant", [], attributes={"value": ir.tensor(np.array([0] + values[1:], np.int64))})
            graph.insert_before(node, const)
            node.replace_input_with(1, const.outputs[0])
            changed.append(f"Reshape '{node.name or node.outputs[0].name}': {values} -> {[0] + values[1:]}")
    RemoveUnusedNodesPass()(model)
    return changed


def set_batch(model: ir.Model, batch: int | None, probe_shapes: dict[str, tuple[int, ...]]) -> tuple[ir.Model, dict]:
    """Rewrite `model` for batch `batch` (None: dynamic).

    Args:
        model: the model (not modified); axis 0 of every input is its batch.
        batch: the new static batch, or None for a symbolic `batch`.
        probe_shapes: sizes of non-batch symbolic input dims (their axis 0 is replaced).

    Returns:
        (new model, report with the changes and the probe batch).

    Raises:
        CheckFailed: the model does not run at its old batch even without shape claims.
    """
    before = old_batch(model)
    probe_batch = before or 1
    shapes = {k: (probe_batch, *v[1:]) for k, v in probe_shapes.items()}
    feeds = probe_feeds(model, shapes)
    feeds = {k: v if v.shape[0] == probe_batch else v[:probe_batch] for k, v in feeds.items()}
    names = list(declared(model)) + [n.inputs[0].name for n in model.graph if n.op_type == "Reshape"]
    real, _, error = observe(model, feeds, names)
    if real is None:
        raise CheckFailed(f"the model fails at its batch {probe_batch} even without shape claims: {error}")
    new = model.clone()
    reshapes = _reshape_leading_batch(new, real, probe_batch)
    renamed = rename_input_symbols(new, real, {c["symbol"] for c in conflicts(declared(model), real)})
    target = batch if batch is not None else "batch"
    for value in new.graph.inputs:
        value.shape = ir.Shape([target, *list(value.shape)[1:]])
    drop_shape_claims(new)
    infer(new)
    return new, {"old_batch": before if before is not None else "symbolic", "new_batch": target,
                 "probe_batch": probe_batch, "reshapes": reshapes, "renamed_input_dims": renamed,
                 "probe": {k: list(v.shape) for k, v in feeds.items()}}


def verify(new: ir.Model, original: ir.Model, probe: dict[str, list[int]], batch: int, chunk: int,
           seed: int = 0) -> tuple[bool, list[str]]:
    """Run `new` at `batch`; run each chunk of `chunk` samples through `original`; compare.

    `probe` gives the input shapes at the old batch (axis 0 is replaced). The original runs as
    written when it can, else its neutral copy (same computation, no shape claims).
    """
    rng = np.random.default_rng(seed)
    specs = {v.name: int(v.dtype.value) for v in new.graph.inputs}
    feeds = {k: random_array(specs[k], (batch, *shape[1:]), rng) for k, shape in probe.items()}
    got, error = try_run(new, feeds)
    if got is None:
        return False, [f"batch {batch}: fails: {error}"]
    lines = [f"batch {batch}: runs; outputs " + ", ".join(f"{k} {list(v.shape)}" for k, v in got.items())]
    leftovers = check_claims(new, feeds)
    if leftovers:
        return False, lines + [f"batch {batch}: shape claims still wrong: {'; '.join(leftovers)}"]
    first = {k: v[:chunk] for k, v in feeds.items()}
    reference = original if try_run(original, first)[0] is not None else neutral(original)
    worst, ok = {}, True
    with open_session(reference) as session:
        names = [o.name for o in session.get_outputs()]
        for start in range(0, batch, chunk):
            part = {k: v[start:start + chunk] for k, v in feeds.items()}
            ref = dict(zip(names, session.run(names, part)))
            sliced = {k: v[start:start + chunk] for k, v in got.items()}
            match, texts = compare_outputs(sliced, ref)
            ok &= match
            for text in texts:
                name, _, rest = text.partition(": ")
                if not match or name not in worst:
                    worst[name] = rest
    lines.append(f"batch {batch}: {batch // chunk} chunk(s) of {chunk} vs the original: "
                 + "; ".join(f"{k} {v}" for k, v in worst.items()))
    return ok, lines
