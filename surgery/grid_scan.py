"""Grid scanners: walk a graph and list the constants a traced export took from its example grid.

A traced export writes numbers from its example as constants: a Reshape to [1, 11, 2, 15, 2, -1]
for one 22×30-patch image, a Split into [256, 240] patches, a Range to 165 tokens. `find` lists
them (for debake, audit, doctor), each entry with what it is at run time (a `Mono` over grid_thw
and Shape(pixel_values)); `surgery.debake` rewrites the fixable ones. Constants no rewrite can fix
(a constant-folded table with a grid-sized dim, sizes in attributes of old opsets, subgraphs) are
unfixable findings. `collisions` names the grid quantities that a weight dim hides.

The scanners pick the candidates (rule 1: constant shape inputs, `SHAPE_INPUTS`), gather what the
classifier needs (the weights' dims, `architecture_values`; inferred shapes for the Reshape veto)
and report folded tables (rule 8); what an entry is comes from `surgery.grid_classify`, which
states all the rules.
"""
from __future__ import annotations

import onnx_ir as ir
from onnx_ir.passes.common import ShapeInferencePass

from surgery.findings import Finding, const_ints, node_name
from surgery.grid import Grid
from surgery.grid_classify import Classifier, classify_shape_input

#: Op -> indices of the inputs holding sizes that a trace can bake (rule 1).
SHAPE_INPUTS = {
    "Reshape": (1,), "Expand": (1,), "Tile": (1,), "ConstantOfShape": (0,),
    "Split": (1,), "Slice": (1, 2), "Range": (0, 1, 2),
}
#: Inputs that hold learned weights, by op type: their dims are architecture numbers.
WEIGHT_INPUTS = {
    "MatMul": (0, 1), "Gemm": (0, 1, 2), "Conv": (1, 2), "ConvTranspose": (1, 2), "Gather": (0,),
    "LayerNormalization": (1, 2), "BatchNormalization": (1, 2, 3, 4), "InstanceNormalization": (1, 2),
    "GroupNormalization": (1, 2), "RMSNormalization": (1,), "Einsum": (0, 1, 2),
}


def architecture_values(graph: ir.Graph) -> set[int]:
    """Every dim of every constant weight (see WEIGHT_INPUTS): numbers the architecture fixes.

    A `[1024, 4096]` MatMul weight contributes 1024 and 4096; a `[64, 3, 16, 16]` Conv kernel 64, 3, 16.
    """
    values = set()
    for node in graph:
        for idx in WEIGHT_INPUTS.get(node.op_type, ()):
            if idx < len(node.inputs) and node.inputs[idx] is not None:
                tensor = ir.convenience.get_const_tensor(node.inputs[idx])
                if tensor is not None:
                    values.update(int(d) for d in tensor.shape.numpy())
    return values


def inferred_shapes(model: ir.Model) -> dict[str, list[int | None] | None]:
    """ONNX shape inference on a copy: value name -> dims (int when static, None when not).

    A value whose rank is unknown maps to None; `[N, 1024]` with N symbolic maps to `[None, 1024]`.
    """
    copy = model.clone()
    ShapeInferencePass(strict_mode=False)(copy)
    shapes = {}
    for value in ir.convenience.create_value_mapping(copy.graph).values():
        if value.shape is None:
            shapes[value.name] = None
        else:
            shapes[value.name] = [d if isinstance(d, int) else None for d in value.shape]
    return shapes


def find(model: ir.Model, grid: Grid) -> list[Finding]:
    """Every grid-baked constant of the main graph (see `surgery.grid_classify` for the rules)."""
    graph = model.graph
    opset = model.opset_imports.get("", 1)
    classifier = Classifier(grid, architecture_values(graph))
    shapes = inferred_shapes(model)
    findings: list[Finding] = []
    shape_role: set[str] = set()
    for node in graph:
        for idx in SHAPE_INPUTS.get(node.op_type, ()):
            if idx >= len(node.inputs) or node.inputs[idx] is None:
                continue
            tensor = ir.convenience.get_const_tensor(node.inputs[idx])
            if tensor is None:
                continue
            shape_role.add(node.inputs[idx].name)
            values = const_ints(tensor)
            if values is not None:
                finding = classify_shape_input(node, idx, values, classifier, shapes)
                if finding:
                    findings.append(finding)
        findings += _attribute_sizes(node, opset, classifier)
        if any(attr.type in (ir.AttributeType.GRAPH, ir.AttributeType.GRAPHS) for attr in node.attributes.values()):
            findings += _subgraph_findings(node, classifier)
    findings += _folded(graph, classifier, shape_role)
    return findings


