"""Export a torch module to ONNX through TorchScript or torch.export, with contract dim names.

Both paths take the same `IOSpec`. TorchScript gets `dynamic_axes`; torch.export gets `dynamic_shapes`
with one named `Dim` per symbolic axis and runs `torch.export.export` first, so that a specialised or
guarded dimension fails loudly here instead of silently inside the ONNX exporter.
"""

import contextlib
import io
import warnings
from dataclasses import dataclass, field

import onnx
import onnx.inliner
import torch


@dataclass
class IOSpec:
    """Input/output names; per name, {axis: symbolic dim name}; per dim name, what it is a multiple of."""

    input_names: list[str]
    output_names: list[str]
    dynamic_axes: dict[str, dict[int, str]]
    multiple_of: dict[str, int] = field(default_factory=dict)


def export_torchscript(module: torch.nn.Module, args: tuple, spec: IOSpec, opset: int) -> onnx.ModelProto:
    """torch.onnx.export(dynamo=False) with dynamic_axes on every variable dim."""
    buffer = io.BytesIO()
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            args,
            buffer,
            dynamo=False,
            input_names=spec.input_names,
            output_names=spec.output_names,
            dynamic_axes=spec.dynamic_axes,
            opset_version=opset,
            do_constant_folding=True,
        )
    return inline_functions(onnx.load_from_string(buffer.getvalue()))


def export_dynamo(module: torch.nn.Module, args: tuple, spec: IOSpec, opset: int) -> onnx.ModelProto:
    """torch.export.export with named Dims, then torch.onnx.export of the ExportedProgram."""
    dims = {}
    for name in spec.input_names:
        for dim in spec.dynamic_axes[name].values():
            step = spec.multiple_of.get(dim, 1)
            dims.setdefault(dim, step * torch.export.Dim(f"{dim}_div_{step}") if step > 1 else torch.export.Dim(dim))
    dynamic_shapes = {name: {axis: dims[dim] for axis, dim in spec.dynamic_axes[name].items()}
                      for name in spec.input_names}
    program = torch.export.export(module, args, dynamic_shapes=dynamic_shapes, strict=False)
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
    return onnx_program.model_proto


def inline_functions(model: onnx.ModelProto) -> onnx.ModelProto:
    """Inline model-local functions (TorchScript keeps an onnxscript symbolic as one), keeping the
    opset imports their bodies need, so that both exporters emit the same nodes."""
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
