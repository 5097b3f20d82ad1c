"""Export a torch module to ONNX through TorchScript or torch.export, with contract dim names.

Both paths take the same `IOSpec`. TorchScript gets `dynamic_axes`; torch.export runs `torch.export.export`
first, so that a specialised or guarded dimension fails loudly here instead of silently inside the ONNX
exporter, with `dynamic_shapes` in one of two modes (`DYNAMIC_SHAPES`):
- `named`: one named `Dim` per symbolic axis of the contract (a multiple of its step where the spec says so);
  torch raises when it would specialise one;
- `auto`: `Dim.AUTO` on every input dim; torch keeps symbolic what the model lets it and specialises the rest
  silently. `auto_dims` then reads, per input dim, whether the program specialised it, and whether one of the
  program's input guards pins a contract-dynamic dim to its example value; either refuses (UsageError, exit 2,
  naming the dim and the guard). Dims the contract fixes (`pixel_values`' 1536) that torch left symbolic
  are pinned to their example value in the ONNX inputs (`pin_static_dims`), so the I/O contract is the same.
"""

import contextlib
import inspect
import io
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import onnx
import onnx.inliner
import torch

from vlm_vision_onnx.core.errors import UsageError

#: The torch.export path's ways of declaring the variable dims (see the module docstring).
DYNAMIC_SHAPES = ("named", "auto")
DEFAULT_DYNAMIC_SHAPES = "named"


@dataclass
class IOSpec:
    """Input/output names; per name, {axis: symbolic dim name}; per dim name, what it is a multiple of."""

    input_names: list[str]
    output_names: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    multiple_of: dict[str, int] = field(default_factory=dict)


def export_torchscript(module: torch.nn.Module, args: tuple, spec: IOSpec, opset: int) -> onnx.ModelProto:
    """torch.onnx.export(dynamo=False) with dynamic_axes on every variable dim; weights added afterwards.

    The exporter writes the graph alone (`export_params=False`, into a temporary folder, never a
    BytesIO) and hands its initializers over from memory: serialising them inside the exporter
    costs three copies of the weights (its C++ proto, the bytes, their re-parse to add the
    onnxscript functions) and fails past protobuf's 2 GiB (the 8B tower). The returned proto holds
    one copy of the weights (the caller writes it with external data when large).
    """
    initializers: dict[str, torch.Tensor] = {}
    with tempfile.TemporaryDirectory(prefix="vision-onnx-export-") as tmp:
        path = Path(tmp) / "graph.onnx"
        with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()), _capture_initializers(initializers):
            warnings.simplefilter("ignore")
            torch.onnx.export(
                module,
                args,
                str(path),
                dynamo=False,
                export_params=False,
                input_names=spec.input_names,
                output_names=spec.output_names,
                dynamic_axes=spec.dynamic_axes,
                opset_version=opset,
                do_constant_folding=True,
            )
        model = onnx.load(str(path))
    model = inline_functions(model)  # on the graph alone: the inliner serialises the model it is given
    return add_initializers(model, initializers)


@contextlib.contextmanager
def _capture_initializers(found: dict[str, torch.Tensor]):
    """Keep the initializers the TorchScript exporter settles on (after constant folding and
    de-duplication) in `found`, {graph input name: tensor}, while the context is open."""
    real = torch._C._jit_pass_onnx_deduplicate_initializers

    def capture(graph, params, training):
        params = real(graph, params, training)
        found.clear()
        found.update(params)
        return params

    torch._C._jit_pass_onnx_deduplicate_initializers = capture
    try:
        yield
    finally:
        torch._C._jit_pass_onnx_deduplicate_initializers = real


def add_initializers(model: onnx.ModelProto, tensors: dict[str, torch.Tensor]) -> onnx.ModelProto:
    """Turn the graph inputs named in `tensors` into initializers holding those tensors (emptying
    `tensors` as it goes, so that only one extra copy of a single weight exists at a time)."""
    if not tensors:
        raise ValueError("the TorchScript exporter reported no initializers (its internals changed?)")
    keep = [v for v in model.graph.input if v.name not in tensors]
    names = [v.name for v in model.graph.input if v.name in tensors]
    del model.graph.input[:]
    model.graph.input.extend(keep)
    for name in names:
        model.graph.initializer.add().CopyFrom(_tensor_proto(name, tensors.pop(name)))
    return model


