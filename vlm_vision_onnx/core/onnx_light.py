"""ONNX files parsed without the onnx package, for the runtime's commands.

`import onnx` costs 0.7-0.8 s of a process's start (it imports ml_dtypes); the runtime reads only what a file says
about itself (metadata, opsets, the graph's inputs, outputs and nodes, where its weights are) and never edits a
graph. `ModelProto` here is a message class built from a subset of onnx.proto (proto2, the same field numbers and
names as `onnx.ModelProto`), so code that reads those fields works on either; every field it does not declare
(tensor data, doc strings, training info, functions) is kept as protobuf's unknown fields and ignored.

Declared: ModelProto {ir_version 1, opset_import 8, graph 7, metadata_props 14}; GraphProto {node 1, name 2,
initializer 5, input 11, output 12, value_info 13}; NodeProto {input 1, output 2, name 3, op_type 4,
attribute 5, domain 7}; AttributeProto {name 1, i 3, s 4, t 5, g 6, ints 8, tensors 10, graphs 11, type 20};
TensorProto {dims 1, data_type 2, name 8, raw_data 9, external_data 13, data_location 14}; ValueInfoProto {name 1, type 2};
TypeProto {tensor_type 1}; TypeProto.Tensor {elem_type 1, shape 2}; TensorShapeProto {dim 1};
Dimension {dim_value 1, dim_param 2}; OperatorSetIdProto {domain 1, version 2}; StringStringEntryProto {key 1,
value 2}.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

#: TensorProto.DataLocation.EXTERNAL.
EXTERNAL = 1
#: TensorProto.DataType -> the numpy dtype name `onnx.helper.tensor_dtype_to_np_dtype` gives (onnx 1.21; the
#: narrow float and int types are ml_dtypes' names). tests/test_onnx_light.py checks it against onnx's table.
DTYPE_NAMES = {
    1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 8: "object", 9: "bool",
    10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 14: "complex64", 15: "complex128", 16: "bfloat16",
    17: "float8_e4m3fn", 18: "float8_e4m3fnuz", 19: "float8_e5m2", 20: "float8_e5m2fnuz", 21: "uint4", 22: "int4",
    23: "float4_e2m1fn", 24: "float8_e8m0fnu", 25: "uint2", 26: "int2", 27: "float6_e2m3fn", 28: "float6_e3m2fn",
}
#: TensorProto.DataType -> bits per element, for the types with a fixed size (the byte count an external weight
#: needs when its external_data records no length: ceil(elements * bits / 8)).
ELEMENT_BITS = {1: 32, 2: 8, 3: 8, 4: 16, 5: 16, 6: 32, 7: 64, 9: 8, 10: 16, 11: 64, 12: 32, 13: 64, 14: 64, 15: 128,
                16: 16, 17: 8, 18: 8, 19: 8, 20: 8, 21: 4, 22: 4, 23: 4, 24: 8, 25: 2, 26: 2}


def byte_count(tensor) -> int | None:
    """The bytes a TensorProto's data needs from its dims and type: ceil(elements * bits / 8); None for a type
    without a fixed size (strings) or a negative dim."""
    bits = ELEMENT_BITS.get(tensor.data_type)
    if bits is None or any(dim < 0 for dim in tensor.dims):
        return None
    elements = 1
    for dim in tensor.dims:
        elements *= int(dim)
    return -(-elements * bits // 8)


_PACKAGE = "vlm_vision_onnx.onnx_light"

_F = descriptor_pb2.FieldDescriptorProto
_TYPES = {"int64": _F.TYPE_INT64, "int32": _F.TYPE_INT32, "string": _F.TYPE_STRING, "bytes": _F.TYPE_BYTES}
#: {message: [(field, number, type or message name, repeated)]}
_SCHEMA = {
    "StringStringEntryProto": [("key", 1, "string", False), ("value", 2, "string", False)],
    "OperatorSetIdProto": [("domain", 1, "string", False), ("version", 2, "int64", False)],
    "Dimension": [("dim_value", 1, "int64", False), ("dim_param", 2, "string", False)],
    "TensorShapeProto": [("dim", 1, "Dimension", True)],
    "TensorType": [("elem_type", 1, "int32", False), ("shape", 2, "TensorShapeProto", False)],
    "TypeProto": [("tensor_type", 1, "TensorType", False)],
    "ValueInfoProto": [("name", 1, "string", False), ("type", 2, "TypeProto", False)],
    "TensorProto": [("dims", 1, "int64", True), ("data_type", 2, "int32", False), ("name", 8, "string", False),
                    ("raw_data", 9, "bytes", False), ("external_data", 13, "StringStringEntryProto", True),
                    ("data_location", 14, "int32", False)],
    "AttributeProto": [("name", 1, "string", False), ("i", 3, "int64", False), ("s", 4, "bytes", False),
                       ("t", 5, "TensorProto", False), ("g", 6, "GraphProto", False), ("ints", 8, "int64", True),
                       ("tensors", 10, "TensorProto", True), ("graphs", 11, "GraphProto", True),
                       ("type", 20, "int32", False)],
    "NodeProto": [("input", 1, "string", True), ("output", 2, "string", True), ("name", 3, "string", False),
                  ("op_type", 4, "string", False), ("attribute", 5, "AttributeProto", True),
                  ("domain", 7, "string", False)],
    "GraphProto": [("node", 1, "NodeProto", True), ("name", 2, "string", False),
                   ("initializer", 5, "TensorProto", True), ("input", 11, "ValueInfoProto", True),
                   ("output", 12, "ValueInfoProto", True), ("value_info", 13, "ValueInfoProto", True)],
    "ModelProto": [("ir_version", 1, "int64", False), ("graph", 7, "GraphProto", False),
                   ("opset_import", 8, "OperatorSetIdProto", True),
                   ("metadata_props", 14, "StringStringEntryProto", True)],
}


def _classes() -> dict[str, type]:
    file = descriptor_pb2.FileDescriptorProto(name="vlm_vision_onnx/onnx_light.proto", package=_PACKAGE,
                                              syntax="proto2")
    for name, fields in _SCHEMA.items():
        message = file.message_type.add(name=name)
        for field, number, kind, repeated in fields:
            label = _F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL
            if kind in _TYPES:
                message.field.add(name=field, number=number, type=_TYPES[kind], label=label)
            else:
                message.field.add(name=field, number=number, type=_F.TYPE_MESSAGE, label=label,
                                  type_name=f".{_PACKAGE}.{kind}")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))
            for name in _SCHEMA}


ModelProto = _classes()["ModelProto"]


def parse(data: bytes) -> ModelProto:
    """The model in `data` (a serialized ONNX ModelProto); protobuf's DecodeError when it does not parse."""
    return ModelProto.FromString(data)
