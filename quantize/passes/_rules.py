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


def replace_node(graph: ir.Graph, node: ir.Node, new_nodes: list[ir.Node], out: ir.Value) -> None:
    """Put `new_nodes` before `node` in `graph`, `out` (one of their outputs) in place of the node's first output
    (its readers, a graph output, its shape, type and name), and remove `node`."""
    old = node.outputs[0]
    out.shape, out.type = old.shape, old.type
    graph.insert_before(node, new_nodes)
    ir.convenience.replace_all_uses_with(old, out, replace_graph_outputs=True)
    name, old.name = old.name, None
    graph.remove(node, safe=True)
    out.name = name  # the replaced node's output keeps its name


def replace_each(nodes: list[ir.Node], kind: str, refusal, replace, refused: dict[str, str] | None) -> int:
    """For each node: `replace(node, base)` (base: its name, else KIND_i) unless `refusal(node)` gives a reason,
    recorded in `refused` (when given) under that base. Returns how many were replaced."""
    count = 0
    for i, node in enumerate(nodes):
        base = node.name or f"{kind}_{i}"
        reason = refusal(node)
        if reason is not None:
            if refused is not None:
                refused[base] = reason
            continue
        replace(node, base)
        count += 1
    return count
