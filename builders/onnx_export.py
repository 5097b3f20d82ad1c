"""Export a torch module to ONNX through TorchScript or torch.export, with contract dim names.

Both paths take the same `IOSpec`. TorchScript gets `dynamic_axes`; torch.export gets `dynamic_shapes`
with one named `Dim` per symbolic axis and runs `torch.export.export` first, so that a specialised or
guarded dimension fails loudly here instead of silently inside the ONNX exporter.
"""

import contextlib
import io
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

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
