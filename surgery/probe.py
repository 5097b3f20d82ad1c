"""Probing: run a model at given input shapes and compare what it declares with the real sizes.

ONNX Runtime trusts declared shapes: two tensors with the same `dim_param` are planned as the same
size, a stale `value_info` is taken at its word. To see the truth, `observe` runs a *neutral* copy
of the model (same nodes, no shape claims: value_info dropped, output shapes cleared, every
non-static input dim given its own symbol) with every declared tensor added as an output, and
records each tensor's real shape. `conflicts` and `stale` then compare the declarations with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from surgery.grid import Grid
from surgery.run import fmt_dims, input_specs, random_array, try_run
from vlm_vision_onnx.core.errors import UsageError

#: Symbols that exporters generate (torch.export's s77, ONNX inference's unk__3, naive scripts' ?).
GENERATED_SYMBOL = re.compile(r"^(s\d+|unk__\d+|\?|)$")


@dataclass(frozen=True)
class Declared:
    """What the model says about one tensor: element type and dims (int, symbol str, or None)."""

    name: str
    role: str  # "input", "output" or "value_info"
    dtype: ir.DataType | None
    dims: tuple[int | str | None, ...] | None


def _dims(shape: ir.Shape | None) -> tuple[int | str | None, ...] | None:
    if shape is None:
        return None
    return tuple(d if isinstance(d, int) else d.value for d in shape)


def declared(model: ir.Model) -> dict[str, Declared]:
    """Every shape claim of the main graph: inputs, outputs, value_info."""
    graph = model.graph
    out: dict[str, Declared] = {}
    for value in graph.inputs:
        out[value.name] = Declared(value.name, "input", value.dtype, _dims(value.shape))
    for value in graph.outputs:
        out[value.name] = Declared(value.name, "output", value.dtype, _dims(value.shape))
    for node in graph:
        for value in node.outputs:
            if value.name not in out and (value.shape is not None or value.type is not None):
                out[value.name] = Declared(value.name, "value_info", value.dtype, _dims(value.shape))
    return out


def drop_shape_claims(model: ir.Model, keep_outputs: dict[str, list] | None = None) -> None:
    """Drop value_info (shapes and types of intermediates) and output shapes, in place.

    `keep_outputs` maps an output name to dims to keep (None entries become unknown dims).
    """
    graph = model.graph
    outputs = {v.name for v in graph.outputs}
    for node in graph:
        for value in node.outputs:
            if value.name not in outputs:
                value.shape = None
                value.type = None
    for value in graph.outputs:
        dims = (keep_outputs or {}).get(value.name)
        value.shape = ir.Shape(dims) if dims is not None else None


def neutral(model: ir.Model, extra_outputs: list[str] = ()) -> ir.Model:
    """A copy that computes the same thing and claims nothing that ORT could plan with.

    value_info and output shapes are dropped; each non-static input dim gets a unique symbol
    (`probe_<input>_<axis>`); `extra_outputs` (intermediate tensors) become graph outputs.
    """
    copy = model.clone()
    graph = copy.graph
    for value in graph.inputs:
        if value.shape is not None:
            value.shape = ir.Shape([
                d if isinstance(d, int) else f"probe_{value.name}_{axis}" for axis, d in enumerate(value.shape)
            ])
    drop_shape_claims(copy)
    outputs = {v.name for v in graph.outputs}
    by_name = {v.name: v for n in graph for v in n.outputs}
    for name in extra_outputs:
        if name in by_name and name not in outputs:
            graph.outputs.append(by_name[name])
            outputs.add(name)
    return copy


def probe_feeds(model: ir.Model, shapes: dict[str, tuple[int, ...]], grid: Grid | None = None,
                seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs at the probe shapes.

    Shapes come from `shapes` (the user's --probe), else from static dims; a symbolic leading dim
    defaults to 1. With an export grid, `grid_thw` gets its rows and `pixel_values` its patch count.

    Raises:
        UsageError: an input has a symbolic dim (other than the leading one) and no probe shape.
    """
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, elem_type, dims in input_specs(model):
        if name in shapes:
            shape = shapes[name]
        elif grid is not None and name == "grid_thw":
            feeds[name] = np.array(grid.rows, dtype=np.int64)
            continue
        elif grid is not None and name == "pixel_values" and len(dims) == 2 and isinstance(dims[1], int):
            shape = (grid.num_patches, dims[1])
        else:
            shape = []
            for axis, d in enumerate(dims):
                if isinstance(d, int):
                    shape.append(d)
                elif axis == 0:
                    shape.append(1)
                else:
                    example = "x".join(str(v) if isinstance(v, int) else "1" if a == 0 else "SIZE"
                                       for a, v in enumerate(dims))
                    raise UsageError(
                        f"input '{name}' has non-static dims {fmt_dims(dims)}; say the size to run it at "
                        f"with --probe {name}={example}"
                    )
            shape = tuple(shape)
        feeds[name] = random_array(elem_type, tuple(shape), rng)
    return feeds


