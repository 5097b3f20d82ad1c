"""LayerNormalization -> its definition in elementwise ops and ReduceMean, for Qualcomm's HTP in QDQ form.

The QNN EP (onnxruntime-qnn 2.7.0, HTP v73) refuses every quantized LayerNormalization of the Qwen towers
("Failed to add node", QNN LayerNorm validation error 3110) with uint16 or uint8 activations and int8, uint8 or
uint16 scales, per tensor or per channel; the same ops written out run there (Qwen2.5-VL's RMSNorm is written out by
the exporter and runs). Over the last axis only (the towers' one form):

    mean = ReduceMean(x, [-1]); centred = x - mean; var = ReduceMean(centred * centred, [-1])
    y = centred / Sqrt(var + epsilon) * scale (+ bias)

Shapes: x [..., C], scale [C], bias [C] -> y [..., C]. Opset 18+ (ReduceMean takes its axes as an input).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _attribute(node: onnx.NodeProto, name: str, default):
    found = next((a for a in node.attribute if a.name == name), None)
    return default if found is None else helper.get_attribute_value(found)


def apply(model: onnx.ModelProto) -> int:
    """Rewrite every last-axis LayerNormalization of `model` in place; returns how many. ValueError for another axis."""
    graph = model.graph
    rank = {v.name: len(v.type.tensor_type.shape.dim) for v in list(graph.input) + list(graph.value_info)}
    nodes, count = [], 0
    axes = "decomposed_layer_norm_axes"
    for node in graph.node:
        if node.op_type != "LayerNormalization" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        axis = _attribute(node, "axis", -1)
        if axis != -1 and (node.input[0] not in rank or axis != rank[node.input[0]] - 1):
            raise ValueError(f"LayerNormalization {node.name} normalises over axis {axis}, not the last")
        epsilon = f"{node.name}/epsilon"
        graph.initializer.append(numpy_helper.from_array(np.array(_attribute(node, "epsilon", 1e-5), np.float32),
                                                         epsilon))
        x, scale = node.input[0], node.input[1]
        bias = node.input[2] if len(node.input) > 2 and node.input[2] else None
        out = node.output[0]
        p = node.name or f"layer_norm_{count}"
        nodes += [
            helper.make_node("ReduceMean", [x, axes], [f"{p}/mean"], name=f"{p}/ReduceMean", keepdims=1),
            helper.make_node("Sub", [x, f"{p}/mean"], [f"{p}/centred"], name=f"{p}/Sub"),
            helper.make_node("Mul", [f"{p}/centred", f"{p}/centred"], [f"{p}/squared"], name=f"{p}/Square"),
            helper.make_node("ReduceMean", [f"{p}/squared", axes], [f"{p}/var"], name=f"{p}/ReduceMeanVar",
                             keepdims=1),
            helper.make_node("Add", [f"{p}/var", epsilon], [f"{p}/var_eps"], name=f"{p}/AddEpsilon"),
            helper.make_node("Sqrt", [f"{p}/var_eps"], [f"{p}/std"], name=f"{p}/Sqrt"),
            helper.make_node("Div", [f"{p}/centred", f"{p}/std"], [f"{p}/normed"], name=f"{p}/Div"),
            helper.make_node("Mul", [f"{p}/normed", scale], [out if bias is None else f"{p}/scaled"],
                             name=f"{p}/Scale"),
        ]
        if bias is not None:
            nodes.append(helper.make_node("Add", [f"{p}/scaled", bias], [out], name=f"{p}/Bias"))
        count += 1
    if count:
        graph.initializer.append(numpy_helper.from_array(np.array([-1], np.int64), axes))
        del graph.node[:]
        graph.node.extend(nodes)
    return count