def _tensor_proto(name: str, tensor: torch.Tensor) -> onnx.TensorProto:
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        proto = onnx.helper.make_tensor(name, onnx.TensorProto.BFLOAT16, list(tensor.shape),
                                        tensor.view(torch.uint16).numpy().tobytes(), raw=True)
        return proto
    return onnx.numpy_helper.from_array(tensor.numpy(), name)


def dynamic_shapes(spec: IOSpec, args: tuple, mode: str) -> dict[str, dict[int, object]]:
    """torch.export's `dynamic_shapes`: {input: {axis: Dim}}, named Dims of the contract or Dim.AUTO everywhere."""
    if mode == "auto":
        return {name: {axis: torch.export.Dim.AUTO for axis in range(arg.dim())}
                for name, arg in zip(spec.input_names, args)}
    if mode != "named":
        raise UsageError(f"--dynamic-shapes must be one of {', '.join(DYNAMIC_SHAPES)}, got {mode!r}")
    dims = {}
    for name in spec.input_names:
        for dim in spec.dynamic_axes[name].values():
            step = spec.multiple_of.get(dim, 1)
            dims.setdefault(dim, step * torch.export.Dim(f"{dim}_div_{step}") if step > 1 else torch.export.Dim(dim))
    return {name: {axis: dims[dim] for axis, dim in spec.dynamic_axes[name].items()} for name in spec.input_names}


def export_dynamo(module: torch.nn.Module, args: tuple, spec: IOSpec, opset: int,
                  dynamic: str = DEFAULT_DYNAMIC_SHAPES, facts: dict | None = None) -> onnx.ModelProto:
    """torch.export.export (`dynamic`: named Dims or Dim.AUTO), then torch.onnx.export of the ExportedProgram.

    With "auto", `facts` (when given) receives `auto_dims`' record; a contract-dynamic dim that torch
    specialised or pinned raises UsageError before the ONNX export."""
    program = torch.export.export(module, args, dynamic_shapes=dynamic_shapes(spec, args, dynamic), strict=False)
    record = {"mode": dynamic}
    if dynamic == "auto":
        record.update(auto_dims(program, module, args, spec))
    if facts is not None:
        facts.update(record)
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        onnx_program = torch.onnx.export(
            program,
            args,
            dynamo=True,
            input_names=spec.input_names,
            output_names=spec.output_names,
            opset_version=opset,
            optimize=True,
            custom_translation_table=getattr(module, "onnx_translation_table", None),
        )
    model = onnx_program.model_proto
    if dynamic == "auto":
        pin_static_dims(model, spec, args)
    return model


class _Sizes:
    """An input as torch.export's guard code reads it (`L['x'].size()[0]`): sizes, contiguous strides."""

    def __init__(self, shape: list[int]):
        self.shape = tuple(shape)

    def size(self) -> tuple[int, ...]:
        return self.shape

    def stride(self) -> tuple[int, ...]:
        strides, step = [], 1
        for dim in reversed(self.shape):
            strides.append(step)
            step *= dim
        return tuple(reversed(strides))

    def storage_offset(self) -> int:
        return 0


def _failing_guard(guards: list[str], params: list[str], shapes: list[list[int]]) -> tuple[str | None, list[str]]:
    """(the first guard that fails for inputs of `shapes`, the guards that could not be evaluated)."""
    scope = {"L": {p: _Sizes(s) for p, s in zip(params, shapes)}}
    unreadable = []
    for code in guards:
        try:
            if not eval(code, {"__builtins__": {"max": max, "min": min, "abs": abs}}, scope):
                return code, unreadable
        except Exception:  # noqa: BLE001 -- a guard this reader does not model: listed, not judged
            unreadable.append(code)
    return None, unreadable


