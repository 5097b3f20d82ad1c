"""The ov-int8 stage: `python -m quantize ov-int8 IN OUT`: an INT8 variant for OpenVINO, quantized by NNCF.

IN (the optimize stage's folder or model.onnx) -> OUT/model.xml + model.bin (OpenVINO IR, the form OpenVINO
loads fastest: `bench/results/ov-int8-form.md`) + OUT/report.json:

1. IN is read and run at every validation layout of its report in ONNX Runtime (`quantize.stage.read_input`: its
   fp32 outputs there are the reference), then read by OpenVINO (`read_fp32`).
2. NNCF (`nncf.quantize`, OpenVINO backend, `model_type=TRANSFORMER`) puts FakeQuantize on the input of every
   MatMul with a constant weight: weights int8 per output channel, symmetric, in 7 bits (`overflow_fix` ENABLE:
   exact on x86 CPUs without VNNI, whose u8 x s8 kernel saturates 8-bit weights, as the int8 stage's 7-bit
   default); activations uint8 per tensor, asymmetric, their ranges the min and max over the calibration set
   (`quantize.calibration.stage_set`: real photos through the family's processor). Left in float (OpenVINO runs
   them in bf16 where the CPU has it, else f32): the attention (OpenVINO reads the segment attention's
   MultiHeadAttention as its ScaledDotProductAttention, in the If and Loop bodies; NNCF's transformer model type
   would quantize its query and key inputs: that type is in the ignored scope, and so is every MatMul of two
   activations by name), and every Convolution (the patch embedding reads the raw pixels, whose range no
   calibration set covers: quantized, the validation layouts fell to min per-token cosine 0.81 on the tiny model),
   and the output heads (`head_matmuls`: the last HEAD_DEPTH MatMuls before each model output, Qwen's mergers'
   two-layer MLPs, 2-3% of the tower's FLOPs at Qwen3-VL-2B: with the final merger INT8 the shipped 2B variant held
   0.99810 at the validation layouts but 0.99771 on held-out photos, under the floor `--engine auto` keeps).
   SmoothQuant is off by default (`--smooth-alpha A` turns it on): on the tiny Qwen3-VL model (random weights,
   no outlier channels to move) it lowered the min per-token cosine over the validation layouts at every alpha
   tried by hand (0.3: 0.99038, 0.6: 0.97270, against 0.99675 without; 2026-11-26, before the floor search).
3. The outlier-stress gate (`quantize.outlier_check`: a copy whose residual stream carries 4 channels 20-100x,
   written once by the patch embedding, as in trained ViTs) is quantized the same way (its own calibration
   statistics) and compared with its own fp32 outputs at the gate layouts; with `--outliers exclude` the MatMuls
   most sensitive to quantization (each alone, emulated in numpy from the quantized model's own FakeQuantize
   ranges and int8 weights, `sensitivity`) stay float until it reaches `--stress-target` (`greedy`, as in 4).
4. The floor: the quantized model must reach `--min-cosine` (min per-token cosine against the fp32 outputs, every
   output, every validation layout) in OpenVINO at the precision `--engine openvino` runs by default here
   (`core.engine.default_precision`). Static activation ranges calibrated on photos do not cover every input:
   when it misses, the MatMuls most sensitive at the worst layout (`sensitivity`) are tried float one at a time,
   each kept only when it raises the min per-token cosine (`greedy`), until the floor is reached. If it is not,
   UsageError (exit 2) and nothing written.
5. The held-out photos (`quantize.photo_check`, as the int8 and int4 stages): the chosen model in OpenVINO against
   IN in ONNX Runtime, recorded as `validation.photos` (the release manifest's `accuracy_vs_fp32.photos`, which
   `--engine auto` reads before it takes a quantized variant; not a gate).
The report says which MatMuls stay float and why, per-layout accuracy, the stress gate, the precision it was
checked at and the CPU.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from quantize import calibration, outlier_check, photo_check, stage
from quantize.options import (
    StageRun,
    add_floor_argument,
    add_stress_arguments,
    check_floor,
    check_stress,
    excluded,
)
from vlm_vision_onnx.core import cpu, onnx_io, openvino_session
from vlm_vision_onnx.core import parity as metrics
from vlm_vision_onnx.core import report as reports
from vlm_vision_onnx.core.errors import CheckFailed, UsageError
from vlm_vision_onnx.core.progress import say, step
from vlm_vision_onnx.core.staging import WorkFolder, check_folder_output, staged_folder

STAGE = "ov-int8"
#: The floor the variant ships under: the INT8 variant's (bench.sweep.FLOORS, core.engine.BF16_FLOOR).
DEFAULT_MIN_COSINE = 0.998
#: The NNCF release whose OpenVINO backend and options this stage was written and measured against (pinned in the
#: openvino extra).
NNCF_VERSION = "3.4.0"
MODEL_FILE = openvino_session.IR_MODEL_FILE
#: Why a weight MatMul or Convolution is left float (the report's `float_nodes`).
WHY_CONV = ("Convolution: the patch embedding reads the raw pixels, whose range no photo calibration covers "
            "(quantized, the tiny model's validation layouts fell to min per-token cosine 0.81)")
#: Node types NNCF leaves float: the patch embedding (WHY_CONV), and OpenVINO's fused attention, whose query and
#: key inputs NNCF's transformer model type would quantize (attention stays float: bf16 where the CPU has it).
IGNORED_TYPES = ("Convolution", "ScaledDotProductAttention")
#: Why the patch embedding as a MatMul (quantize/passes/patch_matmul.py) is left float: WHY_CONV's reason.
WHY_PIXELS = "MatMul reading the model's input (the patch embedding)" + WHY_CONV.removeprefix("Convolution")
#: Why an output head's MatMuls (`head_matmuls`) are left float.
WHY_HEAD = ("output head: the model's outputs are read directly off it (Qwen3-VL-2B, held-out photos: min per-token "
            "cosine 0.99771 with the final merger INT8, 0.99816 float)")
WHY_EXCLUDE, WHY_STRESS, WHY_FLOOR = "excluded (--exclude)", "excluded (outlier stress)", "excluded (--min-cosine)"


@dataclass(frozen=True)
class OvInt8Options:
    """Every option of the stage (checked on construction: UsageError, exit 2, before any work)."""

    min_cosine: float = DEFAULT_MIN_COSINE
    smooth_alpha: float | None = None
    outliers: str = "exclude"
    stress_target: float = outlier_check.DEFAULT_TARGET
    exclude: tuple[str, ...] = ()
    precision: str | None = None

    def __post_init__(self):
        check_floor(self.min_cosine)
        if self.smooth_alpha is not None and not 0 < self.smooth_alpha < 1:
            raise UsageError(f"--smooth-alpha must be in (0, 1), got {self.smooth_alpha}")
        check_stress(self.outliers, self.stress_target)
        if self.precision is not None and self.precision not in openvino_session.PRECISIONS:
            raise UsageError(f"--precision must be one of {', '.join(openvino_session.PRECISIONS)}, "
                             f"got {self.precision!r}")
        excluded([], list(self.exclude))  # a bad pattern is refused before any work

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """The stage's options (IN, OUT, --threads and --force are the command's)."""
        add_floor_argument(parser, DEFAULT_MIN_COSINE, "the floor: min per-token cosine against fp32 at every "
                           "validation layout; the most sensitive MatMuls stay float until it is reached, else exit 2 "
                           "and nothing written")
        parser.add_argument("--smooth-alpha", type=float, metavar="A",
                            help="SmoothQuant before quantizing, with this alpha for the MatMuls (default: off)")
        add_stress_arguments(parser, "exclude", "keep float the MatMuls it shows must stay float")
        parser.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                            help="keep float the MatMuls whose name matches this regex (repeatable)")
        parser.add_argument("--precision", choices=openvino_session.PRECISIONS,
                            help="OpenVINO's inference precision for the checks (default: what --engine openvino "
                                 "runs by default here: bf16 where the CPU has it, else f32)")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> OvInt8Options:
        return cls(args.min_cosine, args.smooth_alpha, args.outliers, args.stress_target, tuple(args.exclude),
                   args.precision)


def _nncf():
    try:
        import nncf
    except ImportError:
        raise UsageError("the ov-int8 stage needs NNCF and OpenVINO: pip install '.[openvino]' "
                         "(make install installs them)") from None
    if nncf.__version__ != NNCF_VERSION:
        say(f"NNCF {nncf.__version__} here; this stage was measured with {NNCF_VERSION} (the openvino extra's pin)")
    return nncf


def read_fp32(model_file: Path, work: Path):
    """IN as an OpenVINO model, through an IR copy in `work`: OpenVINO's ONNX reader leaves nodes no output reads
    attached to shared constants, where NNCF's graph builder fails ('Could not find a node ... in NNCFGraph');
    the IR holds only what the outputs read."""
    ov = openvino_session._openvino()
    ir_file = work / "fp32.xml"
    ov.save_model(ov.Core().read_model(str(model_file)), str(ir_file), compress_to_fp16=False)
    return ov.Core().read_model(str(ir_file))


def _constant_nodes(model) -> set[str]:
    """Names (`get_name`, unique) of the nodes of the main graph computed from constants only (a weight, possibly
    dequantized): one pass in topological order (a recursion back from each MatMul went as deep as the graph, past
    Python's limit on Phi-4-multimodal)."""
    found: set[str] = set()
    for node in model.get_ordered_ops():
        inputs = [node.input_value(i).get_node().get_name() for i in range(node.get_input_size())]
        if node.get_type_name() == "Constant" or (inputs and all(name in found for name in inputs)):
            found.add(node.get_name())
    return found


def _weighted(node, constants: set[str]) -> bool:
    """Whether `node` is a MatMul whose weight (input 1) is computed from constants only."""
    return node.get_type_name() == "MatMul" and node.input_value(1).get_node().get_name() in constants


def matmuls(model) -> tuple[list[str], list[str]]:
    """(names of the MatMuls with a constant weight, of the MatMuls of two activations) in the main graph."""
    constants, weighted, activations = _constant_nodes(model), [], []
    for node in model.get_ordered_ops():
        if node.get_type_name() == "MatMul":
            (weighted if _weighted(node, constants) else activations).append(node.get_friendly_name())
    return weighted, activations


def pixel_matmuls(model) -> list[str]:
    """Names of the MatMuls with a constant weight that read a model input (Parameter): the patch embedding."""
    constants = _constant_nodes(model)
    return [node.get_friendly_name() for node in model.get_ordered_ops()
            if _weighted(node, constants) and node.input_value(0).get_node().get_type_name() == "Parameter"]


#: How many weighted MatMuls back from each model output stay float (`head_matmuls`): the output MLP.
HEAD_DEPTH = 2


def head_matmuls(model, depth: int = HEAD_DEPTH) -> list[str]:
    """Names of the MatMuls with a constant weight within `depth` of them back from each model output (the ops
    between them any): the output heads, in Qwen's vision towers each merger's two-layer MLP (fc1, GELU, fc2).
    Every model output is read directly off them, so their quantization error reaches the user unaveraged: on
    Qwen3-VL-2B, held-out photos, min per-token cosine 0.99771 with the final merger INT8, 0.99816 with its two
    MatMuls float (the tower's other MatMuls INT8 both times; 2026-11-27, AMD EPYC Zen 4, OpenVINO bf16)."""
    found: list[str] = []
    constants = _constant_nodes(model)
    for result in model.get_results():
        frontier, seen = [(result.input_value(0).get_node(), 0)], set()
        while frontier:
            node, level = frontier.pop()
            if node.get_friendly_name() in seen or node.get_type_name() in ("Parameter", "Constant"):
                continue
            seen.add(node.get_friendly_name())
            if _weighted(node, constants):
                if node.get_friendly_name() not in found:
                    found.append(node.get_friendly_name())
                if level + 1 >= depth:
                    continue
                frontier.append((node.input_value(0).get_node(), level + 1))
                continue
            frontier += [(node.input_value(i).get_node(), level) for i in range(node.get_input_size())]
    return found


ATTENTION_OPS = ("ScaledDotProductAttention", "MatMul", "FakeQuantize")


def _bodies(model) -> list:
    """Every subgraph of `model`'s If, Loop and TensorIterator nodes, nested ones too."""
    found = []
    for node in model.get_ordered_ops():
        kind = node.get_type_name()
        if kind == "If":
            found += [node.get_function(0), node.get_function(1)]
        elif kind in ("Loop", "TensorIterator"):
            found.append(node.get_function())
    return found + [inner for body in found for inner in _bodies(body)]


def subgraphs(model) -> dict:
    """{subgraphs, and per op of ATTENTION_OPS its count in them and in the main graph}: OpenVINO reads the
    segment attention's MultiHeadAttention as its ScaledDotProductAttention inside the If and Loop bodies; NNCF
    leaves it unquantized (the stage names that type in the ignored scope); counted to prove it."""
    ops = [op.get_type_name() for op in model.get_ordered_ops()]
    bodies = _bodies(model)
    inner = [op.get_type_name() for body in bodies for op in body.get_ordered_ops()]
    return {"subgraphs": len(bodies), "in_subgraphs": {name: inner.count(name) for name in ATTENTION_OPS},
            "in_main_graph": {name: ops.count(name) for name in ATTENTION_OPS}}


#: Ops that move data without changing values: NNCF may put a MatMul's activation quantizer before them.
MOVERS = ("Reshape", "Gather", "Transpose", "Squeeze", "Unsqueeze")


def input_quantizer(node):
    """The FakeQuantize that quantizes `node`'s input 0 (through MOVERS), or None."""
    source = node.input_value(0).get_node()
    while source.get_type_name() in MOVERS:
        source = source.input_value(0).get_node()
    return source if source.get_type_name() == "FakeQuantize" else None


def quantized_matmuls(model) -> list[str]:
    """Names of the MatMuls whose activation input is quantized (a FakeQuantize before it, maybe before a
    reshape: the attention output projection's)."""
    return [n.get_friendly_name() for n in model.get_ordered_ops()
            if n.get_type_name() == "MatMul" and input_quantizer(n) is not None]


def _int8_weight(output) -> bool:
    """Whether a MatMul's weight input (computed from constants alone: `_weighted`) is computed from an int8
    constant (NNCF's compressed weight)."""
    node = output.get_node()
    if node.get_type_name() == "Constant":
        return node.get_element_type().get_type_name() in ("i8", "u8")
    return any(_int8_weight(node.input_value(i)) for i in range(node.get_input_size()))


@dataclass
class Quantizer:
    """NNCF with the stage's settings on one fp32 OpenVINO model; `__call__(float_names)` -> quantized model."""

    fp32: object
    feeds: list[dict]
    options: OvInt8Options
    always_float: list[str] = field(default_factory=list)

    def settings(self) -> dict:
        """What goes into the report's config."""
        return {"nncf": f"{NNCF_VERSION} (OpenVINO backend, TRANSFORMER, MIXED)",
                "weights": "int8 per output channel, symmetric, 7 bits (overflow_fix ENABLE)",
                "activations": "uint8 per tensor, asymmetric, min/max over the calibration set",
                "ignored_types": list(IGNORED_TYPES)}

    def __call__(self, float_names: list[str]):
        nncf = _nncf()
        with if_bodies_as_ops(self.fp32):
            return nncf.quantize(self.fp32, nncf.Dataset(self.feeds), **nncf_arguments(
                self.options, [*self.always_float, *float_names], len(self.feeds), IGNORED_TYPES))


def if_bodies_quantizable(model) -> bool:
    """Whether an If body of `model` (nested ones too) holds a MatMul with a constant weight not of IGNORED_TYPES:
    something NNCF would quantize there."""
    for op in model.get_ordered_ops():
        if op.get_type_name() != "If":
            continue
        for body in (op.get_function(0), op.get_function(1)):
            constants = _constant_nodes(body)
            if if_bodies_quantizable(body) or any(_weighted(n, constants) for n in body.get_ordered_ops()):
                return True
    return False


@contextlib.contextmanager
def if_bodies_as_ops(model):
    """NNCF's plain path for a model whose If bodies hold nothing it would quantize.

    NNCF 3.4 quantizes a model with If nodes body by body (`native_quantize_if_op_impl`): for each If it compiles the
    whole model with that node's inputs as extra outputs and runs it over the calibration set to make the bodies'
    data sets (`_make_dataset_for_if_bodies`): at Qwen3-VL-2B, 24 If nodes (one attention per block) x the
    calibration set, full passes of the 2B model, per quantization, and the stage quantizes several times (the
    stress gate, the floor search): hours on 2 cores. The bodies hold the attention only, which the stage leaves
    float (IGNORED_TYPES): they get no quantizer either way. So while this is open, NNCF's If count reads 0 and it
    quantizes the main graph, each If one op, its statistics from one pass per calibration item. The IR is the one of
    the body-by-body path: its weights byte for byte, its graph but for generated node names (tests/test_ov_int8.py,
    on the tiny model). A model with something to
    quantize in a body (`if_bodies_quantizable`), or another NNCF version, goes NNCF's own way."""
    import nncf
    import nncf.openvino.quantization.quantize_model as nncf_ov

    if nncf.__version__ != NNCF_VERSION or if_bodies_quantizable(model):
        yield
        return
    counted = nncf_ov.get_number_if_op
    nncf_ov.get_number_if_op = lambda _model: 0
    try:
        yield
    finally:
        nncf_ov.get_number_if_op = counted


def nncf_arguments(options: OvInt8Options, float_names: list[str], items: int, types: tuple[str, ...]) -> dict:
    """The keyword arguments of `nncf.quantize` besides the model and data set: the stage's settings with
    `float_names` and every node of `types` (IGNORED_TYPES; ONNX's names for the ONNX backend) ignored. One home
    for them: bench/ov_int8_form.py (retired at commit c9ada23) quantized the ONNX file with NNCF's ONNX backend
    and the same arguments."""
    nncf = _nncf()
    from nncf.quantization.advanced_parameters import (
        AdvancedQuantizationParameters,
        AdvancedSmoothQuantParameters,
        OverflowFix,
    )
    from nncf.quantization.range_estimator import RangeEstimatorParametersSet

    alpha = -1 if options.smooth_alpha is None else options.smooth_alpha  # -1: NNCF's "off"
    advanced = AdvancedQuantizationParameters(
        overflow_fix=OverflowFix.ENABLE, activations_range_estimator_params=RangeEstimatorParametersSet.MINMAX,
        smooth_quant_alphas=AdvancedSmoothQuantParameters(matmul=alpha))
    return {"model_type": nncf.ModelType.TRANSFORMER, "preset": nncf.QuantizationPreset.MIXED, "subset_size": items,
            "ignored_scope": nncf.IgnoredScope(names=sorted(set(float_names)), types=list(types), validate=False),
            "advanced_parameters": advanced}


def save(model, path: Path, metadata: dict[str, str]) -> None:
    """The IR at `path` (+ .bin), IN's ONNX metadata in its rt_info (`openvino_session.set_metadata`); float
    weights stay float32 (OpenVINO's default would store them as float16)."""
    ov = openvino_session._openvino()
    openvino_session.set_metadata(model, metadata)
    ov.save_model(model, str(path), compress_to_fp16=False)


def _fake_quantize(x: np.ndarray, node) -> np.ndarray:
    """OpenVINO's FakeQuantize of `x` with `node`'s constant ranges (its opset spec)."""
    low, high, out_low, out_high = (_per_channel(node.input_value(i).get_node().get_data(), x) for i in range(1, 5))
    levels = node.get_attributes()["levels"]
    q = np.round((np.clip(x, low, high) - low) / (high - low) * (levels - 1))
    return (q / (levels - 1) * (out_high - out_low) + out_low).astype(np.float32)


def _per_channel(bound: np.ndarray, x: np.ndarray) -> np.ndarray:
    """A FakeQuantize bound ([1, ..., 1] or [1, ..., C]) as a scalar or [C] array against `x` [tokens, C]."""
    return bound.astype(np.float64).reshape(-1) if bound.size in (1, x.shape[-1]) else bound.astype(np.float64)


def _value(output) -> np.ndarray:
    """The value of a constant-only subgraph's output (a dequantized weight)."""
    ov = openvino_session._openvino()
    return next(iter(ov.Core().compile_model(ov.Model([output], [], "weight"), "CPU",
                                             {"INFERENCE_PRECISION_HINT": "f32"})({}).values()))


def sensitivity(fp32, quantized, feed: dict[str, np.ndarray], threads: int, group: int = 16) -> list[dict]:
    """[{node, min_token_cosine}] of every quantized MatMul alone, most sensitive first: its fp32 input at `feed`
    (from one run of `fp32` with the MatMuls' inputs as extra outputs, `group` MatMuls at a time), through its
    FakeQuantize and int8 weight as `quantized` holds them, emulated in numpy, against the fp32 MatMul."""
    ov = openvino_session._openvino()
    q_nodes = {n.get_friendly_name(): n for n in quantized.get_ordered_ops()}
    # weighted ones only: a MatMul of two activations (Phi-4's unfused attention) may read a tensor NNCF quantized
    # for a weighted MatMul beside it, but has no weight to emulate, and stays float by the stage's ignored scope
    weighted = set(matmuls(fp32)[0])
    names = [name for name in quantized_matmuls(quantized) if name in weighted]
    records = []
    for start in range(0, len(names), group):
        model = fp32.clone()
        nodes = {n.get_friendly_name(): n for n in model.get_ordered_ops()}
        chunk = names[start:start + group]
        taps, by_source = [], {}  # one model output per tensor: q, k and v projections may read the same one
        for name in chunk:
            source = nodes[name].input_value(0)
            key = (source.get_node().get_friendly_name(), source.get_index())
            if key not in by_source:
                by_source[key] = f"ov-int8.tap.{len(by_source)}"
                source.get_tensor().add_names({by_source[key]})
                model.add_outputs(by_source[key])
            taps.append(by_source[key])
        config = {"INFERENCE_PRECISION_HINT": "f32", **({"INFERENCE_NUM_THREADS": threads} if threads else {})}
        compiled = openvino_session.compile_cpu(ov.Core(), model, config)
        results = compiled(feed)
        for name, tap in zip(chunk, taps):
            x = results[compiled.output(tap)]
            node, q_node = nodes[name], q_nodes[name]
            flags = node.get_attributes()
            if flags.get("transpose_a"):
                raise NotImplementedError(f"{name}: MatMul with transpose_a")
            weight, q_weight = _value(node.input_value(1)), _value(q_node.input_value(1))
            if flags.get("transpose_b"):
                weight, q_weight = weight.T, q_weight.T
            x = np.asarray(x, dtype=np.float32).reshape(-1, weight.shape[0])
            got = _fake_quantize(x, input_quantizer(q_node)) @ q_weight.reshape(weight.shape)
            records.append({"node": name, "min_token_cosine": metrics.min_token_cosine(got, x @ weight)})
    return sorted(records, key=lambda r: r["min_token_cosine"])


def greedy(trial: Callable[[list[str]], float], candidates: list[str], best: float, target: float) -> list[str] | None:
    """Forward selection along `candidates` (most sensitive first): each is kept float when `trial` (the min
    per-token cosine with those names float) beats the best so far, until `target` is reached; None when the
    candidates run out first. A ranking of MatMuls each alone is a local proxy, and NNCF places the other
    quantizers anew for each ignored scope: a candidate that does not help is passed over, not accumulated."""
    kept: list[str] = []
    for name in candidates:
        cosine = trial([*kept, name])
        if cosine > best:
            kept, best = [*kept, name], cosine
        if best >= target:
            return kept
    return None


@dataclass
class Checked:
    """A quantized model saved in the work folder and its check: the IR, the cases and their worst numbers."""

    path: Path
    cases: list[dict]
    worst: dict


class Work:
    """The fp32 model and its quantizer, the layouts and the reference: quantize with some MatMuls float, save,
    check in OpenVINO (`check`), rank (`rank`)."""

    def __init__(self, name: str, quantize: Quantizer, layouts: list[dict], inputs: list[dict], reference: list,
                 folder: Path, metadata: dict[str, str], precision: str, threads: int):
        self.name, self.quantize, self.layouts, self.inputs, self.reference = name, quantize, layouts, inputs, reference
        self.folder, self.metadata, self.precision, self.threads = folder, metadata, precision, threads
        self.trials: dict[int, Checked] = {}
        self.last = None

    def check(self, float_names: list[str], key: int | None = None) -> Checked:
        """Quantize with `float_names` kept float, save as an IR, run it at every layout against the reference."""
        model = self.quantize(float_names)
        self.last = model
        path = self.folder / f"{self.name}-{len(self.trials)}.xml"
        save(model, path, self.metadata)
        session = openvino_session.OpenVINOSession(path, self.threads or None, self.precision)
        cases = metrics.check(session, self.layouts, self.inputs, self.reference, tolerance=None)
        checked = Checked(path, cases, metrics.worst(cases))
        if key is not None:
            self.trials[key] = checked
        return checked

    def worst_layout(self, checked: Checked) -> int:
        return min(range(len(checked.cases)), key=lambda i: metrics.worst([checked.cases[i]])["min_token_cosine"])

    def rank(self, checked: Checked, skip: list[str]) -> list[dict]:
        """`sensitivity` at the layout where `checked` is worst, without the names in `skip`."""
        ranked = sensitivity(self.quantize.fp32, self.last, self.inputs[self.worst_layout(checked)], self.threads)
        return [r for r in ranked if r["node"] not in skip]


def order_check(work: Work, checked: Checked) -> dict:
    """The saved model `checked` run at `work`'s layouts in reverse order in a new session: every case's figures
    must be the forward run's. OpenVINO 2026.4.1's CPU plugin has given other outputs for a layout depending on the
    layouts run before it in the same session (seen with some MatMuls of the tiny model kept float: min per-token
    cosine 0.86 at 448x448 after 224x224 and 336x336, 0.999 when run alone); a model that does is refused
    (CheckFailed, exit 1), not shipped."""
    session = openvino_session.OpenVINOSession(checked.path, work.threads or None, work.precision)
    order = list(reversed(range(len(work.layouts))))
    cases = dict(zip(order, metrics.check(session, [work.layouts[i] for i in order], [work.inputs[i] for i in order],
                                          [work.reference[i] for i in order], tolerance=None)))
    differ = [work.layouts[i]["case"] for i in order
              if metrics.worst([cases[i]]) != metrics.worst([checked.cases[i]])]
    if differ:
        raise CheckFailed(f"OpenVINO's outputs of the {STAGE} model at {', '.join(differ)} depend on the layouts run "
                          "before them in the same session (reverse order gives other figures); nothing written")
    return {"identical": True, "cases": len(order)}


def search(work: Work, base: list[str], target: float, timings: dict, what: str,
           option: str = "--min-cosine") -> tuple[list[str], Checked, dict]:
    """(MatMuls to keep float beyond `base`, the checked model, the search's record) for `target` on `work`."""
    with step(f"{what}: quantize and check at {len(work.layouts)} layout(s)", timings):
        first = work.check(base, 0)
    cosine = first.worst["min_token_cosine"]
    record = {"target_min_token_cosine": target, "quantized_whole": cosine, "trials": [], "ranking": []}
    if cosine >= target:
        return [], first, record
    with step(f"{what}: sensitivity of each quantized MatMul alone", timings):
        ranking = work.rank(first, base)
    names = [r["node"] for r in ranking]
    record["ranking"] = ranking

    best: dict = {"names": [], "checked": first}

    def trial(names: list[str]) -> float:
        key = len(work.trials) + 1
        with step(f"{what}: trial {key}, {len(names)} MatMul(s) float", timings, f"{what}: trial {key}"):
            checked = work.check(base + names, key)
        cosine = checked.worst["min_token_cosine"]
        say(f"  {what}: float {', '.join(names)} -> min per-token cosine {cosine:.5f}")
        record["trials"].append({"float": names, "min_token_cosine": cosine})
        if cosine > best["checked"].worst["min_token_cosine"]:
            old, best["names"], best["checked"] = best["checked"], names, checked
        else:
            old = checked
        for f in (old.path, old.path.with_suffix(".bin")):  # never the result: its files go now
            f.unlink()
        return cosine

    kept = greedy(trial, names, cosine, target)
    if kept is None:
        raise UsageError(f"the {STAGE} model misses min per-token cosine {target} ({what}) with any of the "
                         f"{len(names)} quantized MatMul(s) float that helped; nothing written (a lower {option}, "
                         "--smooth-alpha, or the int8 stage)")
    return kept, best["checked"], record


def run(path: str | Path, out: str | Path, options: OvInt8Options = OvInt8Options(),
        context: StageRun | None = None) -> dict:
    """`python -m quantize ov-int8`: IN -> OUT/model.xml + model.bin + report.json; returns the report. `context`:
    threads, --force and the step timings (default: all cores, no --force)."""
    context = context or StageRun()
    force, timings, threads = context.force, context.timings, context.threads
    _nncf()
    check_folder_output(out, STAGE, [path], force)
    out = Path(out)
    precision = options.precision or _default_precision()
    with step("load the input and run it at the validation layouts (ONNX Runtime fp32)", timings):
        source = stage.read_input(path, threads)
    source.model = None  # OpenVINO reads the file
    feeds, about = calibration.stage_set(source.path)
    with WorkFolder(out) as work_dir:
        with step("read IN in OpenVINO", timings):
            fp32 = read_fp32(source.path, work_dir)
        weighted, attention = matmuls(fp32)
        pixels = pixel_matmuls(fp32)
        heads = [n for n in head_matmuls(fp32) if n not in pixels]
        weighted = [n for n in weighted if n not in pixels]
        skip = excluded([(n, n) for n in weighted], list(options.exclude))
        if weighted and len(skip) == len(weighted):
            raise UsageError(f"--exclude {' '.join(options.exclude)} matches all {len(weighted)} MatMul(s): nothing "
                             "would be quantized; narrow the pattern")
        user_skip, skip = skip, skip + pixels + [n for n in heads if n not in skip]
        if not weighted:
            raise UsageError(f"{source.path} has no MatMul with a constant weight in OpenVINO's reading: nothing to "
                             "quantize")
        quantize = Quantizer(fp32, feeds(), options, attention)
        stress, stress_skip = None, []
        if options.outliers != "off":
            stress, stress_skip = _stress(source, quantize, skip, options, work_dir, precision, context)
        real = Work("model", quantize, source.layouts, source.inputs, source.reference, work_dir, source.metadata,
                    precision, threads)
        floor_skip, final, floor = search(real, skip + stress_skip, options.min_cosine, timings, "floor")
        with step("the chosen model again, layouts in reverse order in a new session", timings):
            order = order_check(real, final)
        with step("compare with fp32 on held-out photos", timings):
            photos = photo_check.measure(source.path, final.path, threads, lambda file: openvino_session.OpenVINOSession(
                file, threads or None, precision))
        with staged_folder(out, STAGE, [path], force, keep_log=True) as staged:
            model_file = staged / MODEL_FILE
            for suffix in (".xml", ".bin"):
                final.path.with_suffix(suffix).rename(model_file.with_suffix(suffix))
            model = openvino_session._openvino().Core().read_model(str(model_file))
            quantized, constants = quantized_matmuls(model), _constant_nodes(model)
            # int8 weights under float activations (none seen so far: listed should NNCF leave one so)
            weight_only = [n.get_friendly_name() for n in model.get_ordered_ops() if _weighted(n, constants)
                           and n.get_friendly_name() not in quantized and _int8_weight(n.input_value(1))]
            reason = {**{n: WHY_HEAD for n in heads}, **{n: WHY_EXCLUDE for n in user_skip},
                      **{n: WHY_PIXELS for n in pixels},
                      **{n: WHY_STRESS for n in stress_skip},
                      **{n: WHY_FLOOR for n in floor_skip}}
            files, input_files = openvino_session.ir_file_sizes(model_file), onnx_io.file_sizes(source.path)
            report = {
                **stage.report_header(STAGE, source),
                "format": "OpenVINO IR (model.xml + model.bin)",
                "config": {**{k: v for k, v in asdict(options).items() if k not in ("threads", "precision")},
                           "exclude": list(options.exclude), **quantize.settings()},
                "calibration": {**about, "items": len(quantize.feeds)},
                "quantized_nodes": len(quantized),
                "weight_only_int8": weight_only,
                "float_weight_nodes": [{"node": n, "reason": reason.get(n, "left by NNCF")}
                                       for n in weighted + pixels if n not in quantized and n not in weight_only]
                + [{"node": n.get_friendly_name(), "reason": WHY_CONV} for n in model.get_ordered_ops()
                   if n.get_type_name() == "Convolution"],
                "attention": {"matmuls_of_two_activations": attention, "quantized": sorted(set(attention) & set(quantized)),
                              **subgraphs(model)},
                "op_counts": _op_counts(model),
                "validation": {"reference": "fp32 input model in ONNX Runtime", "engine": f"openvino {precision}",
                               "machine": cpu.facts(), **final.worst, "cases": final.cases, "photos": photos},
                "floor": floor,
                "reverse_order": order,
                "outlier_stress": stress,
                **stage.size_record(files, input_files),
                **stage.report_footer(timings),
            }
            reports.write(staged, report)
    stress_line = (f"; outlier stress: min per-token cosine {stress['validation']['min_token_cosine']:.5f} "
                   f"({len(stress_skip)} MatMul(s) kept float for it)" if stress else "")
    say(f"wrote {out}/{MODEL_FILE}: {len(quantized)} INT8 MatMul(s), {len(weight_only)} with int8 weights only, "
        f"{len(weighted) - len(quantized) - len(weight_only)} float, "
        f"{sum(files.values()) / 2**20:.1f} MiB ({100 * report['size_ratio']:.1f}% of fp32); vs fp32 in OpenVINO "
        f"{precision}: min per-token cosine {final.worst['min_token_cosine']:.5f}{stress_line}")
    return report


def _default_precision() -> str:
    from vlm_vision_onnx.core.engine import default_precision

    return default_precision()


def _op_counts(model) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in model.get_ordered_ops():
        counts[node.get_type_name()] = counts.get(node.get_type_name(), 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def _stress(source: stage.StageInput, quantize: Quantizer, skip: list[str], options: OvInt8Options, work_dir: Path,
            precision: str, context: StageRun) -> tuple[dict, list[str]]:
    """The outlier-stress gate (module docstring, 3): its report section and the MatMuls it keeps float."""
    timings = context.timings
    gate = outlier_check.gate_indices(source.layouts, source.inputs)
    stressed = outlier_check.prepare(source.path, work_dir / "stressed.onnx", source, context)
    stressed_quantize = Quantizer(read_fp32(stressed.path, _subfolder(work_dir, "stressed-ir")), quantize.feeds,
                                  options, quantize.always_float)
    work = Work("stressed", stressed_quantize, [source.layouts[i] for i in gate], [source.inputs[i] for i in gate],
                stressed.reference, work_dir, source.metadata, precision, context.threads)
    if options.outliers == "exclude":
        excluded, checked, record = search(work, skip, options.stress_target, timings, "outlier stress",
                                           "--stress-target")
    else:
        with step("outlier stress: quantize and check at the gate layouts", timings):
            excluded, checked, record = [], work.check(skip), {}
    for f in work_dir.glob("stressed-*.*"):
        f.unlink()
    return {
        "how": ("residual-stream channels written once, by the patch embedding and the bias terms, and carried by "
                "the stream (quantize/outliers.py, writers 'embedding'), as massive activations appear in trained "
                "ViTs; the stressed model quantized the same way (its own calibration statistics), compared in "
                "OpenVINO with its own fp32 outputs (ONNX Runtime)"),
        "copy": outlier_check.GATE_WRITERS, "channels": stressed.record["channels"],
        "factors": stressed.record["factors"], "mode": options.outliers,
        "target_min_token_cosine": options.stress_target, "gate_cases": [source.layouts[i]["case"] for i in gate],
        "search": record, "excluded": excluded,
        "validation": {"reference": "outlier-stress fp32 model in ONNX Runtime", **checked.worst,
                       "cases": checked.cases},
        "met": checked.worst["min_token_cosine"] >= options.stress_target,
    }, excluded


def _subfolder(parent: Path, name: str) -> Path:
    folder = parent / name
    folder.mkdir()
    return folder
