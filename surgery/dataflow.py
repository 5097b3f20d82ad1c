"""Where output sizes come from: static, inferable from input shapes, or known only at run time.

Two provenances are tracked per tensor: of its *values* and of its *shape*. A shape is
- inferable: it follows from input shapes and constants (Shape/Size feeding Slice, Concat,
  Reshape, Resize...), so shape inference or one probe at each input shape tells it;
- data-dependent: it follows from the values of an input (e.g. grid_thw) or from an op whose output
  size depends on the data (NonZero, NonMaxSuppression, Unique, Compress), so nobody can know it
  before running the model.
"""

from __future__ import annotations

import onnx_ir as ir

#: Ops whose output size depends on the values of their data.
DATA_DEPENDENT_OPS = {"NonZero", "NonMaxSuppression", "Unique", "Compress", "StringSplit"}
#: Inputs holding sizes (their *values* set the output's shape), by op type.
SIZE_INPUTS = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,), "Range": (0, 1, 2),
    "Slice": (1, 2, 3, 4), "Resize": (1, 2, 3), "Upsample": (1,), "Pad": (1, 2, 3), "TopK": (1,),
    "OneHot": (1,), "Split": (1,), "CenterCropPad": (1,), "Squeeze": (1,), "Unsqueeze": (1,),
    "ReduceSum": (1,), "ReduceMean": (1,), "ReduceMax": (1,), "ReduceMin": (1,), "ReduceProd": (1,),
    "Loop": (0,),
}


def _name(node: ir.Node) -> str:
    return f"{node.op_type} '{node.name or node.outputs[0].name}'"


def classify(model: ir.Model) -> dict:
    """Classify how each size-setting node and each graph output gets its size.

    Returns:
        {"nodes": {"data-dependent": [...], "inferable": [...], "constant": [...]},
         "outputs": {output name: {"kind": ..., "because": [...]}}}
        where list items are {"node": "NonZero 'nz'", "because": ["input x values", ...]}.
    """
    graph = model.graph
    values_from: dict[str, set[str]] = {}
    shape_from: dict[str, set[str]] = {}
    for value in graph.inputs:
        values_from[value.name] = {f"values of input {value.name}"}
        shape_from[value.name] = set()
    for value in graph.initializers.values():
        values_from[value.name] = set()
        shape_from[value.name] = set()
    nodes: dict[str, list[dict]] = {"data-dependent": [], "inferable": [], "constant": []}

    def get(table, value):
        return table.get(value.name, set()) if value is not None else set()

    for node in graph:
        ins = [v for v in node.inputs]
        in_shapes = set().union(*(get(shape_from, v) for v in ins)) if ins else set()
        in_values = set().union(*(get(values_from, v) for v in ins)) if ins else set()
        size_idx = SIZE_INPUTS.get(node.op_type, ())
        size_sources = set().union(*(get(values_from, ins[i]) for i in size_idx if i < len(ins))) if size_idx else set()
        if node.op_type in ("Shape", "Size"):
            out_values, out_shape = get(shape_from, ins[0]) | {"input shapes"}, set()
        elif node.op_type in DATA_DEPENDENT_OPS:
            own = {f"data through {_name(node)}"}
            out_shape = in_shapes | own
            out_values = in_values | out_shape
            nodes["data-dependent"].append({"node": _name(node), "because": ["its output size depends on the data"]})
        else:
            out_values = in_values
            out_shape = in_shapes | size_sources
            if size_idx and any(i < len(ins) and ins[i] is not None for i in size_idx):
                kind = _kind(size_sources)
                nodes[kind if size_sources else "constant"].append({"node": _name(node), "because": sorted(size_sources) or ["constants"]})
        for value in node.outputs:
            values_from[value.name] = out_values
            shape_from[value.name] = out_shape
    outputs = {}
    for value in graph.outputs:
        sources = shape_from.get(value.name, set())
        outputs[value.name] = {"kind": _kind(sources), "because": sorted(sources) or ["input shapes/constants"]}
    return {"nodes": nodes, "outputs": outputs}


def _kind(sources: set[str]) -> str:
    if any(s.startswith(("values of input", "data through")) for s in sources):
        return "data-dependent"
    return "inferable"
