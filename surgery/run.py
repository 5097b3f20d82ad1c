"""Running models with ONNX Runtime: sessions, random inputs, comparisons, shape parsing.

Every command verifies its result by running it here; nothing in `surgery` claims a model works
without having run it.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.session import ORT_ERRORS, ort_error_line
from vlm_vision_onnx.core.session import run as run_session
from vlm_vision_onnx.core.session import session as open_session

#: Outputs match when max|a - b| <= TOLERANCE * max(1, max|reference|) (float outputs); ints must be equal.
#: Surgery only rewrites shapes, so it holds its results to a tighter bound than the stages that fuse ops.
TOLERANCE = 1e-5

_NP_OF_ONNX = {
    onnx.TensorProto.FLOAT: np.float32,
    onnx.TensorProto.DOUBLE: np.float64,
    onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.INT64: np.int64,
    onnx.TensorProto.INT32: np.int32,
    onnx.TensorProto.INT8: np.int8,
    onnx.TensorProto.UINT8: np.uint8,
    onnx.TensorProto.BOOL: np.bool_,
}


def run(src, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run `src` (a path, an onnx-ir model or a ModelProto) once; returns every graph output by name."""
    with open_session(src) as session:
        return run_session(session, feeds)


def try_run(src, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray] | None, str | None]:
    """`run`, but returns (None, ORT's reason on one line) when ORT fails to load or run it."""
    try:
        return run(src, feeds), None
    except ORT_ERRORS as exc:
        return None, one_line(exc)
    except UsageError as exc:  # ORT refused to load it
        return None, str(exc)


def one_line(exc: BaseException) -> str:
    """The useful part of an ORT error on one line (see core.session.ort_error_line)."""
    return ort_error_line(exc)


def random_array(elem_type: int, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """Random input data: normal floats, small non-negative ints (0..3), random bools."""
    dtype = _NP_OF_ONNX.get(elem_type)
    if dtype is None:
        raise UsageError(f"cannot make random data of ONNX type {onnx.TensorProto.DataType.Name(elem_type)}")
    if np.issubdtype(dtype, np.floating):
        return rng.standard_normal(shape).astype(dtype)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    return rng.integers(0, 4, shape).astype(dtype)


def input_specs(model: ir.Model) -> list[tuple[str, int, list[int | str | None]]]:
    """(name, ONNX element type, dims) of each graph input; a dim is an int, a symbol, or None."""
    specs = []
    for value in model.graph.inputs:
        dims = []
        for d in value.shape or []:
            dims.append(d if isinstance(d, int) else d.value)
        specs.append((value.name, int(value.dtype.value) if value.dtype else onnx.TensorProto.FLOAT, dims))
    return specs


def parse_shape(text: str) -> tuple[int, ...]:
    """'1x3x640x640' -> (1, 3, 640, 640); '' -> () (a scalar)."""
    if text == "":
        return ()
    try:
        dims = tuple(int(d) for d in text.lower().split("x"))
    except ValueError:
        raise UsageError(f"shape '{text}' is not like 1x3x640x640 (positive integers joined by x)") from None
    if any(d <= 0 for d in dims):
        raise UsageError(f"shape '{text}' has a dim <= 0; every dim must be a positive integer")
    return dims


def parse_named_shapes(items: list[str] | None, model: ir.Model, option: str) -> dict[str, tuple[int, ...]]:
    """['x=1x3x64x64', ...] -> {'x': (1, 3, 64, 64)}, checked against the model's inputs.

    Raises:
        UsageError: malformed item, a name that is not an input, a rank or static dim that disagrees.
    """
    specs = {name: dims for name, _, dims in input_specs(model)}
    shapes = {}
    for item in items or []:
        name, sep, text = item.partition("=")
        if not sep or not name:
            raise UsageError(f"{option} '{item}' is not NAME=SHAPE, e.g. {option} images=1x3x640x640")
        if name not in specs:
            listed = ", ".join(f"{n} {fmt_dims(d)}" for n, d in specs.items())
            raise UsageError(f"{option} '{item}': the model has no input named '{name}'; inputs are: {listed}")
        shape = parse_shape(text)
        dims = specs[name]
        if len(shape) != len(dims):
            raise UsageError(f"{option} '{item}': input '{name}' has rank {len(dims)} {fmt_dims(dims)}, not {len(shape)}")
        for axis, (want, got) in enumerate(zip(dims, shape)):
            if isinstance(want, int) and want != got:
                raise UsageError(f"{option} '{item}': input '{name}' axis {axis} is fixed to {want} in the model")
        shapes[name] = shape
    return shapes


def fmt_dims(dims) -> str:
    """[1, 'batch', None] -> '[1,batch,?]'."""
    return "[" + ",".join("?" if d is None else str(d) for d in dims) + "]"


def max_abs_diff(a: np.ndarray, b: np.ndarray) -> float:
    """max |a - b| (0.0 for empty arrays)."""
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def same_output(got: np.ndarray, ref: np.ndarray) -> tuple[bool, str]:
    """Whether `got` matches `ref` (shape, then values within TOLERANCE), and a short description."""
    if got.shape != ref.shape:
        return False, f"shape {list(got.shape)} != reference {list(ref.shape)}"
    if got.dtype != ref.dtype:
        return False, f"dtype {got.dtype} != reference {ref.dtype}"
    if not np.issubdtype(ref.dtype, np.floating):
        equal = bool(np.array_equal(got, ref))
        return equal, "equal" if equal else "integer values differ"
    if not np.all(np.isfinite(got)):
        return False, "non-finite values"
    diff = max_abs_diff(got, ref)
    scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 1.0)
    return diff <= TOLERANCE * scale, f"max abs diff {diff:.2e}"


def compare_outputs(got: dict[str, np.ndarray], ref: dict[str, np.ndarray]) -> tuple[bool, list[str]]:
    """Compare outputs by name; returns (all match, one line per output)."""
    ok, lines = True, []
    for name, ref_value in ref.items():
        if name not in got:
            ok = False
            lines.append(f"{name}: missing")
            continue
        match, text = same_output(got[name], ref_value)
        ok &= match
        lines.append(f"{name}: {text}{'' if match else '  MISMATCH'}")
    return ok, lines