def collisions(model: ir.Model, grid: Grid) -> list[str]:
    """Global grid quantities equal to a weight dim: constants of that value cannot be classified."""
    arch = architecture_values(model.graph)
    return [f"{q.name} = {q.value} is also a weight dim; constants of that value are not checked (export at "
            "a grid whose sizes differ from weight dims)"
            for q in grid.quantities() if q.scope == "global" and q.value > grid.merge ** 2 and q.value in arch]


def _attribute_sizes(node: ir.Node, opset: int, classifier: Classifier) -> list[Finding]:
    """Sizes held in attributes (Split/Slice of old opsets) cannot be computed: unfixable."""
    out = []
    for attr_name in ("split", "starts", "ends", "shape"):
        attr = node.attributes.get(attr_name)
        if attr is None or attr.type != ir.AttributeType.INTS:
            continue
        values = list(attr.as_ints())
        entries, _ = classifier.entries(values)
        if entries:
            described = ", ".join(f"[{e.index}] {e.value} = {e.quantity}" for e in entries)
            out.append(Finding("attribute", node_name(node), node.op_type, -1, attr_name, values, entries, False,
                               f"{node.op_type} '{node_name(node)}' attribute {attr_name}={values}: {described}; "
                               f"an attribute cannot be computed at run time (opset {opset}); re-export at opset >= 13"))
    return out


def _subgraph_findings(node: ir.Node, classifier: Classifier) -> list[Finding]:
    """Grid numbers inside If/Loop/Scan bodies are reported, not rewritten."""
    out = []
    for attr in node.attributes.values():
        graphs = [attr.as_graph()] if attr.type == ir.AttributeType.GRAPH else (
            list(attr.as_graphs()) if attr.type == ir.AttributeType.GRAPHS else [])
        for sub in graphs:
            for inner in sub:
                for idx in SHAPE_INPUTS.get(inner.op_type, ()):
                    if idx < len(inner.inputs) and inner.inputs[idx] is not None:
                        tensor = ir.convenience.get_const_tensor(inner.inputs[idx])
                        values = const_ints(tensor) if tensor is not None else None
                        entries = classifier.entries(values)[0] if values else []
                        if entries:
                            out.append(Finding(
                                "subgraph", node_name(inner), inner.op_type, idx, inner.inputs[idx].name, values,
                                entries, False,
                                f"{inner.op_type} '{node_name(inner)}' inside {node.op_type} '{node_name(node)}' "
                                f"= {values} holds grid sizes; subgraphs are not rewritten"))
    return out


def _folded(graph: ir.Graph, classifier: Classifier, shape_role: set[str]) -> list[Finding]:
    """Rule 8: constants (not weights, not shape inputs) whose dims or small contents are grid sizes.

    Initializers and Constant outputs of any shape: a dim equal to num_patches/num_tokens (a folded
    `(N, 1, head_dim)` rotary table), or an int tensor of at most 64 values holding one of them.
    """
    weights = set()
    for node in graph:
        for idx in WEIGHT_INPUTS.get(node.op_type, ()):
            if idx < len(node.inputs) and node.inputs[idx] is not None:
                weights.add(node.inputs[idx].name)
    constants = [v for v in graph.initializers.values()]
    constants += [n.outputs[0] for n in graph if n.op_type == "Constant" and n.domain == ""]
    totals = {v: k for k, v in (("num_patches", classifier.grid.num_patches),
                                ("num_tokens", classifier.grid.num_tokens)) if v not in classifier.arch}
    out = []
    for value in constants:
        if value.name in weights or (value.name in shape_role and
                                     all(_is_shape_use(node, idx) for node, idx in value.uses())):
            continue
        tensor = ir.convenience.get_const_tensor(value)
        if tensor is None:
            continue
        dims = [int(d) for d in tensor.shape.numpy()]
        reasons = []
        for axis, d in enumerate(dims):
            if d in totals and d > classifier.limit:
                reasons.append(f"dim {axis} = {d} = {totals[d]}")
            elif classifier.grid.uniform and (matches := classifier.strong_matches(d)):
                reasons.append(f"dim {axis} = {d} = {matches[0].name}")
        if tensor.dtype.is_integer() and tensor.size <= 64 and not reasons:
            held = sorted({v for v in (const_ints(tensor) or []) if v in totals and v > classifier.limit})
            reasons += [f"holds {v} = {totals[v]}" for v in held]
        if reasons:
            out.append(Finding(
                "folded", value.name, "constant", -1, value.name, dims, [], False,
                f"constant '{value.name}' {dims}: {', '.join(reasons)}; it was constant-folded at the export "
                "grid and cannot be rewritten here: re-export with this tensor computed from grid_thw"))
    return out


def _is_shape_use(node: ir.Node, idx: int) -> bool:
    return idx in SHAPE_INPUTS.get(node.op_type, ())
