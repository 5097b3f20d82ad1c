"""The fp16 stage: `python -m quantize fp16 IN OUT`: float16 weights and activations where they fit, float32
where they would overflow.

IN -> OUT/model.onnx (the package's `vision_encoder_fp16.onnx`) + OUT/report.json:
1. IN is read and run at every validation layout of its report (`quantize.stage.read_input`: its fp32
   outputs there are the reference).
2. The outlier-stress copy (`quantize.outlier_check.make_stressed`, outliers written once by the patch
   embedding and biases, as in trained ViTs) is written beside it.
3. The plan (`quantize.fp16_plan`): the data path's compute nodes run in float16; normalisations, softmax and
   the residual stream stay float32, and so does every node whose tensors come within FP16_MAX / headroom
   in an fp32 run of the model or of the stress copy at the calibration layouts (`--outliers exclude`).
4. The conversion (`quantize.passes.float16`): graph inputs and outputs stay float32, so the I/O contract does
   not change (Qwen3-VL: pixel_values float32 [num_patches, 1536], grid_thw int64 [num_images, 3] ->
   image_features, deepstack_embeds_k float32 [num_tokens, out_hidden]); one Cast per value and precision.
5. The checks, against fp32 at every validation layout, of the model and (unless `--outliers off`) of the
   stress copy converted with the same plan, each run two ways: as written on ONNX Runtime's CPU EP (what a
   CPU user gets: most ops there run in float32 between casts, `quantize.fp16_emulation` says why), and
   as emulated float16 storage (every float16 tensor rounded, `quantize.fp16_emulation`), the report's
   `validation`. Every output must be finite in all four, else CheckFailed (exit 1); the min per-token
   cosine over them must reach `--min-cosine` (default 0.999), else UsageError (exit 2), as int8 / int4
   refuse; nothing is written then.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from quantize import fp16_emulation, fp16_plan, outlier_check, quantizers, stage, weight_stage
from quantize.options import (
    StageRun,
    add_floor_argument,
    add_stress_arguments,
    check_floor,
    check_stress,
    excluded,
)
from quantize.passes import elem_types, float16, unfuse_attention
from vlm_vision_onnx.core import cpu, onnx_io
from vlm_vision_onnx.core import parity as metrics
from vlm_vision_onnx.core import report as reports
from vlm_vision_onnx.core.errors import CheckFailed, UsageError
from vlm_vision_onnx.core.progress import say, step
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.core.staging import WorkFolder, check_folder_output, staged_folder

STAGE = "fp16"
#: The min per-token cosine against fp32 the fp16 model must reach by default (issue 18's floor).
DEFAULT_MIN_COSINE = 0.999
CPU_HOW = ("the fp16 model as written, ONNX Runtime CPU EP (default optimizations): ops without a float16 CPU "
           "kernel run in float32 between inserted Casts, whose float32 -> float16 -> float32 pairs ORT removes")
EMULATION_HOW = ("float16 storage emulated (quantize/fp16_emulation.py): every float16 tensor of the fp16 model "
                 "rounded to float16 where it is written, each op computing in float32, ORT CPU EP, optimizations off")


def _checked(model_file: Path, layouts: list[dict], inputs: list[dict], reference: list, threads: int,
             optimize: bool, how: str) -> dict:
    """{run, finite, nonfinite_cases, max_abs, min_cosine, min_token_cosine, cases} of one model against
    `reference` (per layout, its outputs in output order)."""
    cases = metrics.check(open_session(model_file, threads, optimize=optimize), layouts, inputs, reference,
                          tolerance=None)
    nonfinite = [c["case"] for c in cases if any(o.get("nonfinite") for o in c["outputs"].values())]
    return {"run": how, "finite": not nonfinite, "nonfinite_cases": nonfinite, **metrics.worst(cases),
            "cases": cases}


def _both(fp16_file: Path, emulated: Path, source: stage.StageInput, reference: list, context: StageRun,
          what: str) -> tuple[dict, dict]:
    """(emulated float16 storage, CPU EP as written) of `fp16_file` at every layout against `reference`;
    the emulation is written to `emulated`."""
    threads, timings = context.threads, context.timings
    with step(f"{what}: emulated float16 vs fp32 at the {len(source.layouts)} layouts", timings):
        fp16_emulation.emulate(fp16_file, emulated)
        emulation = _checked(emulated, source.layouts, source.inputs, reference, threads, False, EMULATION_HOW)
    with step(f"{what}: CPU EP vs fp32 at the {len(source.layouts)} layouts", timings):
        on_cpu = _checked(fp16_file, source.layouts, source.inputs, reference, threads, True, CPU_HOW)
    return emulation, on_cpu


def _convert(src: Path, dst: Path, data_input: str, measured: dict, headroom: float,
             exclude: list[str]) -> tuple[fp16_plan.Plan, float16.Converted]:
    """Plan and convert the fp32 model `src` into `dst`."""
    model = onnx_io.load(src, in_memory=True)
    elem_types.infer(model)
    plan = fp16_plan.decide(model, data_input, measured, headroom, exclude)
    done = float16.convert(model, plan.half)
    onnx_io.save(model, dst)
    return plan, done


@dataclass(frozen=True)
class Fp16Options:
    """The fp16 and q4f16 stages' options (checked on construction). `min_cosine`: the floor (0: none);
    `headroom`: keep float32 every node whose tensors reach max |x| > 65504 / headroom at the calibration layouts;
    `exclude`: regexes of nodes kept float32; `outliers`: the outlier-stress copy, exclude (its magnitudes enter
    the plan, its checks are gated), report (measured, not gated) or off."""

    min_cosine: float = DEFAULT_MIN_COSINE
    headroom: float = fp16_plan.DEFAULT_HEADROOM
    exclude: tuple[str, ...] = ()
    outliers: str = "exclude"

    def __post_init__(self):
        check_floor(self.min_cosine)
        if not self.headroom >= 1:
            raise UsageError(f"--headroom must be >= 1 (a factor below float16's largest value), got {self.headroom}")
        check_stress(self.outliers)
        excluded([], list(self.exclude))  # a bad pattern is refused before any work

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser, min_cosine: float = DEFAULT_MIN_COSINE) -> None:
        """The options, `min_cosine` the stage's default floor."""
        add_floor_argument(parser, min_cosine, "refuse (exit 2, nothing written) when the min per-token cosine "
                           "against fp32, over the validation layouts, emulated and on the CPU EP, of the model and of "
                           "its outlier-stress copy, is below COS")
        parser.add_argument("--headroom", type=float, default=fp16_plan.DEFAULT_HEADROOM, metavar="H",
                            help="keep float32 every node whose tensors reach max |x| > 65504 / H at the calibration "
                                 f"layouts (default {fp16_plan.DEFAULT_HEADROOM:g})")
        parser.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                            help="keep float32 the nodes whose name matches this regex (repeatable)")
        add_stress_arguments(parser, "exclude", "its magnitudes keep nodes float32 too and its checks are gated",
                             target=False)

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> Fp16Options:
        return cls(args.min_cosine, args.headroom, tuple(args.exclude), args.outliers)


