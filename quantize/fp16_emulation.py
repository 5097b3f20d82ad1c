"""float16 storage emulated on a CPU: a float32 copy of an fp16 model in which every float16 tensor is rounded.

Why: ONNX Runtime's CPU EP (1.31, x86) has no float16 kernel for most ops (MatMul, Conv, Add, Mul, GELU,
...). Its InsertCastTransformer runs those nodes in float32 between inserted Casts, and then removes each
`Cast(float->float16) -> Cast(float16->float)` pair as if it lost nothing: the tensors between such nodes are
never rounded to float16 and never overflow (measured: two float16 MatMuls on the CPU EP give the result of
an unrounded intermediate). Running the fp16 model on the CPU EP therefore says whether it loads and what a
CPU user gets, not what float16 activations do.

`emulate(src, dst)` writes a model that does: every float16 tensor of `src` (weights, activations,
subgraphs included) becomes float32, and every node output that was float16 goes through
`Cast(to=float16) -> Identity -> Cast(to=float)` before anything reads it. The Identity sits between the two
Casts, so no cast-pair removal sees them; the rounding (and overflow to inf past 65504) happens where
float16 storage would. Each op then computes in float32 on float16-rounded inputs, as a GPU's float16
kernels do with float32 accumulation (cuBLAS GEMMs in ONNX Runtime's CUDA EP, LayerNorm, softmax inside
attention); kernels that accumulate in float16 would differ by their own rounding, which this does not model.
Run it with graph optimizations disabled (`open_session(..., optimize=False)`), so that no fusion reaches
across an island.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx_ir as ir

from quantize.passes import elem_types
from vlm_vision_onnx.core import onnx_io

FLOAT, HALF = ir.DataType.FLOAT, ir.DataType.FLOAT16


def _round_island(graph: ir.Graph, node: ir.Node, value: ir.Value) -> None:
    """Route every reader of `value` (now float32) through Cast(float16) -> Identity -> Cast(float)."""
    base = value.name
    down = ir.Node("", "Cast", [value], [ir.AttrInt64("to", HALF)], name=f"{base}/emulate_fp16", num_outputs=1)
    hold = ir.Node("", "Identity", [down.outputs[0]], name=f"{base}/emulate_hold", num_outputs=1)
    up = ir.Node("", "Cast", [hold.outputs[0]], [ir.AttrInt64("to", FLOAT)], name=f"{base}/emulate_fp32",
                 num_outputs=1)
    for out, dtype, suffix in ((down.outputs[0], HALF, "h"), (hold.outputs[0], HALF, "hh"), (up.outputs[0], FLOAT, "r")):
        out.name, out.type, out.shape = f"{base}/emulate_{suffix}", ir.TensorType(dtype), value.shape
    rounded = up.outputs[0]
    was_output = value.is_graph_output()
    value.replace_all_uses_with(rounded, replace_graph_outputs=True)
    down.replace_input_with(0, value)  # replace_all_uses_with also moved the island's own input
    graph.insert_after(node, [down, hold, up])
    if was_output:
        value.name = f"{base}/emulate_unrounded"
        rounded.name = base


def _to_float(graph: ir.Graph) -> int:
    """float16 -> float32 in `graph` and its subgraphs, rounding islands after float16 node outputs."""
    islands = 0
    for value in list(graph.initializers.values()):
        if elem_types.elem_type(value) == HALF:
            array = value.const_value.numpy().astype(np.float32)
            value.const_value = ir.tensor(array, name=value.name)
            value.type = ir.TensorType(FLOAT)
    for value in graph.inputs:
        if elem_types.elem_type(value) == HALF:
            raise ValueError(f"graph input {value.name} is float16: the emulation takes float32 inputs only")
    for node in list(graph):
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                islands += _to_float(attr.as_graph())
            elif attr.type == ir.AttributeType.GRAPHS:
                islands += sum(_to_float(g) for g in attr.as_graphs())
        _attributes_to_float(node)
        for value in node.outputs:
            if elem_types.elem_type(value) == HALF:
                value.type = ir.TensorType(FLOAT)
                _round_island(graph, node, value)
                islands += 1
            elif isinstance(value.type, ir.SequenceType) and value.type.elem_type.dtype == HALF:
                value.type = ir.SequenceType(ir.TensorType(FLOAT))  # its tensors were rounded when inserted
    return islands


def _attributes_to_float(node: ir.Node) -> None:
    """Attributes that set a float16 type or hold a float16 tensor, made float32."""
    for name in ("to", "dtype"):
        attr = node.attributes.get(name)
        if attr is not None and attr.type == ir.AttributeType.INT and attr.as_int() == HALF:
            node.attributes[name] = ir.AttrInt64(name, FLOAT)
    value = node.attributes.get("value")
    if value is not None and value.type == ir.AttributeType.TENSOR and value.as_tensor().dtype == HALF:
        node.attributes["value"] = ir.AttrTensor("value", ir.tensor(value.as_tensor().numpy().astype(np.float32)))


def emulate(src: str | Path, dst: str | Path) -> int:
    """Write the emulation of the fp16 model `src` to `dst` (same folder: external weights resolve there);
    return the number of rounded tensors."""
    model = onnx_io.load(src)
    elem_types.infer(model)
    islands = _to_float(model.graph)
    onnx_io.save(model, dst)
    return islands
