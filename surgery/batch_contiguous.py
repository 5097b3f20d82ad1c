"""set-batch --contiguous: outputs whose samples interleave get each sample's rows in one block.

SCRFD 0.5 GF flattens each head with `Transpose(perm=[2, 3, 0, 1])` then `Reshape [-1, k]`: the
batch moves inward, so at batch 8 the rows of output `443` run (y, x, sample, anchor) and the
samples interleave 2 rows at a time. At batch 1 the batch axis has size 1 and its position does not
matter, so moving it back to the front — `perm=[0, 2, 3, 1]`, the layout of the keypoint export —
computes the same thing per sample and makes each sample's 12800 rows contiguous. `make_contiguous`
walks back from each interleaved output through shape-only ops to that Transpose and rewrites its
perm; the caller finds the layouts again and verifies every sample.
"""

from __future__ import annotations

import onnx_ir as ir

from surgery.batch_layout import Layout
from surgery.findings import node_name

#: Ops the walk from an output back to the Transpose passes through: reshapes and element-wise
#: ops of one tensor (SCRFD's score heads end in a Sigmoid), which do not care where the batch is.
SHAPE_ONLY = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Sigmoid", "Relu", "Tanh", "Exp", "Neg",
              "Abs", "Sqrt", "Cast", "Clip", "HardSigmoid", "LeakyRelu"}


def _interleaving_transpose(value: ir.Value) -> ir.Node | None:
    """The Transpose that moves axis 0 inward, reached from `value` through SHAPE_ONLY ops used once."""
    node = value.producer()
    while node is not None and node.op_type in SHAPE_ONLY:
        if len(node.outputs[0].uses()) > 1 and not node.outputs[0].is_graph_output():
            return None
        node = node.inputs[0].producer() if node.inputs and node.inputs[0] is not None else None
    if node is None or node.op_type != "Transpose":
        return None
    perm = node.attributes.get_ints("perm")
    if not perm or perm[0] == 0 or len(node.outputs[0].uses()) != 1:
        return None
    return node


def make_contiguous(model: ir.Model, layouts: dict[str, Layout]) -> tuple[list[str], list[str]]:
    """Rewrite, in place, the Transpose behind each interleaved output so that the batch stays first.

    Returns (one line per rewritten Transpose, one line per interleaved output left as it is).
    """
    outputs = {v.name: v for v in model.graph.outputs}
    changed, left = [], []
    done: set[str] = set()
    for name, layout in layouts.items():
        if layout.axis is None or layout.block == layout.rows:
            continue
        node = _interleaving_transpose(outputs[name])
        if node is None:
            left.append(f"{name}: no Transpose that moves the batch inward was found behind it; left interleaved")
            continue
        if node_name(node) in done:
            continue
        perm = list(node.attributes.get_ints("perm"))
        p = perm.index(0)
        new = [0] + [a for i, a in enumerate(perm) if i != p]
        node.attributes["perm"] = ir.AttrInt64s("perm", new)
        done.add(node_name(node))
        changed.append(f"Transpose '{node_name(node)}' (before {name}): perm {perm} -> {new}")
    return changed, left