def _stress_copy(fp32_file: Path, timings: dict) -> tuple[Path, dict]:
    """The gate outlier-stress copy of `fp32_file`, beside it, and `outliers.stress`'s record."""
    stressed = fp32_file.with_name("stressed.onnx")
    with step("outlier stress: outliers written once (patch embedding + biases) in a copy", timings):
        try:
            return stressed, outlier_check.make_stressed(fp32_file, stressed, outlier_check.GATE_WRITERS)
        except UsageError as err:
            raise UsageError(f"{err}; give the optimize stage's output as IN (`python -m quantize optimize` "
                             "first), or --outliers off") from None


def _measure(source: stage.StageInput, fp32_file: Path, stressed: Path | None, data_input: str, feeds: list[dict],
             context: StageRun) -> dict[str, dict[str, float]]:
    """{"model": peaks[, "outlier-stress copy": peaks]}: max |x| of every candidate's tensors at `feeds`."""
    threads = context.threads
    with step("max |x| of every float16 candidate's tensors at the calibration layouts", context.timings):
        model = source.model
        names = fp16_plan.tap_names(model, fp16_plan.candidates(model, fp16_plan.data_path(model, data_input)))
        source.model = None  # one copy of the weights in memory at a time: the rest reads the files
        del model
        measured = {"model": fp16_plan.magnitudes(fp32_file, names, feeds, threads)}
        if stressed is not None:
            measured["outlier-stress copy"] = fp16_plan.magnitudes(stressed, names, feeds, threads)
    return measured


