"""A float initializer read by several node inputs -> one copy per reader, for the QDQ form of Qualcomm's HTP.

ONNX Runtime's quantizer gives each quantized initializer one DequantizeLinear, shared by all its readers; the QNN
EP (onnxruntime-qnn 2.7.0) groups a DequantizeLinear with its one reader into a node unit, and a shared one with
none: a per-channel weight's DequantizeLinear left alone is refused ("QNN EP does not support a standalone DQ op
with per-channel quantization"). Exporters share equal constants: Phi-4-multimodal's random-weight tower, whose
biases are all zeros, had one zero tensor read by its LayerNorms, residual Adds and the k projection's Gemm, and
its static model was refused whole; with a copy per reader every node runs on the HTP. Main graph only; int and bool
initializers (shapes, axes: never quantized) stay shared.
"""

from __future__ import annotations

import onnx

FLOAT_TYPES = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE)


def apply(model: onnx.ModelProto) -> int:
    """Give every reader after the first of a shared float initializer of `model` its own copy (`NAME.copyK`), in
    place; returns how many copies were added."""
    graph = model.graph
    floats = {t.name: t for t in graph.initializer if t.data_type in FLOAT_TYPES}
    taken = {t.name for t in graph.initializer} | {o for n in graph.node for o in n.output}
    seen: dict[str, int] = {}
    copies = []
    for node in graph.node:
        for index, name in enumerate(node.input):
            if name not in floats:
                continue
            seen[name] = seen.get(name, 0) + 1
            if seen[name] == 1:
                continue
            copy_name = _free(f"{name}.copy{seen[name] - 1}", taken)
            copy = onnx.TensorProto()
            copy.CopyFrom(floats[name])
            copy.name = copy_name
            copies.append(copy)
            node.input[index] = copy_name
    graph.initializer.extend(copies)
    return len(copies)


def _free(name: str, taken: set[str]) -> str:
    found, k = name, 1
    while found in taken:
        found, k = f"{name}_{k}", k + 1
    taken.add(found)
    return found
