"""freeze: a fully static model at given input shapes, shape arithmetic folded, verified by running.

Steps: set every input to its static shape; drop every shape claim; fold with onnxscript's
optimizer (Shape of a static tensor becomes a constant, so Shape -> Gather -> Concat -> Reshape
chains collapse into constant shapes); re-infer with ONNX shape inference; declare any shape that
inference could not derive from a probe run, unless it is data-dependent (NonZero...), which
cannot be frozen. The result declares a static shape for every value, and `verify` checks every
declaration and every output against the original at the same inputs.
"""

from __future__ import annotations

import logging

import numpy as np
import onnx_ir as ir
import onnxscript.optimizer

from surgery import dataflow
from surgery.fix_dims import check_claims, infer
from surgery.probe import drop_shape_claims, neutral, observe
from surgery.run import compare_outputs, fmt_dims, try_run
from vlm_vision_onnx.core.errors import CheckFailed, UsageError

SHAPE_OPS = ("Shape", "Size")


def _static(shape: ir.Shape | None) -> bool:
    return shape is not None and all(isinstance(d, int) for d in shape)


def non_static(model: ir.Model) -> list[str]:
    """Every value of the main graph without a fully static declared shape, as 'name [dims]'."""
    out = []
    for value in list(model.graph.inputs) + [v for n in model.graph for v in n.outputs]:
        if value.shape is None:
            out.append(f"{value.name} (no shape)")
        elif not _static(value.shape):
            out.append(f"{value.name} {fmt_dims([d if isinstance(d, int) else d.value for d in value.shape])}")
    return out


def freeze(model: ir.Model, shapes: dict[str, tuple[int, ...]], feeds: dict[str, np.ndarray]) -> tuple[ir.Model, dict]:
    """Freeze `model` at `shapes` (input name -> shape; every non-static input must be given).

    Args:
        model: the model (not modified).
        shapes: the static input shapes.
        feeds: inputs at those shapes, used to observe shapes inference cannot derive.

    Returns:
        (frozen model, report: dims fixed, shape ops before/after folding, shapes filled by probe).

    Raises:
        UsageError: an input with a non-static dim has no shape in `shapes`.
        CheckFailed: data-dependent sizes, or the model does not run at `shapes`.
    """
    missing = [v.name for v in model.graph.inputs if not _static(v.shape) and v.name not in shapes]
    if missing:
        raise UsageError(f"input(s) {', '.join(missing)} have non-static dims; give each one --shape NAME=AxBx...")
    dependent = [i["node"] for i in dataflow.classify(model)["nodes"]["data-dependent"]]
    if dependent:
        raise CheckFailed(f"cannot freeze: output sizes of {', '.join(dependent)} depend on the data")
    new = model.clone()
    fixed = {}
    for value in new.graph.inputs:
        if value.name in shapes:
            before = [d if isinstance(d, int) else getattr(d, "value", None) for d in (value.shape or [])]
            value.shape = ir.Shape(shapes[value.name])
            fixed[value.name] = f"{fmt_dims(before)} -> {fmt_dims(shapes[value.name])}"
    drop_shape_claims(new)
    shape_ops_before = sum(1 for n in new.graph if n.op_type in SHAPE_OPS)
    nodes_before = len(new.graph)
    logging.getLogger("onnxscript").setLevel(logging.ERROR)
    onnxscript.optimizer.optimize(new, num_iterations=3)
    infer(new)
    unknown = [v for n in new.graph for v in n.outputs if not _static(v.shape)]
    filled = []
    if unknown:
        real, _, error = observe(new, feeds, [v.name for v in unknown])
        if real is None:
            raise CheckFailed(f"the model fails at the frozen shapes: {error}")
        for value in unknown:
            if value.name in real:
                shape, dtype = real[value.name]
                value.shape = ir.Shape(shape)
                value.dtype = value.dtype or ir.DataType.from_numpy(dtype)
                filled.append(value.name)
    return new, {
        "inputs": fixed,
        "shape_ops": {"before": shape_ops_before, "after": sum(1 for n in new.graph if n.op_type in SHAPE_OPS)},
        "nodes": {"before": nodes_before, "after": len(new.graph)},
        "filled_from_probe": filled,
        "non_static": non_static(new),
    }


def verify(frozen: ir.Model, original: ir.Model, feeds: dict[str, np.ndarray]) -> tuple[bool, list[str]]:
    """Frozen model runs at `feeds`, every declared shape is true, outputs match the original."""
    left = non_static(frozen)
    if left:
        return False, [f"values without a static shape: {', '.join(left[:5])}"]
    got, error = try_run(frozen, feeds)
    if got is None:
        return False, [f"fails: {error}"]
    wrong = check_claims(frozen, feeds)
    if wrong:
        return False, [f"declared shapes wrong: {'; '.join(wrong[:5])}"]
    ref, error = try_run(original, feeds)
    if ref is None:
        ref, error = try_run(neutral(original), feeds)
    if ref is None:
        return False, [f"the original fails at these shapes, nothing to compare with: {error}"]
    ok, lines = compare_outputs(got, ref)
    count = len(list(frozen.graph.inputs)) + sum(len(n.outputs) for n in frozen.graph)
    return ok, [f"all {count} values static and true at the run", "vs the original: " + "; ".join(lines)]
