"""The outlier-stress check of a weight-quantization stage, and the MatMuls it shows must stay fp32.

Two copies of the input carry outlier channels (`quantize.outliers`: 4 residual channels 20-100x):
- the gate, `writers="embedding"` (GATE_WRITERS): the outliers are written once, by the patch embedding and
  the bias terms, and carried by the stream, as massive activations appear in trained ViTs (early, then
  persisting). Steps 1-3 below run on it.
- the worst case, `writers="every"` (WORST_WRITERS): every writer of the stream scaled, so every block
  amplifies its own input's error into the outlier channels (gain up to 100 per block; weight noise of
  1e-3 before any quantization already misses 0.99 at 1024x1024, `bench/results/stress-ceiling-qwen3-vl.md`).
  It is only measured (`worst_case`: the final quantization at the probe layouts, within a time budget),
  never a gate, and only when asked (`--worst-case-budget`; bench.sweep asks for every point).

On the gate copy:
1. sensitivity: each quantizable MatMul alone, quantized by the stage's own quantizer as a one-node
   model and fed its fp32 input from the stressed model at the first probe layout; its output is compared
   with the fp32 MatMul's (min per-token cosine). The lowest cosines are the MatMuls whose inputs the
   quantizer cannot represent (with the outlier-channel split of `quantize.outlier_channels`, each alone
   gets the channels found for its node in the whole stressed model).
2. exclusion (mode "exclude"): the whole stressed model is quantized once and compared with the stressed
   fp32 model at the probe layouts (PROBE_CASES); only when its min per-token cosine misses the target,
   step 1 ranks the MatMuls and the k most sensitive are put back in fp32, k = 1, 2, 4, 8, ... until it
   reaches the target; then bisected down to the smallest such k.
3. validation: the stressed model quantized with the final exclusions, at the gate layouts (`gate_indices`:
   the probe layouts and the largest validation layout; the search's own quantized model when it kept
   nothing fp32). A bounded cost: the stage's own validation covers every layout on the input's weights.
Mode "report" does only 3, with no exclusion. The caller applies the exclusions to the real model.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from quantize import outliers, quantizers, stage
from vlm_vision_onnx.core import onnx_io, taps
from vlm_vision_onnx.core import parity as metrics
from vlm_vision_onnx.core.progress import say, step
from vlm_vision_onnx.core.session import open_session, outputs

#: Quantizer signature: (model file in, model file out, names of the MatMuls to leave fp32).
Quantizer = Callable[[Path, Path, list[str]], None]
DEFAULT_TARGET = 0.99
MODES = ("exclude", "report", "off")
GATE_WRITERS, WORST_WRITERS = "embedding", "every"
#: Seconds the worst-case measurement may take after its first layout (0: only the first layout); None: not
#: measured. The stages leave it to the benchmark (bench.sweep measures it for every point it builds, with
#: SWEEP_WORST_CASE_BUDGET): it judges the quantization recipe, not one build, and at 2B dims it costs a
#: quantization of a third model copy (about a minute of `make export` per weight stage).
DEFAULT_WORST_CASE_BUDGET: float | None = None
SWEEP_WORST_CASE_BUDGET = 120.0
#: The layouts the search runs at (two images; image + video + image), those present, else the first.
PROBE_CASES = ("export example", "pack image + video t=2 + image")


def probe_indices(layouts: list[dict]) -> list[int]:
    """Indices of the PROBE_CASES in `layouts` (the first layout when none is there)."""
    return [i for i, lay in enumerate(layouts) if lay["case"] in PROBE_CASES] or [0]


def gate_indices(layouts: list[dict], inputs: list[dict]) -> list[int]:
    """The probe layouts, then the largest layout (most input elements: where outlier errors add up most)."""
    probe = probe_indices(layouts)
    largest = max(range(len(inputs)), key=lambda i: sum(a.size for a in inputs[i].values()))
    return probe + ([largest] if largest not in probe else [])


def make_stressed(src: Path, dst: Path, writers: str = GATE_WRITERS) -> dict:
    """Write the outlier-stress copy of `src` to `dst`; returns `outliers.stress`'s record."""
    model = onnx_io.load(src, in_memory=True)
    record = outliers.stress(model, writers=writers)
    onnx_io.save(model, dst)
    return record


def _token_cosine(session, feeds: list[dict], references: list[list[np.ndarray]]) -> float:
    """Min per-token cosine over every output of every feed."""
    return min(metrics.min_token_cosine(g, r) for feed, reference in zip(feeds, references)
               for g, r in zip(session.run(None, feed), reference))


