"""Where each output keeps its samples: found by running at batch b and 2b, checked value by value.

SCRFD heads `Reshape` to `[-1, k]`, so at batch 8 output `443` is `[8·12800, 1]`: axis 0 holds
the samples' rows one after another. Other models keep the batch on axis 0 (`[8, 16800, 4]`) or
move it to another axis. `find_layouts` runs the rewritten model at b and 2b: an output whose dim
on one axis doubles (and nothing else changes) keeps each chunk of b samples as a block of `rows`
along that axis; an output that does not change at all is the same for every sample. The two
halves at 2b must then equal the samples run through the original one chunk at a time, else the
model mixes samples in a way no chunking explains, and set-batch refuses it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import onnx_ir as ir

from surgery.batch_constants import batch_twice
from surgery.run import fmt_dims, same_output, try_run
from vlm_vision_onnx.core.errors import CheckFailed


@dataclass(frozen=True)
class Layout:
    """One output's batch layout: `axis` holding the samples (None: the same for every sample), `rows`,
    the size along it of one chunk of b samples (b = the old batch), and `block`: the chunks' rows
    follow each other in blocks of `block` (`block == rows`: each chunk is one contiguous run; SCRFD's
    `Transpose(perm=[2, 3, 0, 1])` heads interleave the samples in blocks of 2 rows)."""

    axis: int | None
    rows: int
    block: int = 0

    def describe(self, chunk: int) -> str:
        if self.axis is None:
            return "no batch axis (the same for every sample)"
        unit = "sample" if chunk == 1 else f"chunk of {chunk} samples"
        if self.rows == chunk and self.block == self.rows:
            return f"batch on axis {self.axis}"
        size = f"axis {self.axis} = batch × {self.rows // chunk}" if self.rows % chunk == 0 else \
            f"axis {self.axis} = {self.rows} per {unit}"
        if self.block == self.rows:
            return f"{size} (each {unit}'s {self.rows} in turn, contiguous)"
        return (f"{size}, samples interleaved: blocks of {self.block} from each {unit} in turn "
                f"({unit} i = that axis viewed as [{self.rows // self.block}, batch, {self.block}], [:, i])")

    def pieces(self, value: np.ndarray, count: int) -> list[np.ndarray] | None:
        """`value` split into `count` chunks along the axis (None when its size does not fit)."""
        if self.axis is None:
            return [value] * count
        if self.axis >= value.ndim or value.shape[self.axis] != count * self.rows:
            return None
        if self.block == self.rows:
            return np.split(value, count, axis=self.axis)
        front = np.moveaxis(value, self.axis, 0)
        grouped = front.reshape(self.rows // self.block, count, self.block, *front.shape[1:])
        return [np.moveaxis(grouped[:, i].reshape(self.rows, *front.shape[1:]), 0, self.axis) for i in range(count)]

    def to_json(self) -> dict:
        return asdict(self)


def layout_of(name: str, shape_b: tuple[int, ...], shape_2b: tuple[int, ...]) -> Layout:
    """The layout of one output from its shapes at b and 2b.

    Raises:
        CheckFailed: no single axis grows by exactly the batch.
    """
    if len(shape_b) == len(shape_2b):
        grown = [a for a, (d, e) in enumerate(zip(shape_b, shape_2b)) if d != e]
        if not grown:
            return Layout(None, 0)
        if len(grown) == 1 and shape_2b[grown[0]] == 2 * shape_b[grown[0]]:
            return Layout(grown[0], shape_b[grown[0]], shape_b[grown[0]])
    raise CheckFailed(f"output '{name}' is {fmt_dims(shape_b)} at one batch and {fmt_dims(shape_2b)} at twice "
                      "that: no single axis grows with the batch, so its samples cannot be told apart; "
                      "set-batch cannot rewrite this model")


def compare_chunks(got: dict[str, np.ndarray], refs: list[dict[str, np.ndarray]], layouts: dict[str, Layout]
                   ) -> tuple[bool, dict[str, str]]:
    """Split each output of `got` by its layout into len(refs) chunks and compare chunk i with refs[i].

    Returns (all equal, {output: worst line}).
    """
    ok, worst = True, {}
    for name, layout in layouts.items():
        pieces = layout.pieces(got[name], len(refs)) if name in got else None
        if pieces is None:
            ok = False
            shape = list(got[name].shape) if name in got else "missing"
            worst[name] = f"shape {shape} does not hold {len(refs)} chunks of {layout.rows} on axis {layout.axis}  MISMATCH"
            continue
        results = [same_output(piece, ref[name]) for piece, ref in zip(pieces, refs)]
        bad = [line for same, line in results if not same]
        if bad:
            ok = False
            worst[name] = bad[0] + "  MISMATCH"
        else:
            worst[name] = max((line for _, line in results), key=_diff)
    return ok, worst


def _matching_block(name: str, layout: Layout, got: dict, refs: list[dict]) -> Layout | None:
    """`layout` with the block size (contiguous first, then the divisors of rows, largest first)
    under which every chunk of `got` equals its reference; None when none does."""
    if layout.axis is None:
        return layout if compare_chunks(got, refs, {name: layout})[0] else None
    blocks = [layout.rows] + [d for d in range(layout.rows - 1, 0, -1) if layout.rows % d == 0]
    for block in blocks:
        trial = Layout(layout.axis, layout.rows, block)
        if compare_chunks(got, refs, {name: trial})[0]:
            return trial
    return None


def _diff(line: str) -> float:
    return float(line.rsplit(" ", 1)[-1]) if line.startswith("max abs diff") else 0.0


def find_layouts(new: ir.Model, reference: ir.Model, feeds: dict[str, np.ndarray]) -> dict[str, Layout]:
    """Each output's layout in `new` (batch symbolic), from runs at b (`feeds`) and 2b, confirmed by
    comparing the two halves at 2b with `reference` (the original) run on each half.

    Raises:
        CheckFailed: `new` fails at b or 2b, an output has no batch axis, or the halves do not match.
    """
    b = next(iter(feeds.values())).shape[0]
    feeds_2b = batch_twice(feeds)
    got_b, error = try_run(new, feeds)
    if got_b is None:
        raise CheckFailed(f"the rewritten model fails at batch {b}: {error}")
    got_2b, error = try_run(new, feeds_2b)
    if got_2b is None:
        raise CheckFailed(f"the rewritten model fails at batch {2 * b}: {error}")
    shaped = {name: layout_of(name, got_b[name].shape, got_2b[name].shape) for name in got_b}
    halves = [{k: v[:b] for k, v in feeds_2b.items()}, {k: v[b:] for k, v in feeds_2b.items()}]
    refs = []
    for half in halves:
        ref, error = try_run(reference, half)
        if ref is None:
            raise CheckFailed(f"the original fails at batch {b}: {error}")
        refs.append(ref)
    layouts, bad = {}, []
    for name, layout in shaped.items():
        found = _matching_block(name, layout, got_2b, refs)
        if found is None:
            bad.append(f"{name}: {compare_chunks(got_2b, refs, {name: layout})[1][name]}")
        else:
            layouts[name] = found
    if bad:
        raise CheckFailed(f"at batch {2 * b} the outputs mix samples: no chunking (contiguous or in blocks) matches "
                          f"the samples run one chunk at a time ({'; '.join(bad)})")
    return layouts
