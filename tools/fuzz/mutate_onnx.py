"""Structural mutators of an ONNX model (an `onnx.ModelProto`, edited in place): what other tools and hand edits
leave in files users bring. Each takes (model, rng, folder) — `folder` the directory the model is written to, for
mutators that add files beside it — and returns a short description of what it did."""

from __future__ import annotations

import os
import random
from pathlib import Path

import onnx
from onnx import TensorProto, helper


def _node(model, rng: random.Random):
    return model.graph.node[rng.randrange(len(model.graph.node))] if model.graph.node else None


def cycle(model, rng, folder) -> str:
    """An early node reads a later node's output."""
    nodes = model.graph.node
    if len(nodes) < 2:
        return "cycle: too few nodes"
    i = rng.randrange(len(nodes) - 1)
    j = rng.randrange(i + 1, len(nodes))
    if nodes[i].input:
        nodes[i].input[rng.randrange(len(nodes[i].input))] = nodes[j].output[0]
    else:
        nodes[i].input.append(nodes[j].output[0])
    return f"cycle: node {i} reads node {j}'s output"


def dangling(model, rng, folder) -> str:
    node = _node(model, rng)
    if node is None or not node.input:
        return "dangling: no node input"
    node.input[rng.randrange(len(node.input))] = "fuzz_nowhere"
    return f"dangling input on {node.op_type}"


def duplicate_output(model, rng, folder) -> str:
    nodes = model.graph.node
    if len(nodes) < 2:
        return "duplicate output: too few nodes"
    a, b = rng.sample(range(len(nodes)), 2)
    nodes[b].output[0] = nodes[a].output[0]
    return f"node {b} writes node {a}'s output"


def absurd_dims(model, rng, folder) -> str:
    """A graph input's, output's or initializer's dims set to 0, negative, huge or many."""
    value = rng.choice([-7, 0, 2**31, 2**40, 10**18])
    targets = list(model.graph.input) + list(model.graph.output)
    if rng.random() < 0.4 and model.graph.initializer:
        tensor = model.graph.initializer[rng.randrange(len(model.graph.initializer))]
        if rng.random() < 0.5:
            tensor.dims.append(value)
        elif tensor.dims:
            tensor.dims[rng.randrange(len(tensor.dims))] = value
        return f"initializer {tensor.name!r} dims {list(tensor.dims)}"
    if not targets:
        return "absurd dims: no input"
    shape = targets[rng.randrange(len(targets))].type.tensor_type.shape
    if rng.random() < 0.2:
        for _ in range(rng.randint(8, 64)):
            shape.dim.add().dim_value = 1
        return f"{len(shape.dim)}-d value"
    if not shape.dim:
        shape.dim.add()
    dim = shape.dim[rng.randrange(len(shape.dim))]
    dim.dim_value = value
    return f"dim {value}"


def opsets(model, rng, folder) -> str:
    choice = rng.randrange(4)
    if choice == 0 and model.opset_import:
        model.opset_import[0].version = rng.choice([0, -3, 7, 99, 2**40])
        return f"opset version {model.opset_import[0].version}"
    if choice == 1:
        del model.opset_import[:]
        return "no opset import"
    if choice == 2:
        model.opset_import.append(helper.make_opsetid("fuzz.domain", 1))
        node = _node(model, rng)
        if node is not None:
            node.domain = "fuzz.domain"
        return "a node in an unknown domain"
    model.ir_version = rng.choice([0, -1, 3, 11, 99])
    return f"ir_version {model.ir_version}"


def unknown_op(model, rng, folder) -> str:
    node = _node(model, rng)
    if node is None:
        return "unknown op: no node"
    node.op_type = rng.choice(["FuzzOp", "", "Conv" if node.op_type != "Conv" else "Relu", "Loop", "If"])
    return f"op type {node.op_type!r}"


def wrong_types(model, rng, folder) -> str:
    values = list(model.graph.input) + list(model.graph.output)
    if rng.random() < 0.5 and model.graph.initializer:
        tensor = model.graph.initializer[rng.randrange(len(model.graph.initializer))]
        tensor.data_type = rng.choice([0, 8, 9, 16, 99, TensorProto.INT64])
        return f"initializer {tensor.name!r} data_type {tensor.data_type}"
    if not values:
        return "wrong types: no value"
    value = values[rng.randrange(len(values))]
    value.type.tensor_type.elem_type = rng.choice([0, 8, 9, 10, 99, TensorProto.INT64])
    return f"{value.name!r} elem_type {value.type.tensor_type.elem_type}"