def _stress_check(stressed: Path, base: Path, record: dict, plan: fp16_plan.Plan, source: stage.StageInput,
                  settings: dict, outliers: str, context: StageRun) -> dict:
    """The stress copy `base` (`stressed` itself, or its quantized weights) converted with the same plan
    (`settings`: `_convert`'s), against `stressed`'s fp32 outputs at every layout, emulated and on the CPU EP: the
    report's `outlier_stress`."""
    with step("outlier stress: fp32 outputs at every layout", context.timings):
        reference = metrics.run_all(open_session(stressed, context.threads), source.inputs)
    converted = stressed.with_name("stressed-fp16.onnx")
    same, _ = _convert(base, converted, **settings)
    if set(same.kept) != set(plan.kept):
        raise RuntimeError("the plan differs between the model and its outlier-stress copy")
    emulated, on_cpu = _both(converted, stressed.with_name("stressed-fp16-emulated.onnx"), source, reference,
                             context, "outlier stress")
    return {
        "how": ("the outlier-stress copy (quantize/outliers.py, writers 'embedding': residual channels written once "
                "by the patch embedding and biases, as in trained ViTs) converted with the same plan, compared with "
                "its own fp32 outputs at every validation layout"),
        "mode": outliers, "channels": record["channels"], "factors": record["factors"],
        "writers_scaled": record["writers"], "validation": emulated, "cpu_execution_provider": on_cpu,
    }


def _precision(plan: fp16_plan.Plan, done: float16.Converted, measured: dict, headroom: float,
               cases: list[str]) -> dict:
    """The report's `precision`: what runs in float16, what stays float32 and why."""
    return {
        "how": ("float16: the data path's compute nodes (fp16_plan); float32: the nodes below, with their reasons, "
                "every float node outside the data path (grid and position math), graph inputs and outputs; one "
                "Cast per value and precision (passes/float16.py)"),
        "calibration_cases": cases,
        "max_abs_at_calibration": {k: max(v.values(), default=0.0) for k, v in measured.items()},
        "limit": fp16_plan.FP16_MAX / headroom,
        "candidates": plan.candidates, "fp16_nodes": done.half_nodes, "fp16_data_movement_nodes": done.half_movers,
        "fp32_nodes": [{"node": name, **facts} for name, facts in plan.kept.items()],
        "fp32_outside_data_path": plan.not_data_path, "unmeasured": plan.unmeasured, "casts": done.casts,
        "fp16_weights": done.half_weights, "shared_weights": done.shared_weights,
    }


def _weights(recipe: weight_stage.Recipe, fp32_file: Path, stressed: Path | None, source: stage.StageInput,
             probe: list[int], context: StageRun) -> tuple[Path, Path | None]:
    """`recipe`'s quantized weights of the fp32 model and of its stress copy (files beside them); the quantized
    model, types inferred, replaces `source.model` (the plan reads it)."""
    quantize = recipe.quantizer([source.inputs[i] for i in probe], context.threads)
    source.model = None  # one copy of the weights in memory at a time: the quantizer reads the file
    with step(f"weights: the {recipe.stage} recipe of {recipe.source}", context.timings):
        base = fp32_file.with_name("weights.onnx")
        quantize(fp32_file, base, recipe.skip)
        source.model = onnx_io.load(base)
        elem_types.infer(source.model)
        count = quantizers.quantized_count(source.model)
        if count != recipe.quantized_nodes:
            raise CheckFailed(f"the {recipe.stage} recipe of {recipe.source} quantized {count} node(s) here, its "
                              f"report says {recipe.quantized_nodes}: was it made from another model than this IN?")
        stressed_base = None
        if stressed is not None:
            stressed_base = stressed.with_name("stressed-weights.onnx")
            quantize(stressed, stressed_base, recipe.skip)
    return base, stressed_base


