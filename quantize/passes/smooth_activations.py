"""SmoothQuant-style activation smoothing: move per-channel range from a LayerNorm's output into the weights
of the MatMuls it feeds, so that per-tensor activation quantization loses less to outlier channels.

Target: y = LayerNormalization(x, gamma, beta, axis=-1) or y, mean, inv_std, sum =
com.microsoft.SkipLayerNormalization(a, b, gamma, beta[, bias]), with y [..., C] read only by
MatMul(y, W_k) or com.microsoft.Attention(y, W_k, ...) (ORT's fused qkv) where every W_k is a constant
2-D [C, out_k] (qkv, MLP up), and by Shape (which reads no value); gamma, beta [C] float32 constants; y is
no graph output.
Replacement (constants only, no node changes): with act_max[c] = max |y[..., c]| over calibration inputs
and w_max[c] = max_k max_j |W_k[c, j]|,
    s[c] = act_max[c] ** alpha / w_max[c] ** (1 - alpha)   (1 where undefined, clamped to CLAMP),
gamma' = gamma / s, beta' = beta / s, W_k'[c, :] = W_k[c, :] * s[c]. Then y' = y / s and y' @ W_k' = y @ W_k:
the fp32 model computes the same (up to rounding), and y' [..., c] spans act_max[c] ** (1 - alpha) *
w_max[c] ** alpha. The rescaled constants are new initializers (gamma, beta and weights may be shared by
other nodes: dedup of random-weight models shares them); those left unused are dropped.
Only output 0 changes: SkipLayerNormalization's mean, inv_std and residual sum (outputs 1-3) do not depend on
gamma or beta, and their consumers keep reading them unchanged.

Not a pattern rule like its siblings: the replacement rewrites constants only and needs the calibration's
maxima. `find` lists the LayerNorms it applies to (and why others are skipped), `activation_maxima` runs the
model with their outputs as extra graph outputs over calibration feeds (`quantize.calibration.items`),
`apply(model, act_max)` smooths in place and returns a report; `smooth` does both.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnx_ir.passes.common as common_passes

from quantize.passes import _rules
from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.session import open_session

ALPHA = 0.5  # SmoothQuant's migration strength: 0 leaves activations, 1 moves all range into the weights
CLAMP = (1e-3, 1e3)  # the scales' range: a dead or huge channel cannot blow up gamma or the weights
MS_DOMAIN = "com.microsoft"
#: (domain, op type) -> input index of gamma and of beta.
NORMS = {("", "LayerNormalization"): (1, 2), (MS_DOMAIN, "SkipLayerNormalization"): (2, 3)}
VALUE_FREE = {("", "Shape")}  # consumers that read only the shape of y
#: Consumers computing y @ W (y at input 0, W [C, out] at input 1): MatMul, and ORT's Attention (W: qkv).
WEIGHTED = {("", "MatMul"), (MS_DOMAIN, "Attention")}


@dataclass
class Candidate:
    """A LayerNorm this pass applies to: output 0 `output` [..., C] read only by `matmuls` (MatMul or
    Attention, y at input 0, weights [C, out] at input 1) and shape-only consumers; `gamma`, `beta` [C]
    (beta None when absent)."""

    node: ir.Node
    output: ir.Value
    gamma: np.ndarray
    beta: np.ndarray | None
    matmuls: list[ir.Node]


def _norm_node(node: ir.Node) -> tuple[int, int] | None:
    return NORMS.get(("" if node.domain == "ai.onnx" else node.domain, node.op_type))


def _check(node: ir.Node, graph: ir.Graph) -> Candidate | str:
    """The candidate, or why the LayerNorm is skipped."""
    if node.graph is not graph:
        return "inside a subgraph (Loop/If body)"
    gamma_at, beta_at = _norm_node(node)
    if node.op_type == "LayerNormalization":
        axis = node.attributes.get_int("axis", -1)
        rank = node.inputs[0].shape.rank() if node.inputs[0].shape is not None else None
        if axis != -1 and (rank is None or axis != rank - 1):
            return f"normalizes axis {axis}, not the last"
    params = [node.inputs[i] if i < len(node.inputs) else None for i in (gamma_at, beta_at)]
    if any(v is not None and v.is_graph_input() for v in params):
        return "gamma or beta is a graph input"
    gamma, beta = (_rules.const(v) for v in params)
    if gamma is None or gamma.ndim != 1 or gamma.dtype != np.float32:
        return "gamma is not a 1-D float32 constant"
    if params[1] is not None and (beta is None or beta.shape != gamma.shape or beta.dtype != np.float32):
        return "beta is not a 1-D float32 constant like gamma"
    output = node.outputs[0]
    if output.is_graph_output():
        return "output 0 is a graph output"
    matmuls, width = [], gamma.shape[0]
    for user, index in output.uses():
        key = ("" if user.domain == "ai.onnx" else user.domain, user.op_type)
        if key in VALUE_FREE:
            continue
        if key not in WEIGHTED or index != 0:
            return f"output 0 feeds {user.op_type} {user.name!r} (input {index}), not a MatMul's activation input"
        weight_value = user.inputs[1]
        weight = _rules.const(weight_value)
        if weight is None or weight_value.is_graph_input() or weight.ndim != 2 or weight.dtype != np.float32:
            return f"{user.op_type} {user.name!r} has no constant 2-D float32 weight"
        if weight.shape[0] != width:
            return f"{user.op_type} {user.name!r} weight has {weight.shape[0]} rows, not C = {width}"
        if user not in matmuls:
            matmuls.append(user)
    if not matmuls:
        return "output 0 feeds no MatMul"
    return Candidate(node, output, gamma, beta if params[1] is not None else None, matmuls)


def find(model: ir.Model) -> tuple[list[Candidate], list[dict]]:
    """(candidates, skipped): every LayerNormalization / SkipLayerNormalization of the model, as a
    `Candidate` when the pass applies to it, else as {node, op, reason}."""
    candidates, skipped = [], []
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        if _norm_node(node) is None:
            continue
        found = _check(node, model.graph)
        if isinstance(found, Candidate):
            candidates.append(found)
        else:
            skipped.append({"node": node.name, "op": node.op_type, "reason": found})
    return candidates, skipped


def activation_maxima(model: ir.Model, feeds: Iterable[dict[str, np.ndarray]], threads: int | None = 1
                      ) -> dict[str, np.ndarray]:
    """{candidate output 0 name: act_max float32 [C]}: max |y[..., c]| over every feed (dicts of the model's
    inputs, e.g. `quantize.calibration.items`). The outputs are added to the graph for one session and
    removed again: `model` is left as it was."""
    candidates, _ = find(model)
    outputs = model.graph.outputs
    added = 0
    for i, cand in enumerate(candidates):
        if not cand.output.name:
            cand.output.name = f"smooth_activations_y{i}"
        if cand.output.type is None:
            cand.output.type = ir.TensorType(ir.DataType.FLOAT)
        outputs.append(cand.output)
        added += 1
    try:
        sess = open_session(model, threads) if candidates else None
    finally:
        for _ in range(added):
            outputs.pop()  # pop (not a slice del): onnx-ir then unmarks the value as a graph output
    names = [c.output.name for c in candidates]
    maxima: dict[str, np.ndarray] = {}
    count = 0
    for feed in feeds:
        count += 1
        if sess is None:
            continue
        for name, value in zip(names, sess.run(names, feed)):
            if value.size:
                peak = np.abs(value.reshape(-1, value.shape[-1])).max(axis=0).astype(np.float32)
                maxima[name] = np.maximum(maxima[name], peak) if name in maxima else peak
    if not count:
        raise UsageError("activation_maxima needs at least one calibration feed")
    return maxima


def scales(act_max: np.ndarray, w_max: np.ndarray, alpha: float = ALPHA,
           clamp: tuple[float, float] = CLAMP) -> np.ndarray:
    """s float32 [C] = act_max ** alpha / w_max ** (1 - alpha), 1 where either is 0 or not finite, clipped
    to `clamp`."""
    a, w = act_max.astype(np.float64), w_max.astype(np.float64)
    defined = np.isfinite(a) & np.isfinite(w) & (a > 0) & (w > 0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        s = np.where(defined, a ** alpha / w ** (1 - alpha), 1.0)
    return np.clip(np.where(np.isfinite(s), s, 1.0), *clamp).astype(np.float32)


class _Names:
    """Fresh value names for the rescaled constants (never one the model already uses)."""

    def __init__(self, model: ir.Model):
        self.taken = set(model.graph.initializers)
        for node in ir.traversal.RecursiveGraphIterator(model.graph):
            self.taken.update(v.name for v in (*node.inputs, *node.outputs) if v is not None and v.name)
        self.taken.update(v.name for v in model.graph.inputs if v.name)

    def __call__(self, base: str) -> str:
        name, k = f"{base}_smoothed", 1
        while name in self.taken:
            name, k = f"{base}_smoothed_{k}", k + 1
        self.taken.add(name)
        return name


def _initializer(graph: ir.Graph, name: str, array: np.ndarray) -> ir.Value:
    value = ir.Value(name=name, shape=ir.Shape(array.shape), type=ir.TensorType(ir.DataType.FLOAT),
                     const_value=ir.tensor(array, name=name))
    graph.register_initializer(value)
    return value


def _stats(act_max: np.ndarray) -> dict:
    """max, median and their ratio of per-channel maxima (the ratio: the range a per-tensor scale must span
    relative to a typical channel)."""
    peak, median = float(act_max.max()), float(np.median(act_max))
    return {"max": peak, "median": median, "ratio": peak / median if median > 0 else None}


def apply(model: ir.Model, act_max: dict[str, np.ndarray], alpha: float = ALPHA,
          clamp: tuple[float, float] = CLAMP) -> dict:
    """Smooth every candidate LayerNorm (see the module docstring) in place, with `act_max` {output 0 name:
    float [C]} from `activation_maxima`; return {alpha, clamp, smoothed, skipped, nodes, skips}: per smoothed
    LayerNorm its MatMuls, the scales' range and the per-channel maxima before and after (predicted: act_max
    / s), per skipped one the reason."""
    if not 0.0 <= alpha <= 1.0:
        raise UsageError(f"alpha must be within [0, 1], got {alpha}")
    if not 0.0 < clamp[0] <= 1.0 <= clamp[1]:
        raise UsageError(f"the scales' clamp must hold 1 and be positive, got {clamp}")
    candidates, skips = find(model)
    names = _Names(model)
    graph, nodes = model.graph, []
    for cand in candidates:
        width = cand.gamma.shape[0]
        observed = act_max.get(cand.output.name)
        if observed is None or np.shape(observed) != (width,):
            skips.append({"node": cand.node.name, "op": cand.node.op_type,
                          "reason": f"no activation maxima [{width}] for {cand.output.name!r}"})
            continue
        observed = np.asarray(observed, dtype=np.float32)
        weights = {id(m.inputs[1]): m.inputs[1] for m in cand.matmuls}  # a weight two MatMuls share: once
        w_max = np.max([np.abs(_rules.const(v)).max(axis=1) for v in weights.values()], axis=0)
        s = scales(observed, w_max, alpha, clamp)
        if np.all(s == 1.0):
            skips.append({"node": cand.node.name, "op": cand.node.op_type, "reason": "every scale is 1"})
            continue
        gamma_at, beta_at = _norm_node(cand.node)
        old = cand.node.inputs[gamma_at]
        cand.node.replace_input_with(gamma_at, _initializer(graph, names(old.name), cand.gamma / s))
        if cand.beta is not None:
            old = cand.node.inputs[beta_at]
            cand.node.replace_input_with(beta_at, _initializer(graph, names(old.name), cand.beta / s))
        scaled = {key: _initializer(graph, names(v.name), _rules.const(v) * s[:, None])
                  for key, v in weights.items()}
        for matmul in cand.matmuls:
            matmul.replace_input_with(1, scaled[id(matmul.inputs[1])])
        nodes.append({"node": cand.node.name, "op": cand.node.op_type, "output": cand.output.name,
                      "channels": width, "matmuls": [m.name for m in cand.matmuls],
                      "scale_min": float(s.min()), "scale_max": float(s.max()),
                      "act_max_before": _stats(observed), "act_max_after": _stats(observed / s)})
    common_passes.RemoveUnusedNodesPass()(model)
    return {"alpha": alpha, "clamp": list(clamp), "smoothed": len(nodes), "skipped": len(skips),
            "nodes": nodes, "skips": skips}


def smooth(model: ir.Model, feeds: Iterable[dict[str, np.ndarray]], alpha: float = ALPHA,
           clamp: tuple[float, float] = CLAMP, threads: int | None = 1) -> dict:
    """`activation_maxima` over `feeds`, then `apply`: the model smoothed in place, and the report."""
    return apply(model, activation_maxima(model, feeds, threads), alpha, clamp)


def smoothing(quantize, feeds: Callable[[], list[dict[str, np.ndarray]]], threads: int | None, record: dict):
    """`quantize` (file -> file, skip) with each input model smoothed first, on its own activation maxima at
    `feeds()` (the calibration set, made on first use). The smoothed model (same node names, so `skip` still holds) goes to a temporary folder beside
    the output. A model whose inputs are not those of `feeds` (the outlier check's one-MatMul models) is
    quantized as it is. `record[src file name]` gets the report without its per-LayerNorm details."""
    def run(src: Path, dst: Path, skip: list[str]) -> None:
        calibration = feeds()
        if set(onnx_io.input_names(onnx.load(str(src), load_external_data=False))) != set(calibration[0]):
            return quantize(src, dst, skip)
        model = onnx_io.load(src)
        report = smooth(model, calibration, threads=threads)
        record[Path(src).name] = {k: v for k, v in report.items() if k not in ("nodes", "skips")}
        with tempfile.TemporaryDirectory(prefix="smoothed-", dir=Path(dst).parent) as tmp:
            smoothed = Path(tmp) / "model.onnx"
            onnx_io.save(model, smoothed)
            del model
            quantize(smoothed, dst, skip)

    return run