def auto_dims(program, module: torch.nn.Module, args: tuple, spec: IOSpec) -> dict:
    """What torch.export did with Dim.AUTO on every input dim: {dims: [{input, axis, example, contract, torch[,
    guard]}], specialised, pinned, guards, unreadable_guards, range_constraints}.

    UsageError naming the dim and the guard when a dim the contract declares dynamic was specialised (an int
    in the program's input shapes) or is pinned: one of the program's input guards fails when that contract
    dim moves to its next admissible value (example + its step, `IOSpec.multiple_of`) in every input axis that
    carries it (`num_images` is axis 0 of each Phi-4 input: guards relate them)."""
    specs = [s for s in program.graph_signature.input_specs if s.kind.name == "USER_INPUT"]
    nodes = {n.name: n for n in program.graph.nodes if n.op == "placeholder"}
    fake = [list(nodes[s.arg.name].meta["val"].shape) for s in specs]
    params = list(inspect.signature(module.forward).parameters)
    guards = list(getattr(program, "_guards_code", None) or [])
    examples = [list(a.shape) for a in args]
    dims, refused = [], []
    for i, name in enumerate(spec.input_names):
        for axis, entry in enumerate(fake[i]):
            dynamic = spec.dynamic_axes.get(name, {}).get(axis)
            record = {"input": name, "axis": axis, "example": examples[i][axis], "contract": dynamic or "static"}
            if isinstance(entry, int):
                mentioning = [g for g in guards if f"L['{params[i]}'].size()[{axis}]" in g]
                record["torch"] = f"specialised to {entry}"
                record["guard"] = (f"guard {mentioning[0]}" if mentioning else
                                   "no guard: torch.export specialises every dim that is 0 or 1 in the example")
                if dynamic:
                    refused.append(record)
            else:
                record["torch"] = f"symbolic {entry}"
            dims.append(record)
    pinned = []
    for dim in dict.fromkeys(d for axes in spec.dynamic_axes.values() for d in axes.values()):
        carriers = [(i, axis) for i, name in enumerate(spec.input_names)
                    for axis, d in spec.dynamic_axes.get(name, {}).items() if d == dim]
        if not carriers or any(isinstance(fake[i][axis], int) for i, axis in carriers):
            continue  # an output-only dim, or specialised (refused above)
        moved = [list(shape) for shape in examples]
        for i, axis in carriers:
            moved[i][axis] += spec.multiple_of.get(dim, 1)
        failing, _ = _failing_guard(guards, params, moved)
        if failing is not None:
            for record in dims:
                if record["contract"] == dim:
                    record["torch"] += f", pinned to {record['example']} by a guard"
                    record["guard"] = f"guard {failing}"
            pinned.append(dim)
            refused.append(next(r for r in dims if r["contract"] == dim))
    _, unreadable = _failing_guard(guards, params, examples)
    facts = {"dims": dims, "specialised": [f"{d['input']}[{d['axis']}]" for d in dims if d["torch"].startswith("specialised")],
             "pinned": pinned, "guards": guards, "unreadable_guards": unreadable,
             "range_constraints": {str(k): str(v) for k, v in program.range_constraints.items()}}
    if refused:
        record = refused[0]
        raise UsageError(
            f"torch.export with Dim.AUTO made {record['input']} axis {record['axis']} ({record['contract']}, "
            f"{record['example']} in the example) {record['torch']} ({record['guard']}); that dim must stay dynamic: "
            "give an example with at least two items along it that differ from each other (--example-grid), or use "
            "--dynamic-shapes named (torch then names the constraint it cannot meet)")
    return facts


