"""Probe sizes: a default for symbolic image sizes, and a second size to check claims at.

Detectors such as SCRFD declare `input.1 [1, 3, ?, ?]` and YuNet `[1, 3, height, width]`. When the
user gives no `--probe`, `guess_shapes` tries 640×640, then smaller multiples of 32 (608, 576, ...,
32), on a claim-free copy of the model, and takes the first that runs; only when none runs does a
command ask for `--probe`. `other_sizes` gives the second size doctor and fix-dims check every
declared shape at: each non-static dim but the batch changed (image sides halved to a multiple of
32, 640 -> 320; other dims halved, or doubled when odd or 1).
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir

from surgery.probe import neutral, probe_feeds
from surgery.run import fmt_dims, input_specs, open_session, random_array
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.session import ORT_ERRORS, ort_error_line

#: Image sides tried, in order, when an image input's height and width are symbolic.
GUESSES = tuple(range(640, 31, -32))


def image_axes(dims: list) -> tuple[int, int] | None:
    """(H axis, W axis) of a 4-D image input whose sides are not static: NCHW with a static C, or
    NHWC with C in (1, 3, 4); None for anything else."""
    if len(dims) != 4:
        return None
    if isinstance(dims[1], int) and not isinstance(dims[2], int) and not isinstance(dims[3], int):
        return 2, 3
    if dims[3] in (1, 3, 4) and not isinstance(dims[1], int) and not isinstance(dims[2], int):
        return 1, 2
    return None


def _shape_at(dims: list, axes: tuple[int, int], side: int) -> tuple[int, ...]:
    return tuple(side if a in axes else d if isinstance(d, int) else 1 for a, d in enumerate(dims))


def guess_shapes(model: ir.Model, shapes: dict[str, tuple[int, ...]]) -> tuple[dict[str, tuple[int, ...]], str | None]:
    """`shapes` plus a guessed shape for each image input with symbolic sides that `shapes` lacks.

    Returns (shapes, a line saying what was guessed, or None when nothing was).

    Raises:
        UsageError: no guessed size runs (the line says which were tried and why the last failed).
    """
    images = {name: (image_axes(dims), dims) for name, _, dims in input_specs(model)
              if name not in shapes and image_axes(dims) is not None}
    if not images:
        return shapes, None
    copy = neutral(model)
    error = ""
    with open_session(copy) as session:
        names = [o.name for o in session.get_outputs()]
        for side in GUESSES:
            trial = {**shapes, **{n: _shape_at(dims, axes, side) for n, (axes, dims) in images.items()}}
            feeds = probe_feeds(model, trial)
            try:
                session.run(names, feeds)
            except ORT_ERRORS as exc:
                error = ort_error_line(exc)
                continue
            tried = "" if side == GUESSES[0] else f" ({GUESSES[0]}..{side + 32} fail: {error})"
            said = ", ".join(f"{n}={'x'.join(map(str, trial[n]))}" for n in images)
            return trial, (f"no --probe given for the symbolic image size of "
                           f"{', '.join(f'{n} {fmt_dims(d)}' for n, (_, d) in images.items())}: "
                           f"running at {said}{tried}")
    name, (_, dims) = next(iter(images.items()))
    example = "x".join(str(d) if isinstance(d, int) else "1" if a == 0 else "SIZE" for a, d in enumerate(dims))
    raise UsageError(f"input '{name}' has non-static dims {fmt_dims(dims)} and no guessed size runs "
                     f"({GUESSES[0]}×{GUESSES[0]} down to {GUESSES[-1]}×{GUESSES[-1]}; the last fails: {error}); "
                     f"say the size with --probe {name}={example}")


def _other(size: int, image_side: bool) -> int:
    if image_side:
        half = size // 2 // 32 * 32
        return half if half >= 32 else size * 2
    return size // 2 if size % 2 == 0 and size >= 2 else size * 2


def other_sizes(model: ir.Model, feeds: dict[str, np.ndarray], skip: set[str] = frozenset(), seed: int = 1
                ) -> dict[str, np.ndarray] | None:
    """Feeds at a second size: every non-static dim except axis 0 changed (see the module docstring);
    None when no input has such a dim. Inputs in `skip` keep their feeds."""
    rng = np.random.default_rng(seed)
    out, changed = {}, False
    for name, elem_type, dims in input_specs(model):
        shape = list(feeds[name].shape)
        if name not in skip:
            axes = image_axes(dims) or ()
            for a, d in enumerate(dims):
                if a > 0 and not isinstance(d, int):
                    shape[a] = _other(shape[a], a in axes)
                    changed = True
        out[name] = feeds[name] if tuple(shape) == feeds[name].shape else random_array(elem_type, tuple(shape), rng)
    return out if changed else None