def sensitivity(model_file: Path, quantize: Quantizer, feed: dict, work: Path, threads: int) -> list[dict]:
    """[{node, weight, shape, min_token_cosine}] of every quantizable MatMul alone, most sensitive first.

    The MatMul inputs x [..., K] come from one fp32 run of `model_file` at `feed`, flattened to [tokens, K]
    (Phi-4-multimodal's are [crops, patches, K]); each one-node model MatMul(x, W [K, M]) goes through
    `quantize` and is compared with x @ W in fp32 (numpy). Each tapped input is used as the run hands it over
    and not kept (every MatMul input of Phi-4 at its export example is about 5 GB).
    """
    model = onnx_io.load(model_file)
    nodes = quantizers.quantizable(model)
    readers: dict[str, list[tuple[str, str, ir.TensorProtocol]]] = {}  # tensor -> MatMuls reading it
    for node, weight_name in nodes:
        readers.setdefault(node.inputs[0].name, []).append((node.name, weight_name, node.inputs[1].const_value))
    del model, nodes
    records = []

    def measure(tensor: str, x: np.ndarray) -> None:
        x = x.reshape(-1, x.shape[-1])
        for name, weight_name, tensor_value in readers[tensor]:
            weight = tensor_value.numpy()
            src, dst = work / "one.onnx", work / "one-q.onnx"
            onnx_io.save_proto(_one_matmul(name, x.shape[-1], weight), src)
            quantize(src, dst, [])
            got = open_session(dst, threads).run(None, {"x": x})[0]
            records.append({"node": name, "weight": weight_name, "shape": list(weight.shape),
                            "min_token_cosine": metrics.min_token_cosine(got, x @ weight)})

    taps.tap(model_file, sorted(readers), [feed], threads, each=measure)
    return sorted(records, key=lambda r: r["min_token_cosine"])