def pin_static_dims(model: onnx.ModelProto, spec: IOSpec, args: tuple) -> list[str]:
    """Give every input axis the contract fixes its example size when the exporter left it symbolic (Dim.AUTO
    keeps `pixel_values`' 1536 symbolic, under a guard), here and wherever the graph names that symbol.
    Returns the symbols pinned."""
    pinned: dict[str, int] = {}
    for value, arg in zip(model.graph.input, args):
        dims = value.type.tensor_type.shape.dim
        for axis, dim in enumerate(dims):
            if axis not in spec.dynamic_axes.get(value.name, {}) and dim.HasField("dim_param"):
                pinned[dim.dim_param] = int(arg.shape[axis])
    for value in list(model.graph.input) + list(model.graph.value_info) + list(model.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in pinned:
                dim.dim_value = pinned[dim.dim_param]
    return sorted(pinned)


def inline_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """Inline model-local functions (TorchScript keeps an onnxscript symbolic as one), keeping the
    opset imports their bodies need, so that both exporters emit the same nodes; output types re-inferred."""
    if not model.functions:
        return model
    needed = {o.domain: o.version for f in model.functions for o in f.opset_import}
    own = {f.domain for f in model.functions}
    model = onnx.inliner.inline_local_functions(model)
    if model.functions:
        raise ValueError(f"could not inline the model-local functions {[f.name for f in model.functions]} "
                         "(their opset imports differ from the model's)")
    imports = {o.domain: o.version for o in model.opset_import if o.domain not in own}
    del model.opset_import[:]
    model.opset_import.extend(onnx.helper.make_opsetid(d, v) for d, v in {**needed, **imports}.items() if d not in own)
    # TorchScript's shape inference stops at the function node; the static output dims come back here.
    inferred = onnx.shape_inference.infer_shapes(model)
    for output, found in zip(model.graph.output, inferred.graph.output):
        output.type.CopyFrom(found.type)
    return model


def name_io_dims(model: onnx.ModelProto, spec: IOSpec) -> None:
    """Give every symbolic I/O axis its contract name, renaming the same symbol inside the graph too.

    torch.export names symbols itself (`s0`, `s0//4`, ...); users and the later stages see only the
    contract names (`num_patches`, `num_images`, `num_tokens`).
    """
    renames: dict[str, str] = {}
    for value in list(model.graph.input) + list(model.graph.output):
        dims = value.type.tensor_type.shape.dim
        for axis, name in spec.dynamic_axes.get(value.name, {}).items():
            old = dims[axis].dim_param if dims[axis].HasField("dim_param") else ""
            if old and old != name:
                renames[old] = name
            dims[axis].dim_param = name
    for value in list(model.graph.value_info) + list(model.graph.input) + list(model.graph.output):
        for dim in value.type.tensor_type.shape.dim:
            if dim.HasField("dim_param") and dim.dim_param in renames:
                dim.dim_param = renames[dim.dim_param]


def set_metadata(model: onnx.ModelProto, metadata: dict[str, str]) -> None:
    """Replace/add ONNX metadata_props (string values)."""
    existing = {p.key: p for p in model.metadata_props}
    for key, value in metadata.items():
        prop = existing.get(key) or model.metadata_props.add()
        prop.key, prop.value = key, str(value)


#: `--ops`: contrib keeps ONNX Runtime's com.microsoft ops where the export has them (faster there); standard
#: lowers them to ai.onnx ops (quantize/passes/standard_attention.py) for every other runtime.
OPS = ("contrib", "standard")


def lower_to_standard(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model with its com.microsoft MultiHeadAttention nodes (Loop bodies included) lowered to standard ops;
    UsageError naming what is left when an op outside ai.onnx remains."""
    import onnx_ir as ir

    from quantize.passes import standard_attention

    graph = ir.serde.deserialize_model(model)
    refused: dict[str, str] = {}
    standard_attention.apply(graph, refused)
    left = sorted({f"{n.domain}.{n.op_type}" for n in ir.traversal.RecursiveGraphIterator(graph.graph)
                   if n.domain not in ("", "ai.onnx")})
    if left:
        reasons = "; ".join(f"{name}: {why}" for name, why in refused.items())
        raise UsageError(f"--ops standard: the export keeps {', '.join(left)}" + (f" ({reasons})" if reasons else ""))
    return ir.serde.serialize_model(graph)