def observe(model: ir.Model, feeds: dict[str, np.ndarray], names: list[str] | None = None
            ) -> tuple[dict[str, tuple[tuple[int, ...], np.dtype]] | None, dict[str, np.ndarray] | None, str | None]:
    """Run the neutral copy of `model` at `feeds`; real (shape, dtype) of `names` (default: all declared).

    Returns (real shapes by name incl. inputs, the model's own outputs, None) or (None, None, error).
    """
    names = list(declared(model)) if names is None else names
    graph_outputs = [v.name for v in model.graph.outputs]
    outputs, error = try_run(neutral(model, names), feeds)
    if outputs is None:
        return None, None, error
    real = {k: (tuple(v.shape), v.dtype) for k, v in outputs.items()}
    real.update({k: (tuple(v.shape), v.dtype) for k, v in feeds.items()})
    return real, {k: outputs[k] for k in graph_outputs}, None


def conflicts(decl: dict[str, Declared], real: dict) -> list[dict]:
    """Symbols that stand for different real sizes: {symbol, sizes: {size: ['tensor axis k', ...]}}."""
    uses: dict[str, dict[int, list[str]]] = {}
    for name, d in decl.items():
        if d.dims is None or name not in real or len(real[name][0]) != len(d.dims):
            continue
        for axis, dim in enumerate(d.dims):
            if isinstance(dim, str):
                uses.setdefault(dim, {}).setdefault(real[name][0][axis], []).append(f"{name} axis {axis}")
    return [{"symbol": sym, "sizes": sizes} for sym, sizes in uses.items() if len(sizes) > 1]


def stale(decl: dict[str, Declared], real: dict) -> list[dict]:
    """Declarations contradicted by the run: {tensor, role, declared, real, why}."""
    out = []
    for name, d in decl.items():
        if name not in real:
            continue
        shape, dtype = real[name]
        why = None
        if d.dtype is not None and d.dtype.numpy() != dtype:
            why = f"type {d.dtype.name} but really {dtype}"
        elif d.dims is not None and len(d.dims) != len(shape):
            why = f"rank {len(d.dims)} but really {len(shape)}"
        elif d.dims is not None:
            bad = [f"axis {a} {want} but really {got}" for a, (want, got) in enumerate(zip(d.dims, shape))
                   if isinstance(want, int) and want != got]
            why = ", ".join(bad) or None
        if why:
            out.append({"tensor": name, "role": d.role, "declared": fmt_dims(d.dims or ()),
                        "real": fmt_dims(shape), "why": why})
    return out


def describe_conflict(conflict: dict, limit: int = 3) -> str:
    """One line: "'?' = 1 (images axis 0, ...) vs 32 (r0 axis 2, ...)"."""
    parts = []
    for size, where in sorted(conflict["sizes"].items()):
        shown = ", ".join(where[:limit]) + (f", +{len(where) - limit} more" if len(where) > limit else "")
        parts.append(f"{size} ({shown})")
    return f"symbol '{conflict['symbol']}' is used for different sizes: " + " vs ".join(parts)
