"""Helpers shared by the pattern rules: constant lookups and applying a rule set with cleanup."""

import numpy as np
import onnx_ir as ir
import onnx_ir.passes.common as common_passes
from onnxscript.rewriter.pattern import RewriteRuleSet


def const(value: ir.Value | None) -> np.ndarray | None:
    """The value's constant content (initializer or Constant node), or None."""
    if value is None:
        return None
    tensor = ir.convenience.get_const_tensor(value)
    return None if tensor is None else tensor.numpy()


def is_const(value: ir.Value | None, expected) -> bool:
    """True when `value` is a constant equal to `expected` (any shape that flattens to it)."""
    array = const(value)
    return array is not None and np.array_equal(array.ravel(), np.ravel(expected))


def static_dims(value: ir.Value, rank: int) -> list | None:
    """The value's dims (ints or symbolic) when its rank is `rank`, else None."""
    if value.shape is None or value.shape.rank() != rank:
        return None
    return list(value.shape)


def apply(rules: RewriteRuleSet, model: ir.Model) -> int:
    """Apply `rules` everywhere, drop the nodes left unused; return the number of rewrites."""
    count = rules.apply_to_model(model)
    common_passes.RemoveUnusedNodesPass()(model)
    return count