def attributes(model, rng, folder) -> str:
    """An attribute's value or type changed, dropped, or a subgraph emptied."""
    with_attrs = [n for n in model.graph.node if n.attribute]
    if not with_attrs:
        return "attributes: none"
    node = rng.choice(with_attrs)
    attr = node.attribute[rng.randrange(len(node.attribute))]
    choice = rng.randrange(4)
    if attr.type == onnx.AttributeProto.GRAPH or choice == 0 and attr.HasField("g"):
        if rng.random() < 0.5:
            del attr.g.node[:]
        else:
            del attr.g.output[:]
        return f"{node.op_type}.{attr.name}: subgraph broken"
    if choice == 1:
        node.attribute.remove(attr)
        return f"{node.op_type}.{attr.name} removed"
    if choice == 2:
        attr.type = rng.choice([onnx.AttributeProto.STRING, onnx.AttributeProto.INTS, onnx.AttributeProto.FLOAT])
        return f"{node.op_type}.{attr.name} type {attr.type}"
    attr.i = rng.choice([-(2**62), -1, 2**31, 10**15])
    del attr.ints[:]
    attr.ints.extend([rng.choice([-(2**40), 0, 2**40])] * rng.randint(1, 4))
    return f"{node.op_type}.{attr.name} = {attr.i} / {list(attr.ints)}"


def external_data(model, rng, folder: Path) -> str:
    """A weight moved to external data that points outside the folder, at a device, at a missing or short file,
    at an absurd offset, or through a link."""
    if not model.graph.initializer:
        return "external data: no initializer"
    tensor = model.graph.initializer[rng.randrange(len(model.graph.initializer))]
    size = max(len(tensor.raw_data), 4)
    tensor.ClearField("raw_data")
    del tensor.float_data[:]
    tensor.data_location = TensorProto.EXTERNAL
    del tensor.external_data[:]
    choice = rng.randrange(7)
    for name in ("short.data", "link.data", "weights.data"):  # a second edit of the same model starts afresh
        (folder / name).unlink(missing_ok=True)
    if choice == 0:
        location = "../../../../../../etc/passwd"
    elif choice == 1:
        location = rng.choice(["/dev/zero", "/dev/urandom", "/proc/self/mem", "/etc/hostname"])
    elif choice == 2:
        location = "missing.data"
    elif choice == 3:
        location = "short.data"
        (folder / location).write_bytes(b"\0" * (size // 2))
    elif choice == 4:
        location = "link.data"
        os.symlink("/etc/hostname" if rng.random() < 0.5 else "/dev/zero", folder / location)
    elif choice == 5:
        location = "weights.data"
        (folder / location).write_bytes(b"\0" * size)
        tensor.external_data.add(key="offset", value=rng.choice(["-5", "abc", str(2**62)]))
    else:
        location = "weights.data"
        (folder / location).write_bytes(b"\0" * size)
        tensor.external_data.add(key="length", value=str(rng.choice([2**40, -1, size * 1000])))
    tensor.external_data.add(key="location", value=location)
    return f"initializer {tensor.name!r} external at {location}"


def empty(model, rng, folder) -> str:
    choice = rng.randrange(4)
    if choice == 0:
        del model.graph.node[:]
        return "no nodes"
    if choice == 1:
        del model.graph.output[:]
        return "no outputs"
    if choice == 2:
        del model.graph.input[:]
        return "no inputs"
    model.graph.output.append(helper.make_tensor_value_info("fuzz_never", TensorProto.FLOAT, [1]))
    return "an output nothing produces"


def metadata(model, rng, folder) -> str:
    """The metadata the runtime reads (family, model, sizes) made wrong, absurd or huge."""
    props = {p.key: p for p in model.metadata_props}
    key = rng.choice(list(props) or ["family"])
    value = rng.choice(["", "fuzz-family", "phi-4-mm", "qwen2-vl", "-1", "1e400", "[1, 2", "x" * 100_000,
                        str(2**63), "None"])
    if key in props:
        props[key].value = value
    else:
        model.metadata_props.add(key=key, value=value)
    return f"metadata {key} = {value[:20]!r}"


MUTATORS = [cycle, dangling, duplicate_output, absurd_dims, opsets, unknown_op, wrong_types, attributes,
            external_data, empty, metadata]


def mutate(model, rng: random.Random, folder: Path) -> str:
    """1-2 structural mutations of `model` (in place); their descriptions."""
    return "; ".join(rng.choice(MUTATORS)(model, rng, folder) for _ in range(rng.randint(1, 2)))
