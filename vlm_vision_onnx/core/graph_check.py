"""What makes a parsed ONNX file no graph at all, found before any command works on it (`core.onnx_io` runs it on
every load: `read_proto`, `read_light`, `load`), so that a malformed file is one `error:` line, never a traceback
from onnx-ir's sort, a pass or a tool.

`problems(model)` works on an `onnx.ModelProto` or a `core.onnx_light.ModelProto` (the same field names) and
names, at most `limit` of them:
- a node input that no graph input, initializer, node output (of this graph or, for a subgraph, an enclosing one)
  provides: a dangling name;
- a name two nodes (or a node and a graph input or initializer) both produce;
- a cycle: nodes that wait on each other's outputs;
- a graph output that nothing provides;
- a node of a domain the model imports no opset for, and an opset version below 1;
- a Constant node without exactly one attribute (its value);
- an element type ONNX does not define (undefined on an input or initializer, an unknown code anywhere);
- an initializer with a negative dim, or whose bytes in the file are not what its dims and type need;
- a graph input declaring a negative or absurd static dim (past MAX_DIM, or MAX_INPUT_ELEMENTS in all);
- a subgraph attribute (a Loop's or If's body) that is empty or holds the same problems.
"""

from __future__ import annotations

from vlm_vision_onnx.core import onnx_light

#: The largest static dim, and the most elements, a graph input may declare (2^30 float32 elements are 4 GiB; the
#: fuzzer's 2^31- and 10^18-wide inputs sent the surgery probes into allocations past any machine).
MAX_DIM = 2**24
MAX_INPUT_ELEMENTS = 2**30
#: A Constant's value attribute: {name: AttributeProto.AttributeType it must be} (value: TENSOR, ...).
CONSTANT_VALUES = {"value": 4, "value_float": 1, "value_floats": 6, "value_int": 2, "value_ints": 7,
                   "value_string": 3, "value_strings": 8, "sparse_value": 11}
#: The default domain's two spellings.
DEFAULT_DOMAINS = ("", "ai.onnx")


def problems(model, limit: int = 5) -> list[str]:
    """Up to `limit` problems of `model` (see the module's docstring); [] when it is a graph."""
    found: list[str] = []
    imported = {}
    for opset in model.opset_import:
        domain = "" if opset.domain in DEFAULT_DOMAINS else opset.domain
        imported[domain] = opset.version
        if opset.version < 1:
            found.append(f"opset {opset.domain or 'ai.onnx'} version {opset.version} (versions start at 1)")
    if not model.graph.output:
        found.append("the graph has no outputs (nothing to compute)")
    _graph(model.graph, set(), imported, "the graph", found, limit)
    return found[:limit]


def _types(graph, where: str, found: list[str]) -> None:
    """Element types onnx does not define: on a graph input or initializer any but a defined one, on an output or
    value_info an unknown code (0, "not recorded", is allowed there)."""
    typed = [(v.name, v.type.tensor_type.elem_type, "input") for v in graph.input if v.type.HasField("tensor_type")]
    typed += [(t.name, t.data_type, "initializer") for t in graph.initializer]
    typed += [(v.name, v.type.tensor_type.elem_type, "value") for v in (*graph.output, *graph.value_info)
              if v.type.HasField("tensor_type") and v.type.tensor_type.elem_type != 0]
    for name, code, kind in typed:
        if code not in onnx_light.DTYPE_NAMES:
            found.append(f"{where}: {kind} {name!r} has element type {code}, which ONNX does not define")
            return
    for tensor in graph.initializer:
        problem = _size_problem(tensor)
        if problem:
            found.append(f"{where}: initializer {tensor.name!r} {problem}")
            return
    for value in graph.input:
        dims = [d.dim_value for d in value.type.tensor_type.shape.dim if d.HasField("dim_value")]
        elements = 1
        for dim in dims:
            elements *= max(dim, 1)
        if any(d < 0 or d > MAX_DIM for d in dims) or elements > MAX_INPUT_ELEMENTS:
            found.append(f"{where}: input {value.name!r} declares dims {dims} (a dim past {MAX_DIM}, or more than "
                         f"{MAX_INPUT_ELEMENTS} elements): no input of that size can be made")
            return


