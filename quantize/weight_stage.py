"""What the int4 and int8 stages share: quantize IN's MatMuls, check against fp32, write OUT + report.

The report gives, per validation layout and per output, cosine, min per-token cosine and max abs
diff against the fp32 input; the file sizes; the weight-bearing nodes left fp32 and why; and the
outlier-stress check (`quantize.outlier_check`): the same quantization of a copy of the input whose
residual stream carries a few channels 20-100x larger, written once by the patch embedding as in trained
ViTs (the gate), with (mode "exclude") the MatMuls it shows must stay fp32 — those are then left fp32 in
OUT too; and the worst case (every writer of the stream scaled), measured within a time budget, never a
gate. `min_cosine`: the floor the result must reach on the input's own weights, else nothing is written.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from quantize import outlier_channels, outlier_check, photo_check, quantizers, stage
from quantize.options import StageRun, WeightChecks, excluded
from quantize.passes import smooth_activations, unfuse_attention
from vlm_vision_onnx.core import cpu, onnx_io
from vlm_vision_onnx.core import parity as metrics
from vlm_vision_onnx.core import report as reports
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.progress import say, step
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.core.staging import WorkFolder, check_folder_output, staged_folder


@dataclass
class Prepared:
    """A stage input ready for quantizing: its fp32 outputs at every layout, a copy with every node named
    (exclusions go by name), its quantizable MatMuls, and (when asked) its outlier-stress copies: the gate
    and the worst case."""

    source: stage.StageInput
    fp32_file: Path
    nodes: list[tuple[str, str]]
    stressed: outlier_check.Stressed | None
    folder: WorkFolder
    worst: outlier_check.Stressed | None = None
    #: MatMuls that read the model's input, kept fp32 (`quantizers.input_readers`)
    input_readers: list[str] = field(default_factory=list)


#: The prepared inputs of this process, for `StageRun.keep_prepared` (bench.sweep: the stages it runs one after the
#: other on the same input reuse its reference outputs and outlier-stress copies instead of recomputing them).
_prepared: dict[tuple, Prepared] = {}
#: The work folder of `prepare` is `.quantize.work-PID-xxxx` in the output's parent folder (`core.staging.WorkFolder`:
#: one per process, shared by the int8 and int4 stages of a run; a killed run's is removed by the next).
WORK_NAME = "quantize"


def _key(path: str | Path, context: StageRun) -> tuple:
    model_file = onnx_io.model_path(path).resolve()
    files = [model_file, model_file.with_name(model_file.name + ".data")]
    return (str(model_file), context.threads, context.cases,
            tuple((f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.exists()))


def _keep_cases(source: stage.StageInput, cases: tuple[str, ...] | None) -> None:
    """Restrict the validation layouts to `cases` (when set and any of them is present)."""
    keep = [i for i, lay in enumerate(source.layouts) if cases is None or lay["case"] in cases]
    if keep:
        source.layouts = [source.layouts[i] for i in keep]
        source.inputs = [source.inputs[i] for i in keep]
        source.reference = [source.reference[i] for i in keep]


def prepare(path: str | Path, context: StageRun, stress: bool, work_parent: Path, worst: bool = False) -> Prepared:
    """Load IN, run it at every layout, save its named copy (its gate stress copy when `stress`, and its
    worst-case copy when `worst` too)."""
    threads, timings = context.threads, context.timings
    key = _key(path, context)
    found = _prepared.get(key) if context.keep_prepared else None
    if found is None:
        with step("load the input and run it at the validation layouts", timings):
            source = stage.read_input(path, threads)
        _keep_cases(source, context.cases)
        stage.name_nodes(source.model)
        # a fused com.microsoft Attention hides its q/k/v weights from the quantizers: give them back as MatMuls
        refused: dict[str, str] = {}
        unfused = unfuse_attention.apply(source.model, refused)
        if unfused or refused:
            say(f"unfused {unfused} Attention node(s) into MatMul q/k/v + MultiHeadAttention (for the quantizers)"
                + "".join(f"; {name} left fused: {reason}" for name, reason in refused.items()))
        nodes = [(n.name, w) for n, w in quantizers.quantizable(source.model)]
        readers = quantizers.input_readers(source.model)
        if not nodes:
            raise no_matmul_error(source.model)
        folder = WorkFolder(work_parent / WORK_NAME)
        fp32_file = folder.path / "fp32.onnx"
        onnx_io.save(source.model, fp32_file)
        source.model = None  # one copy of the weights in memory at a time: the quantizers read the file
        found = Prepared(source, fp32_file, nodes, None, folder, input_readers=readers)
    else:
        say(f"reusing the reference outputs of {path} from the previous stage of this run")
    if stress and found.stressed is None:
        found.stressed = outlier_check.prepare(found.fp32_file, found.fp32_file.with_name("stressed.onnx"),
                                               found.source, context)
    if stress and worst and found.worst is None:
        found.worst = outlier_check.prepare_worst_case(found.fp32_file, found.fp32_file.with_name("worst.onnx"),
                                                       timings)
    if context.keep_prepared:
        _prepared[key] = found
    return found


@dataclass
class Recipe:
    """The int4 stage's weights recipe read back from its report, to apply again to the same fp32 input
    (the q4f16 stage): `config` as the report gives it, the MatMuls it promoted to `high` (its 8-bit settings),
    the outlier-channel ratio, the MatMuls it excluded, and how many nodes it quantized."""

    stage: str
    source: str
    config: dict
    promoted: list[str]
    high: dict | None
    outlier_ratio: float
    skip: list[str]
    quantized_nodes: int

    @classmethod
    def read(cls, report: dict, folder: Path) -> Recipe:
        config = dict(report["config"])
        if config.get("algorithm", "rtn") == "gptq":
            raise UsageError(f"the int4 stage at {folder} used --algorithm gptq, whose weights depend on its "
                             "calibration set: q4f16 applies rtn or hqq recipes only; run int4 with another algorithm")
        mixed = report.get("mixed_precision") or {}
        split = report.get("outlier_channels") or {}
        skip = [n["node"] for n in report.get("fp32_weight_nodes", [])  # excluded, or the patch embedding
                if n.get("reason", "").startswith("excluded") or n.get("reason") == quantizers.INPUT_READER_REASON]
        return cls(report["stage"], str(folder), config, list(mixed.get("promoted", [])), mixed.get("quantizer"),
                   float(split.get("ratio", 0.0)), skip, int(report.get("quantized_nodes", 0)))

    def quantizer(self, feeds: list[dict], threads: int) -> outlier_check.Quantizer:
        """The file -> file quantizer of the recipe, composed as `run` composes it (outlier channels found at
        `feeds`: the calibration layouts, as the stage found them)."""
        keys = ("bits", "block_size", "symmetric", "accuracy_level", "algorithm")
        quantize, _ = quantizers.nbits(**{k: self.config[k] for k in keys if k in self.config})
        if self.promoted:
            high, _ = quantizers.nbits(**{k: self.high[k] for k in keys if k in self.high})
            quantize = quantizers.mixed(quantize, high, self.promoted)
        if self.outlier_ratio:
            quantize = outlier_channels.keeping_outliers_fp32(quantize, feeds, threads, self.outlier_ratio, {})
        return quantize

    def about(self) -> dict:
        """What the report says of the weights."""
        return {"from": self.source, "stage": self.stage, **{k: v for k, v in self.config.items()
                                                            if k not in ("min_cosine", "outliers")},
                "promoted_to_8_bits": len(self.promoted), "outlier_ratio": self.outlier_ratio,
                "excluded": self.skip}


def no_matmul_error(model) -> UsageError:
    gemms = sum(1 for n in model.graph if n.op_type == "Gemm")
    hint = (f"it has {gemms} Gemm node(s), which the quantizers do not take: run `python -m quantize optimize` "
            "first" if gemms else "nothing to quantize")
    return UsageError(f"the model has no MatMul with a constant 2-D weight ({hint})")


@dataclass
class Quantization:
    """How a weight stage quantizes (int8 and int4 each build one from their options).

    `config`: the stage's settings, into the report as they are; `quantize`: the file -> file quantizer.
    `promote` = (N, quantizer, its settings): mixed precision, the N MatMuls most sensitive to `quantize` (each
    alone, on the input's own weights at the first probe layout, `outlier_check.sensitivity`) go through that
    quantizer instead. `route` = (patterns, quantizer, its settings): the MatMuls whose node or weight name
    matches a pattern go through that quantizer instead (int8's `--nbits-for`), by name rather than by
    sensitivity. `calibration` = (feeds, what they are): `feeds()` gives the calibration set
    (`quantize.calibration`, made on first use) a static quantizer also reads, said in the report; with `smooth`,
    every model is SmoothQuant-smoothed on its own maxima at those feeds before anything else
    (`quantize.passes.smooth_activations.smoothing`, outermost: the outlier split sees smoothed inputs).
    """

    config: dict
    quantize: outlier_check.Quantizer
    promote: tuple[int, outlier_check.Quantizer, dict] | None = None
    route: tuple[list[str], outlier_check.Quantizer, dict] | None = None
    calibration: tuple[Callable[[], list[dict]], dict] | None = None
    smooth: bool = False

    def __post_init__(self):
        if self.route:
            excluded([], self.route[0], "--nbits-for")  # a bad pattern is refused before any work
        if self.smooth and self.calibration is None:
            raise ValueError("smooth=True needs calibration=(feeds, about)")


@dataclass
class Composed:
    """The stage's final quantizer and what composing it found: `mixed` (the report's mixed_precision),
    `split` (outlier channels per model file), `smoothing` (per model file)."""

    quantize: outlier_check.Quantizer
    mixed: dict | None = None
    split: dict[str, outlier_channels.Found] = field(default_factory=dict)
    smoothing: dict = field(default_factory=dict)


def compose(quantization: Quantization, prepared: Prepared, skip: list[str], checks: WeightChecks,
            context: StageRun) -> Composed:
    """The quantizer every model of the stage goes through, innermost first: mixed precision or `--nbits-for`
    routing, the outlier-channel split, smoothing, and the patch embedding kept fp32."""
    source, threads = prepared.source, context.threads
    done = Composed(quantization.quantize)
    probe = outlier_check.probe_indices(source.layouts)
    if quantization.promote and quantization.promote[0]:
        count, high, high_config = quantization.promote
        with tempfile.TemporaryDirectory(prefix="sensitivity-", dir=prepared.fp32_file.parent) as tmp, \
                step("mixed precision: sensitivity of each MatMul alone", context.timings):
            ranked = outlier_check.sensitivity(prepared.fp32_file, done.quantize, source.inputs[probe[0]], Path(tmp),
                                               threads)
        promoted = [r["node"] for r in ranked if r["node"] not in skip][:count]
        done.quantize = quantizers.mixed(done.quantize, high, promoted)
        done.mixed = {"promoted": promoted, "quantizer": high_config, "case": source.layouts[probe[0]]["case"],
                      "sensitivity": ranked}
    if quantization.route and quantization.route[0]:
        patterns, other, other_config = quantization.route
        routed = [n for n in excluded(prepared.nodes, patterns, "--nbits-for") if n not in skip]
        if not routed:
            raise UsageError(f"--nbits-for {' '.join(patterns)} matches none of the {len(prepared.nodes)} "
                             "MatMul(s) left to quantize; check the pattern against the node or weight names")
        done.quantize = quantizers.mixed(done.quantize, other, routed)
        done.mixed = {"promoted": routed, "patterns": patterns, "quantizer": other_config}
    if checks.outlier_ratio:
        done.quantize = outlier_channels.keeping_outliers_fp32(done.quantize, [source.inputs[i] for i in probe],
                                                               threads, checks.outlier_ratio, done.split)
    if quantization.smooth:
        done.quantize = smooth_activations.smoothing(done.quantize, quantization.calibration[0], threads,
                                                     done.smoothing)
    done.quantize = quantizers.keeping_fp32(done.quantize, prepared.input_readers)
    return done


def stress_checks(prepared: Prepared, quantize: outlier_check.Quantizer, skip: list[str], checks: WeightChecks,
                  context: StageRun) -> tuple[dict | None, list[str], dict | None]:
    """(the outlier-stress gate's report section, the MatMuls it keeps fp32, the worst-case figure) — None, [],
    None with `--outliers off`; the worst case only with a `--worst-case-budget`."""
    if checks.outliers == "off":
        return None, [], None
    source = prepared.source
    stress = outlier_check.run(prepared.stressed, quantize, skip, source, checks, context)
    worst_case = (outlier_check.worst_case(prepared.worst, quantize, skip + stress["excluded"], source, context,
                                           checks.worst_case_budget)
                  if checks.worst_case_budget is not None else None)
    return stress, stress["excluded"], worst_case


def _skipped(prepared: Prepared, exclude: list[str]) -> list[str]:
    """The MatMuls `--exclude` keeps fp32; UsageError when that is all of them."""
    skip = excluded(prepared.nodes, exclude)
    if len(skip) == len(prepared.nodes):
        raise UsageError(f"--exclude {' '.join(exclude)} matches all {len(prepared.nodes)} MatMul(s): nothing "
                         "would be quantized; narrow the pattern")
    return skip


def _validated(stage_name: str, model_file: Path, source: stage.StageInput, min_cosine: float,
               context: StageRun) -> tuple[list[dict], dict]:
    """(per-layout cases, their worst) of the quantized model against fp32; UsageError below `min_cosine`."""
    with step("compare with fp32 at the validation layouts", context.timings):
        cases = metrics.check(open_session(model_file, context.threads), source.layouts, source.inputs,
                              source.reference, tolerance=None)
    worst = metrics.worst(cases)
    if min_cosine and not (worst["min_token_cosine"] or 0) >= min_cosine:
        case = min(cases, key=lambda c: metrics.worst([c])["min_token_cosine"] or 1)["case"]
        raise UsageError(f"the {stage_name} model reaches min per-token cosine {worst['min_token_cosine']:.5f} "
                         f"against fp32 (at '{case}'), below --min-cosine {min_cosine}; nothing written "
                         "(try other options, or a lower floor)")
    return cases, worst


def _split_record(ratio: float, prepared: Prepared, split: dict[str, outlier_channels.Found]) -> dict | None:
    """The report's outlier_channels section (None when the split is off)."""
    if not ratio:
        return None
    return {"ratio": ratio,
            "how": ("input channels and output columns whose max |value| at the calibration layouts exceeds "
                    "ratio x the median channel's are split off into fp32 MatMuls (quantize/outlier_channels.py)"),
            "calibration_cases": [prepared.source.layouts[i]["case"]
                                  for i in outlier_check.probe_indices(prepared.source.layouts)],
            "model": split.get(prepared.fp32_file.name, {}),
            "outlier_stress_model": split.get(prepared.stressed.path.name) if prepared.stressed else None}


def run(stage_name: str, path: str | Path, out: str | Path, quantization: Quantization, checks: WeightChecks,
        context: StageRun) -> dict:
    """IN -> OUT/model.onnx + OUT/report.json through `quantization`, checked by `checks`; returns the report.

    `checks.min_cosine` > 0: the min per-token cosine against fp32 over the validation layouts must reach it,
    else UsageError (exit 2) and nothing written. `checks.outlier_ratio` > 0: outlier input channels and output
    columns of each MatMul (max |value| above that many times the median channel's, `quantize.outlier_channels`)
    are split off into fp32 MatMuls before quantizing. `checks.worst_case_budget`: seconds for the worst-case
    outlier-stress figure (`outlier_check.worst_case`); None: not measured.
    """
    exclude, timings = list(checks.exclude), context.timings
    check_folder_output(out, stage_name, [path], context.force)
    out = Path(out)
    prepared = prepare(path, context, checks.outliers != "off", out.parent,
                       worst=checks.worst_case_budget is not None)
    source = prepared.source
    try:
        skip = _skipped(prepared, exclude)
        composed = compose(quantization, prepared, skip, checks, context)
        quantize, mixed, split_record = composed.quantize, composed.mixed, composed.split
        stress, stress_skip, worst_case = stress_checks(prepared, quantize, skip, checks, context)
        with staged_folder(out, stage_name, [path], context.force, keep_log=True) as staged:
            model_file = staged / "model.onnx"
            config, calibration = quantization.config, quantization.calibration
            with step(f"quantize ({', '.join(f'{k} {v}' for k, v in config.items())})", timings):
                quantize(prepared.fp32_file, model_file, skip + stress_skip)
            cases, worst = _validated(stage_name, model_file, source, checks.min_cosine, context)
            with step("compare with fp32 on held-out photos", timings):
                photos = photo_check.measure(source.path, model_file, context.threads)
            model = onnx_io.load(model_file)
            if mixed:
                mixed["nbits_by_bits"] = quantizers.nbits_by_bits(model)
            reason = {**{n: "excluded (--exclude)" for n in skip},
                      **{n: quantizers.INPUT_READER_REASON for n in prepared.input_readers},
                      **{n: "excluded (outlier stress)" for n in stress_skip},
                      **outlier_channels.fp32_reasons(split_record.get(prepared.fp32_file.name, {}))}
            fp32 = [{"node": n.name, "op": n.op_type, "weight": w, "shape": list(n.inputs[1].const_value.shape),
                     "reason": reason.get(n.name, "not a MatMul" if n.op_type != "MatMul" else "left by the quantizer")}
                    for n, w in quantizers.weight_nodes(model)]
            files = onnx_io.file_sizes(model_file)
            input_files = onnx_io.file_sizes(source.path)
            report = {
                **stage.report_header(stage_name, source),
                "config": {**config, "exclude": exclude, "outliers": checks.outliers, "min_cosine": checks.min_cosine},
                "quantized_nodes": quantizers.quantized_count(model),
                "fp32_weight_nodes": fp32,
                "op_counts": stage.op_counts(model),
                "validation": {"reference": "fp32 input model in ONNX Runtime", "machine": cpu.facts(), **worst,
                               "cases": cases, "photos": photos},
                "outlier_channels": _split_record(checks.outlier_ratio, prepared, composed.split),
                "mixed_precision": mixed,
                "calibration": ({**calibration[1], "items": len(calibration[0]())} if calibration else None),
                "smoothing": {"model": composed.smoothing.get(prepared.fp32_file.name),
                              "outlier_stress_model": composed.smoothing.get(prepared.stressed.path.name)
                              if prepared.stressed else None} if quantization.smooth else None,
                "outlier_stress": stress,
                "outlier_stress_worst_case": worst_case,
                **stage.size_record(files, input_files),
                **stage.report_footer(timings),
            }
            del model
            reports.write(staged, report)
    finally:
        if not context.keep_prepared:
            prepared.folder.cleanup()
    worst_line = (f"worst case {worst_case['validation']['min_token_cosine']:.5f}" if worst_case else
                  "worst case not measured (--worst-case-budget S)")
    stress_line = (f"; outlier stress: min per-token cosine {stress['validation']['min_token_cosine']:.5f} "
                   f"({len(stress_skip)} MatMul(s) kept fp32 for it), {worst_line}" if stress else "")
    say(f"wrote {out}/model.onnx: {report['quantized_nodes']} quantized MatMul(s), {len(fp32)} weight node(s) fp32, "
        f"{sum(files.values()) / 2**20:.1f} MiB ({100 * report['size_ratio']:.1f}% of fp32); vs fp32: min per-token "
        f"cosine {worst['min_token_cosine']:.5f}, max abs diff {worst['max_abs']:.3g}{stress_line}")
    return report
