"""GPTQ rounding for MatMulNBits: each weight rounded row by row along K, the rounding error of every row pushed
onto the rows not yet rounded through the inverse Hessian of the MatMul's calibration inputs (Frantar et al.,
"GPTQ", 2022). The error then lies where the inputs have little energy.

Why not ORT's: onnxruntime 1.31 ships GPTQ (`MatMulNBitsQuantizer` with `GPTQWeightOnlyQuantConfig`, from
Intel Neural Compressor), but its updates read the upper-triangular Cholesky factor of H^-1 below the diagonal
(`Hinv1[i:, i]`, `Hinv[i2:, i1:i2]`), where it is zero: no error is ever propagated and it returns
round-to-nearest bit for bit (`tests/test_quantize_gptq.py` shows both). This is the same algorithm with the
factor read on its rows, vectorised per row, in float32 after a float64 Cholesky; the MatMulNBits nodes are
built by ORT's own `make_matmul_weight_only_node` (same packing as its quantizers).

Shapes: a MatMul x [N, K] @ W [K, M]; H = sum over calibration tokens of x^T x, [K, K] (float64); blocks of
`block_size` rows of W share a scale (and zero point) per column: scales [K / block_size, M].
Rounding grid (as the round-to-nearest of ORT's Neural Compressor port, `quant_tensor`: with H = I the result is
that RTN): symmetric: scale = 2 max|w| / 15,
zero point 8 (none stored); asymmetric: scale = (max w - min w) / 15, zero point round(-min w / scale) in 0..15.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from vlm_vision_onnx.core import onnx_io, taps
from vlm_vision_onnx.core.progress import say

#: Dampening added to H's diagonal, as a fraction of its mean (GPTQ's default): keeps H invertible when there
#: are fewer calibration tokens than input channels.
DAMP = 0.01
#: Rows rounded before the error is pushed to the rest of W in one matrix product (GPTQ's lazy batch).
ROWS_PER_UPDATE = 128
#: Hessians accumulated at once (bytes of float64): the MatMul inputs are tapped in groups that fit.
HESSIAN_BUDGET = 1 << 30


def _grid(w: np.ndarray, bits: int, symmetric: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-column (scale, zero point) of the rows `w` [rows, M] that share a block."""
    maxq = 2 ** bits - 1
    if symmetric:
        peak = np.abs(w).max(axis=0)
        scale = np.where(peak > 0, 2 * peak / maxq, 1.0)
        return scale.astype(np.float32), np.full(w.shape[1], 2 ** (bits - 1), np.float32)
    low, high = w.min(axis=0), w.max(axis=0)
    scale = np.where(high > low, (high - low) / maxq, 1.0)
    zero = np.clip(np.round(-low / scale), 0, maxq)
    return scale.astype(np.float32), zero.astype(np.float32)


