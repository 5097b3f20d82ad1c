"""Findings: the data model of a baked constant, shared by the grid and the batch detectors.

A `Finding` is one constant a traced export took from its example (a grid size found by
`surgery.grid_scan.find`, a batch size found by `surgery.batch_constants.debatch`); its `Entry`s are
the entries that must follow the inputs at run time, each with the `Mono` it becomes. `debake` and
`debatch` rewrite fixable findings (`surgery.debake.computed_shape`), `audit` and `doctor` report them.

Also here: the two helpers every detector uses to read a graph into findings, `const_ints` (a
constant tensor's values as a flat list of ints) and `node_name` (how a finding names a node).
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np
import onnx_ir as ir

from surgery.grid import Mono


@dataclass
class Entry:
    """One flagged entry of a shape constant: position, value, and what it becomes.

    `index` is the position in the constant's values read flat (row-major; a shape input is 1-D
    `[k]`, so it is the axis the entry sets); `expr` is `str(mono)`, the run-time expression.
    """

    index: int
    value: int
    quantity: str
    expr: str
    mono: Mono | None = field(default=None, repr=False)


@dataclass
class Finding:
    """A baked constant (or a constant-folded grid tensor when `kind` is 'folded').

    `values` are the constant's entries read flat (a shape input is 1-D `[k]`, so `values` has k
    items); for a 'folded' finding they are the dims of the constant tensor instead. `input` is the
    index of the node input holding the constant (-1 for an attribute or a folded constant).
    """

    kind: str  # "shape" (a shape input of `op`), "attribute", "subgraph" or "folded" (a constant tensor)
    node: str
    op: str
    input: int
    tensor: str
    values: list[int]
    entries: list[Entry]
    fixable: bool
    message: str
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        data = asdict(self)
        for entry in data["entries"]:
            entry.pop("mono", None)
        if self.fixable:
            data["replacement"] = self.replacement()
        return data

    def replacement(self) -> str:
        """The new shape tensor, entries written as run-time expressions: '[N/(h_0·w_0), h_0/2, 2, ...]'."""
        by_index = {e.index: e.expr for e in self.entries}
        return "[" + ", ".join(by_index.get(j, str(v)) for j, v in enumerate(self.values)) + "]"


def const_ints(tensor) -> list[int] | None:
    """A constant tensor of any shape, read flat (row-major) as ints: `[d0·d1·...]` values.

    None when its values are not integers (a float tensor with a non-integral or non-finite value,
    or a tensor neither float nor int).
    """
    array = tensor.numpy()
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(array)) or not np.all(array == np.round(array)):
            return None
    elif array.dtype.kind not in "iu":
        return None
    return [int(v) for v in array.reshape(-1)]


def node_name(node: ir.Node) -> str:
    """A node's name, or op->first output when it has none."""
    return node.name or f"{node.op_type}->{node.outputs[0].name}"