def run(path: str | Path, out: str | Path, options: Fp16Options, context: StageRun,
        weights: weight_stage.Recipe | None = None, stage_name: str = STAGE) -> dict:
    """`python -m quantize fp16`: IN -> OUT/model.onnx + OUT/report.json; returns the report.

    `options.outliers`: "exclude" (the stress copy's magnitudes enter the plan, its checks are gated), "report"
    (the plan reads the model alone; the stress copy is converted with it and measured, not gated), "off".
    `weights`: a quantize stage's recipe applied to IN and its stress copy first (the q4f16 stage,
    `quantize.q4f16`, whose `stage_name` names OUT's stage): the float16 plan and conversion then run on the
    quantized model; the reference stays IN's fp32 outputs.
    """
    threads, timings, outliers = context.threads, context.timings, options.outliers
    exclude = list(options.exclude)
    check_folder_output(out, stage_name, [path], context.force)
    out = Path(out)
    with step("load the input and run it at the validation layouts", timings):
        source = stage.read_input(path, threads)
    data_input = source.family.input_names[0]  # the pixels: the data path starts there (fp16_plan)
    probe = outlier_check.probe_indices(source.layouts)
    with WorkFolder(out) as tmp:
        fp32_file = tmp / "fp32.onnx"
        stage.name_nodes(source.model)
        if weights is not None:  # as the int4 stage saw it (weight_stage.prepare)
            unfuse_attention.apply(source.model, {})
        elem_types.infer(source.model)
        onnx_io.save(source.model, fp32_file)
        stressed, record = _stress_copy(fp32_file, timings) if outliers != "off" else (None, None)
        base, stressed_base = fp32_file, stressed
        if weights is not None:
            base, stressed_base = _weights(weights, fp32_file, stressed, source, probe, context)
        measured = _measure(source, base, stressed_base, data_input, [source.inputs[i] for i in probe], context)
        if outliers == "report":
            measured.pop("outlier-stress copy")
        settings = {"data_input": data_input, "measured": measured, "headroom": options.headroom,
                    "exclude": exclude}
        with staged_folder(out, stage_name, [path], context.force, keep_log=True) as staged:
            model_file = staged / onnx_io.MODEL_FILE
            with step("convert to float16 (plan + pass)", timings):
                plan, done = _convert(base, model_file, **settings)
            validation, on_cpu = _both(model_file, fp32_file.with_name("fp16-emulated.onnx"), source,
                                       source.reference, context, "model")
            runs = {"emulated float16": validation, "CPU EP": on_cpu}
            stress = None
            if stressed is not None:
                stress = _stress_check(stressed, stressed_base, record, plan, source, settings, outliers,
                                       context)
                runs.update({"outlier stress, emulated float16": stress["validation"],
                             "outlier stress, CPU EP": stress["cpu_execution_provider"]})
            gated = {k: v for k, v in runs.items() if outliers != "report" or not k.startswith("outlier")}
            _refuse(gated, options.min_cosine, stage_name)
            files, input_files = onnx_io.file_sizes(model_file), onnx_io.file_sizes(source.path)
            report = {
                **stage.report_header(stage_name, source),
                "config": {"min_cosine": options.min_cosine, "headroom": options.headroom, "exclude": exclude,
                           "outliers": outliers,
                           **({"weights": weights.about()} if weights else {})},
                "precision": _precision(plan, done, measured, options.headroom,
                                        [source.layouts[i]["case"] for i in probe]),
                "validation": {"reference": "fp32 input model in ONNX Runtime", "machine": cpu.facts(), **validation},
                "cpu_execution_provider": on_cpu,
                "outlier_stress": stress,
                "finite": all(r["finite"] for r in runs.values()),
                "min_token_cosine": min(r["min_token_cosine"] for r in gated.values()),
                "op_counts": stage.op_counts(onnx_io.load(model_file)),
                **stage.size_record(files, input_files),
                **stage.report_footer(timings),
            }
            reports.write(staged, report)
    stress_line = (f"; outlier stress: {stress['validation']['min_token_cosine']:.6f} emulated, "
                   f"{stress['cpu_execution_provider']['min_token_cosine']:.6f} on the CPU EP" if stress else "")
    say(f"wrote {out}/model.onnx: {done.half_nodes} node(s) float16, {len(plan.kept)} kept float32, "
        f"{sum(files.values()) / 2**20:.1f} MiB ({100 * report['size_ratio']:.1f}% of fp32); min per-token cosine "
        f"vs fp32: {validation['min_token_cosine']:.6f} emulated, {on_cpu['min_token_cosine']:.6f} on the CPU EP"
        f"{stress_line}; every output finite")
    return report


def _refuse(runs: dict[str, dict], min_cosine: float, stage_name: str = STAGE) -> None:
    """CheckFailed when a run has non-finite outputs; UsageError when one misses `min_cosine`."""
    for what, result in runs.items():
        if not result["finite"]:
            raise CheckFailed(f"the {stage_name} model gives non-finite outputs ({what}) at "
                              f"{', '.join(repr(c) for c in result['nonfinite_cases'])}; nothing written (keep more "
                              "nodes float32: a larger --headroom, or --exclude PATTERN)")
    what, worst = min(((k, r["min_token_cosine"]) for k, r in runs.items()), key=lambda kv: kv[1])
    if min_cosine and not worst >= min_cosine:
        result = runs[what]
        case = min(result["cases"], key=lambda c: metrics.worst([c])["min_token_cosine"])["case"]
        raise UsageError(f"the {stage_name} model reaches min per-token cosine {worst:.6f} against fp32 ({what}, at "
                         f"'{case}'), below --min-cosine {min_cosine}; nothing written (keep more nodes float32: "
                         "a larger --headroom, or --exclude PATTERN; or a lower floor)")