def _size_problem(tensor) -> str | None:
    """Dims below 0, or raw bytes held in the file that are not what the dims and type need."""
    if any(d < 0 for d in tensor.dims):
        return f"has a negative dim {list(tensor.dims)}"
    if tensor.data_location == onnx_light.EXTERNAL or not tensor.HasField("raw_data"):
        return None  # external data: core.onnx_io checks its file; typed fields: parsed by count
    needed = onnx_light.byte_count(tensor)
    if needed is not None and len(tensor.raw_data) != needed:
        return f"holds {len(tensor.raw_data)} bytes, but its dims {list(tensor.dims)} need {needed}"
    return None


def _graph(graph, outer: set[str], imported: dict, where: str, found: list[str], limit: int) -> set[str]:
    """Appends the problems of `graph` to `found`; returns the names it (or a subgraph of it) reads from `outer`."""
    _types(graph, where, found)
    available = set(outer)
    produced: dict[str, str] = {}
    for value in list(graph.input) + list(graph.initializer):
        if value.name in produced and value.name not in outer:
            continue  # an old IR version lists initializers as inputs too
        produced[value.name] = "a graph input or initializer"
    available |= set(produced)
    local = set(produced)
    outputs: dict[str, int] = {}  # name -> index of the node producing it
    for index, node in enumerate(graph.node):
        for name in node.output:
            if not name:
                continue
            if name in outputs or name in local:
                found.append(f"{where}: node {_node(node, index)} writes {name!r}, which "
                             f"{'another node' if name in outputs else 'a graph input or initializer'} "
                             "also provides")
                if len(found) >= limit:
                    return set()
            outputs.setdefault(name, index)
    known = available | set(outputs)
    waits: list[set[int]] = []
    captured: set[str] = set()  # names of `outer` this graph reads
    for index, node in enumerate(graph.node):
        domain = "" if node.domain in DEFAULT_DOMAINS else node.domain
        if domain not in imported:
            found.append(f"{where}: node {_node(node, index)} is of domain {node.domain!r}, which the model "
                         "imports no opset for")
        if node.op_type == "Constant" and domain == "" and (
                len(node.attribute) != 1 or CONSTANT_VALUES.get(node.attribute[0].name) != node.attribute[0].type):
            found.append(f"{where}: Constant node {_node(node, index)} has "
                         f"{[(a.name, a.type) for a in node.attribute]} as attributes (exactly one holds its value, "
                         "of the kind its name says)")
        missing = [name for name in node.input if name and name not in known]
        if missing:
            found.append(f"{where}: node {_node(node, index)} reads {missing[0]!r}, which no graph input, "
                         "initializer or node provides")
        reads = {name for name in node.input if name}
        for attribute in node.attribute:
            subgraphs = ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs)
            for sub in subgraphs:
                if not sub.node and not sub.output:
                    found.append(f"{where}: node {_node(node, index)}'s attribute {attribute.name!r} is an "
                                 "empty graph")
                else:  # what a body reads of this scope, the node waits on (a cycle may close through it)
                    reads |= _graph(sub, known, imported, f"{where} > {_node(node, index)}.{attribute.name}",
                                    found, limit)
        waits.append({outputs[name] for name in reads if name in outputs and name not in available})
        captured |= {name for name in reads if name in outer and name not in local and name not in outputs}
        if len(found) >= limit:
            return captured
    cycle = _cycle(waits)
    if cycle is not None:
        found.append(f"{where}: nodes {', '.join(_node(graph.node[i], i) for i in cycle[:4])}"
                     f"{' ...' if len(cycle) > 4 else ''} wait on each other's outputs (a cycle)")
    for value in graph.output:
        if value.name not in known:
            found.append(f"{where}: output {value.name!r} is provided by no node, input or initializer")
        elif value.name in outer and value.name not in local and value.name not in outputs:
            captured.add(value.name)
    return captured


def _node(node, index: int) -> str:
    return f"{node.name!r} ({node.op_type})" if node.name else f"#{index} ({node.op_type})"


def _cycle(waits: list[set[int]]) -> list[int] | None:
    """Indices of nodes on a cycle of `waits` (node -> the nodes whose outputs it reads), else None."""
    state = [0] * len(waits)  # 0 unvisited, 1 on the stack, 2 done
    for start in range(len(waits)):
        if state[start]:
            continue
        stack = [(start, iter(waits[start]))]
        path = [start]
        state[start] = 1
        while stack:
            node, children = stack[-1]
            child = next(children, None)
            if child is None:
                state[node] = 2
                stack.pop()
                path.pop()
            elif state[child] == 1:
                return path[path.index(child):]
            elif state[child] == 0:
                state[child] = 1
                stack.append((child, iter(waits[child])))
                path.append(child)
    return None
