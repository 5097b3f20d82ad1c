"""set-batch: change the batch of a model, right for multi-scale models, verified per sample.

A naive batch script writes one symbol on every unknown dim and leaves stale shapes behind; ORT
then plans memory wrongly ("Shape mismatch attempting to re-use buffer"). A trace at batch 1 also
bakes the batch into shape inputs (SCRFD's Resize sizes `[1, 16, 40, 40]`). This pass instead:
- renames input symbols that stand for different sizes (as fix-dims does);
- rewrites batch constants in shape inputs (Resize sizes, Reshape, Expand, Tile, ConstantOfShape,
  Slice ends) to follow the input's batch at run time (`surgery.batch_constants`);
- finds where each output keeps its samples by running at batch b and 2b (`surgery.batch_layout`):
  axis 0, axis 0 multiplied (`[-1, k]` heads: `[8·12800, 1]`), or another axis, contiguous or
  interleaved; with --contiguous an interleaving Transpose keeps the batch first (`surgery.batch_contiguous`);
- sets axis 0 of every input to N (or to the symbol `batch` for --batch dynamic), drops every output
  shape and all value_info and re-infers them with ONNX shape inference.
`verify` then runs the result at the new batch, splits each output by its layout and compares each
chunk with that chunk of samples run through the original.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from surgery.batch_constants import debatch
from surgery.batch_contiguous import make_contiguous
from surgery.batch_layout import Layout, compare_chunks, find_layouts
from surgery.fix_dims import check_claims, infer, rename_input_symbols
from surgery.probe import conflicts, declared, drop_shape_claims, neutral, observe, probe_feeds
from surgery.run import open_session, random_array, try_run
from vlm_vision_onnx.core.errors import CheckFailed, UsageError
from vlm_vision_onnx.core.session import owned


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


def probe_batch_of(model: ir.Model, probe_shapes: dict[str, tuple[int, ...]]) -> int:
    """The batch the original runs at: its static batch, else axis 0 of the --probe shapes (all
    equal), else 1.

    Raises:
        UsageError: --probe shapes disagree on axis 0 for a model with a symbolic batch.
    """
    before = old_batch(model)
    if before is not None:
        return before
    given = {shape[0] for shape in probe_shapes.values() if shape}
    if len(given) > 1:
        raise UsageError(f"--probe shapes have different batches {sorted(given)}; give every input the same axis 0")
    return given.pop() if given else 1


def set_batch(model: ir.Model, batch: int | None, probe_shapes: dict[str, tuple[int, ...]],
              contiguous: bool = False) -> tuple[ir.Model, dict]:
    """Rewrite `model` for batch `batch` (None: dynamic).

    Args:
        model: the model (not modified); axis 0 of every input is its batch.
        batch: the new static batch, or None for a symbolic `batch`.
        probe_shapes: sizes of symbolic input dims; their axis 0 is the old batch when the model's
            batch is symbolic (`probe_batch_of`), else replaced by the static batch.
        contiguous: outputs whose samples interleave get each sample's rows in one block
            (`surgery.batch_contiguous`).

    Returns:
        (new model, report): `old_batch`, `new_batch`, `probe_batch` (b), `constants` (batch constants
        rewritten, as debake findings), `renamed_input_dims`, `layouts` ({output: Layout}), `probe`,
        and with `contiguous` `transposes` (rewritten) and `left_interleaved`.

    Raises:
        CheckFailed: the model does not run at its old batch even without shape claims, or an output
            has no batch layout that the samples run one by one confirm.
    """
    before = old_batch(model)
    probe_batch = probe_batch_of(model, probe_shapes)
    shapes = {k: (probe_batch, *v[1:]) for k, v in probe_shapes.items()}
    feeds = probe_feeds(model, shapes)
    feeds = {k: v if v.shape[0] == probe_batch else v[:probe_batch] for k, v in feeds.items()}
    real, _, error = observe(model, feeds)
    if real is None:
        raise CheckFailed(f"the model fails at its batch {probe_batch} even without shape claims: {error}")
    new = model.clone()
    renamed = rename_input_symbols(new, real, {c["symbol"] for c in conflicts(declared(model), real)})
    findings, _ = debatch(new, feeds, new.graph.inputs[0].name)
    drop_shape_claims(new)
    infer(new)
    reference = model if try_run(model, feeds)[0] is not None else neutral(model)
    layouts = find_layouts(new, reference, feeds)
    transposes, left = ([], []) if not contiguous else make_contiguous(new, layouts)
    if transposes:
        drop_shape_claims(new)
        infer(new)
        layouts = find_layouts(new, reference, feeds)
    target = batch if batch is not None else "batch"
    for value in new.graph.inputs:
        value.shape = ir.Shape([target, *list(value.shape)[1:]])
    drop_shape_claims(new)
    infer(new)
    return new, {"old_batch": before if before is not None else "symbolic", "new_batch": target,
                 "probe_batch": probe_batch, "constants": [f.to_json() for f in findings],
                 "renamed_input_dims": renamed, "layouts": layouts,
                 **({"transposes": transposes, "left_interleaved": left} if contiguous else {}),
                 "probe": {k: list(v.shape) for k, v in feeds.items()}}


def verify(new: ir.Model, original: ir.Model, probe: dict[str, list[int]], batch: int, chunk: int,
           layouts: dict[str, Layout] | None = None, seed: int = 0) -> tuple[bool, list[str]]:
    """Run `new` at `batch`; run each chunk of `chunk` samples through `original`; compare chunk by chunk.

    `probe` gives the input shapes at the old batch (axis 0 is replaced); `layouts` says where each
    output keeps its samples (default: `chunk` rows of axis 0 per chunk). The original runs as
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
    refs = []
    with open_session(reference) as session:
        names = [o.name for o in session.get_outputs()]
        for start in range(0, batch, chunk):
            part = {k: v[start:start + chunk] for k, v in feeds.items()}
            refs.append(dict(zip(names, owned(session.run(names, part)))))
    if layouts is None:
        layouts = {name: Layout(0, refs[0][name].shape[0], refs[0][name].shape[0]) for name in names}
    ok, worst = compare_chunks(got, refs, layouts)
    lines.append(f"batch {batch}: {batch // chunk} chunk(s) of {chunk} vs the original: "
                 + "; ".join(f"{k} {v}" for k, v in worst.items()))
    return ok, lines