def round_weight(weight: np.ndarray, hessian: np.ndarray, bits: int, block_size: int, symmetric: bool
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPTQ of `weight` [K, M] under `hessian` [K, K]: (ints [K', M] uint8, scales [K'/block, M] float32,
    zero points [K'/block, M] uint8), K' = K padded with zero rows to a multiple of `block_size`."""
    k, m = weight.shape
    padded = -(-k // block_size) * block_size
    w = np.zeros((padded, m), np.float32)
    w[:k] = weight
    h = np.zeros((padded, padded))
    h[:k, :k] = hessian
    dead = np.diag(h) == 0  # inputs never seen (and the padding): their rows cannot matter
    h[dead, dead] = 1.0
    w[dead] = 0.0
    h[np.diag_indices(padded)] += DAMP * np.mean(np.diag(h))
    upper = np.linalg.cholesky(np.linalg.inv(h)).T.astype(np.float32)  # H^-1 = U^T U, U upper triangular
    del h
    maxq = 2 ** bits - 1
    ints = np.empty((padded, m), np.uint8)
    scales = np.empty((padded // block_size, m), np.float32)
    zeros = np.empty((padded // block_size, m), np.float32)
    batch = max(ROWS_PER_UPDATE, block_size)  # block sizes are powers of two: a batch holds whole blocks
    for start in range(0, padded, batch):
        end = min(start + batch, padded)
        rows = w[start:end].copy()
        errors = np.empty_like(rows)
        part = upper[start:end, start:end]
        for i in range(end - start):
            row = start + i
            block = row // block_size
            if row % block_size == 0:  # the block's grid, from its rows as updated so far
                scales[block], zeros[block] = _grid(rows[i:i + block_size], bits, symmetric)
            q = np.clip(np.round(rows[i] / scales[block]) + zeros[block], 0, maxq)
            ints[row] = q
            errors[i] = (rows[i] - (q - zeros[block]) * scales[block]) / part[i, i]
            rows[i + 1:] -= np.outer(part[i, i + 1:], errors[i])
        w[end:] -= upper[start:end, end:].T @ errors
    return ints, scales, zeros.astype(np.uint8)


def groups(names: dict[str, int], budget: int = HESSIAN_BUDGET) -> list[list[str]]:
    """The MatMul inputs `names` ({name: K}) in order, cut into groups whose float64 Hessians fit `budget` bytes."""
    found: list[list[str]] = [[]]
    size = 0
    for name, k in names.items():
        if found[-1] and size + k * k * 8 > budget:
            found.append([])
            size = 0
        found[-1].append(name)
        size += k * k * 8
    return [g for g in found if g]


def hessians(model_file: Path, names: dict[str, int], feeds: list[dict], threads: int) -> dict[str, np.ndarray]:
    """{MatMul input name: sum of x^T x over every token of every feed} ([K, K] float64) for `names` ({input
    name: K}): one run of the model per feed with those inputs tapped."""
    sums = {name: np.zeros((k, k)) for name, k in names.items()}

    def add(name: str, value: np.ndarray) -> None:
        x = value.reshape(-1, value.shape[-1]).astype(np.float32)
        sums[name] += x.T @ x  # one feed's product in float32 (a few thousand tokens), the sum in float64

    taps.tap(model_file, list(names), feeds, threads, each=add)
    return sums


def quantize(src: Path, dst: Path, skip: list[str], bits: int, block_size: int, symmetric: bool,
             accuracy_level: int, feeds: list[dict], threads: int) -> None:
    """`src` -> `dst` with GPTQ-rounded MatMulNBits in place of every main-graph MatMul with a constant 2-D weight
    not named in `skip`; H from `src` itself at `feeds`."""
    from onnxruntime.quantization.neural_compressor.weight_only import make_matmul_weight_only_node

    model = onnx.load(str(src))
    weights = {t.name: t for t in model.graph.initializer}
    targets = [n for n in model.graph.node if n.op_type == "MatMul" and n.name not in skip
               and n.input[1] in weights and len(weights[n.input[1]].dims) == 2]
    inputs = {n.input[0]: int(weights[n.input[1]].dims[0]) for n in targets}
    replaced: dict[str, onnx.NodeProto] = {}
    added: list[onnx.TensorProto] = []
    cut = groups(inputs)
    for index, group in enumerate(cut, 1):  # one group's Hessians in memory at a time
        say(f"  gptq: {len(group)} MatMul input(s) at {len(feeds)} calibration item(s), group {index}/{len(cut)}")
        found = hessians(src, {name: inputs[name] for name in group}, feeds, threads)
        for node in (n for n in targets if n.input[0] in found):
            weight = numpy_helper.to_array(weights[node.input[1]], base_dir=str(src.parent))
            ints, scales, zeros = round_weight(weight, found[node.input[0]], bits, block_size, symmetric)
            blocks = ints.shape[0] // block_size
            q_node, initializers = make_matmul_weight_only_node(
                node=node, weight_shape=weight.shape, num_bits=bits, group_size=block_size, k_blocks=blocks,
                q_weight=np.ascontiguousarray(ints.T).reshape(-1, block_size),
                scale=np.ascontiguousarray(scales.T).reshape(-1, 1),
                zero_point=None if symmetric else np.ascontiguousarray(zeros.T).reshape(-1, 1),
                accuracy_level=accuracy_level)
            replaced[node.name] = q_node
            added += initializers
        del found
    nodes = [replaced.get(n.name, n) for n in model.graph.node]
    used = {i for n in nodes for i in n.input}
    kept = [t for t in model.graph.initializer if t.name in used or t.name not in {n.input[1] for n in targets}]
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept + added)
    if not any(o.domain == "com.microsoft" for o in model.opset_import):
        model.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))
    onnx_io.save_proto(model, dst)