def _one_matmul(name: str, k: int, weight: np.ndarray) -> onnx.ModelProto:
    node = helper.make_node("MatMul", ["x", "W"], ["y"], name=name)
    graph = helper.make_graph([node], "one_matmul", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", weight.shape[1]])],
                              [numpy_helper.from_array(weight, "W")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=onnx_io.MAX_IR_VERSION)


def restore_fp32(quantized: Path, fp32: Path, names: list[str], dst: Path) -> None:
    """`quantized` with the MatMuls `names` put back from `fp32` (same folder: weights stay where they are).

    Each quantized MatMul writes the original MatMul's output tensor, so its producer there is replaced by
    the original node (its fp32 weight initializer referenced, not copied, when external), and the
    quantization nodes left without consumers are dropped. Cheaper than quantizing again for each trial.
    """
    model = onnx.load(str(quantized), load_external_data=False)
    original = onnx.load(str(fp32), load_external_data=False)
    nodes = {n.name: n for n in original.graph.node if n.name in set(names)}
    weights = {t.name: t for t in original.graph.initializer}
    have = {t.name for t in model.graph.initializer}
    restored = {nodes[name].output[0]: nodes[name] for name in names}
    # the original node takes its producer's place: its inputs are ready there, the order stays topological
    kept = [next((restored[o] for o in n.output if o in restored), n) for n in model.graph.node]
    for node in restored.values():
        if node.input[1] not in have:
            model.graph.initializer.append(weights[node.input[1]])
            have.add(node.input[1])
    while True:  # drop nodes whose outputs nobody reads (subgraphs, e.g. a Loop body, read outer names too)
        used = _read_names(kept) | {o.name for o in model.graph.output}
        alive = [n for n in kept if any(o in used for o in n.output if o)]
        if len(alive) == len(kept):
            break
        kept = alive
    used = _read_names(kept)
    initializers = [t for t in model.graph.initializer if t.name in used]
    del model.graph.node[:]
    model.graph.node.extend(kept)
    del model.graph.initializer[:]
    model.graph.initializer.extend(initializers)
    model.graph.ClearField("value_info")
    onnx.save(model, str(dst))


def _read_names(nodes) -> set[str]:
    """Every tensor name the nodes read, including inside their subgraphs (Loop / If / Scan bodies)."""
    names = set()
    for node in nodes:
        names.update(node.input)
        for attr in node.attribute:
            for graph in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                names |= _read_names(graph.node)
    return names


def search(stressed: Path, quantize: Quantizer, rank: Callable[[], list[str]], skip: list[str], feeds: list[dict],
           references: list[list[np.ndarray]], target: float, threads: int,
           keep: Path | None = None) -> tuple[int, list[dict], list[str]]:
    """Smallest k such that leaving `ranked[:k]` fp32 (plus `skip`) reaches `target` at the probe layouts.

    The stressed model is quantized once; each trial puts k MatMuls back (`restore_fp32`). `rank()` gives
    the MatMuls most sensitive first; it is called only when the model quantized whole misses the target.
    Files go beside `stressed` (external weights resolve only within a model's folder).
    Returns (k, trials [{excluded, min_token_cosine}], ranked); k = len(ranked) when nothing reaches it.
    `keep`: the model quantized whole is written there and kept (it is the result when k = 0).
    """
    trials: dict[int, float] = {}
    folder = stressed.parent
    full, trial_file = keep or folder / "search-quantized.onnx", folder / "search-trial.onnx"
    quantize(stressed, full, skip)
    ranked: list[str] = []

    def trial(k: int) -> float:
        if k not in trials:
            if k:
                restore_fp32(full, stressed, ranked[:k], trial_file)
            trials[k] = _token_cosine(open_session(trial_file if k else full, threads), feeds, references)
            say(f"  outlier stress: {k} MatMul(s) fp32 -> min per-token cosine {trials[k]:.5f}")
        return trials[k]

    try:
        if trial(0) >= target:
            return 0, [{"excluded": 0, "min_token_cosine": trials[0]}], ranked
        ranked = rank()
        k, last_bad = 0, -1
        while trial(k) < target and k < len(ranked):
            last_bad = k
            k = min(len(ranked), max(1, 2 * k))
        if trials[k] >= target:
            low, high = last_bad, k  # trial(low) < target <= trial(high)
            while high - low > 1:
                mid = (low + high) // 2
                if trial(mid) >= target:
                    high = mid
                else:
                    low = mid
            k = high
    finally:
        for f in folder.glob("search-*"):
            f.unlink()
    return k, [{"excluded": n, "min_token_cosine": c} for n, c in sorted(trials.items())], ranked


@dataclass
class Stressed:
    """An outlier-stress copy of a stage input: its file, `outliers.stress`'s record, its fp32 outputs at the
    layouts it was run at (the gate layouts for the gate; filled as measured for the worst case)."""

    path: Path
    record: dict
    reference: list[list[np.ndarray]]


def prepare(fp32_file: Path, dst: Path, source: stage.StageInput, context) -> Stressed:
    """Write the gate copy of `fp32_file` to `dst` and run it at the gate layouts of `source` (the check's
    reference); `context` (`quantize.options.StageRun`): threads and step timings."""
    layouts, inputs = source.layouts, source.inputs
    with step("outlier stress: outliers written once (patch embedding + biases) in a copy of the input",
              context.timings):
        record = make_stressed(fp32_file, dst, GATE_WRITERS)
    with step("outlier stress: fp32 outputs at the gate layouts", context.timings):
        reference = metrics.run_all(open_session(dst, context.threads),
                                    [inputs[i] for i in gate_indices(layouts, inputs)])
    return Stressed(dst, record, reference)


def prepare_worst_case(fp32_file: Path, dst: Path, timings: dict) -> Stressed:
    """Write the worst-case copy (every writer scaled) of `fp32_file` to `dst`; its outputs are run later."""
    with step("outlier stress, worst case: every writer of the residual stream scaled in a copy", timings):
        record = make_stressed(fp32_file, dst, WORST_WRITERS)
    return Stressed(dst, record, [])


def worst_case(copy: Stressed, quantize: Quantizer, skip: list[str], source: stage.StageInput, context,
               budget: float = SWEEP_WORST_CASE_BUDGET) -> dict:
    """The worst-case figure: `copy` quantized with the stage's final exclusions `skip`, against its fp32 self, at
    the probe layouts of `source`; `context` (`quantize.options.StageRun`): threads and step timings.

    Measured at the probe layouts, one after the other, until `budget` seconds have passed (the first layout
    is always measured): a figure with a bounded cost, not a search. The fp32 outputs are kept in `copy` for
    the next stage of the same run."""
    start = time.perf_counter()
    layouts, inputs, threads, timings = source.layouts, source.inputs, context.threads, context.timings
    probe = probe_indices(layouts)
    cases = []
    with tempfile.TemporaryDirectory(prefix="outlier-worst-", dir=copy.path.parent) as tmp, \
            step("outlier stress, worst case: quantized vs fp32 at the probe layouts", timings):
        final = Path(tmp) / "final.onnx"
        quantize(copy.path, final, skip)
        quantized = open_session(final, threads)
        fp32 = None
        for n, i in enumerate(probe):
            if n and time.perf_counter() - start > budget:
                break
            if len(copy.reference) <= n:
                fp32 = fp32 or open_session(copy.path, threads)
                copy.reference.append(outputs(fp32, inputs[i]))
            cases += metrics.check(quantized, [layouts[i]], [inputs[i]], [copy.reference[n]], tolerance=None)
    worst = metrics.worst(cases)
    return {
        "how": ("every weight and bias that writes the residual stream scaled (quantize/outliers.py, writers "
                "'every'): each block amplifies its input's error into the outlier channels; a reported worst "
                "case, never a gate"),
        "channels": copy.record["channels"], "factors": copy.record["factors"],
        "writers_scaled": len(copy.record["writers"]), "excluded": list(skip),
        "budget_s": budget, "seconds": round(time.perf_counter() - start, 1),
        "measured_cases": [c["case"] for c in cases],
        "not_measured_cases": [layouts[i]["case"] for i in probe[len(cases):]],
        "validation": {"reference": "worst-case outlier-stress fp32 model in ONNX Runtime", **worst, "cases": cases},
    }


def run(stressed: Stressed, quantize: Quantizer, skip: list[str], source: stage.StageInput, checks, context) -> dict:
    """The check's report section; its `excluded` lists the MatMuls to leave fp32 in the real model.

    `source`: the validation layouts and their inputs; `checks`
    (`quantize.options.WeightChecks`): its `outliers` mode and `stress_target`; `context` (`quantize.options.StageRun`):
    threads and step timings. (Duck-typed: quantize.options imports this module.)"""
    layouts, inputs = source.layouts, source.inputs
    mode, target, threads, timings = checks.outliers, checks.stress_target, context.threads, context.timings
    record, reference = stressed.record, stressed.reference
    with tempfile.TemporaryDirectory(prefix="outlier-stress-", dir=stressed.path.parent) as tmp:
        work = Path(tmp)
        probe, gate = probe_indices(layouts), gate_indices(layouts, inputs)
        final = work / "final.onnx"
        ranked: list[dict] = []
        excluded: list[str] = []
        trials: list[dict] = []
        if mode == "exclude":
            def rank() -> list[str]:
                with step("outlier stress: sensitivity of each MatMul alone", timings):
                    ranked.extend(sensitivity(stressed.path, quantize, inputs[probe[0]], work, threads))
                return [r["node"] for r in ranked if r["node"] not in skip]

            with step(f"outlier stress: MatMuls to keep fp32 for min per-token cosine >= {target}", timings):
                k, trials, candidates = search(stressed.path, quantize, rank, skip, [inputs[i] for i in probe],
                                               reference[:len(probe)], target, threads, keep=final)
            excluded = candidates[:k]
        with step("outlier stress: quantized vs fp32 at the gate layouts", timings):
            if excluded or not final.exists():
                quantize(stressed.path, final, skip + excluded)
            cases = metrics.check(open_session(final, threads), [layouts[i] for i in gate], [inputs[i] for i in gate],
                                  reference, tolerance=None)
    worst = metrics.worst(cases)
    return {
        "how": ("residual-stream channels written once, by the patch embedding and the bias terms, and carried "
                "by the stream (quantize/outliers.py, writers 'embedding'), as massive activations appear in "
                "trained ViTs; the stressed model quantized the same way, compared with its own fp32 outputs"),
        "copy": GATE_WRITERS,
        "channels": record["channels"], "factors": record["factors"], "hidden": record["hidden"],
        "writers_scaled": record["writers"], "not_traced": record["not_traced"],
        "mode": mode, "target_min_token_cosine": target, "probe_cases": [layouts[i]["case"] for i in probe],
        "gate_cases": [layouts[i]["case"] for i in gate],
        "sensitivity": ranked, "search": trials, "excluded": excluded,
        "validation": {"reference": "outlier-stress fp32 model in ONNX Runtime", **worst, "cases": cases},
        "met": worst["min_token_cosine"] is not None and worst["min_token_cosine"] >= target,
    }
