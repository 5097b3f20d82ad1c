"""The optimize stage: fused fp32 graph for ONNX Runtime's CPU kernels, checked by parity.

Passes, in order, those the model's family declares (`Family.optimize_passes`: the Qwen generations fold, gemm,
patch, ort, rotary; Phi-4-multimodal gemm, ort, unskipln), each rewriting the one in-memory model. The saved model is
checked against the input model's outputs at every validation layout; when it fails, the stage reloads the input and applies
the passes again one at a time, each checked at the failing layouts only, and names the first pass beyond
tolerance. `--checks each` also checks each pass at a few layouts as it goes
(`families.validation.quick_indices`: the first, a same-token-count one, a padded one, the export example,
the largest), `--checks all` at every layout: at 2B dims that costs minutes and finds nothing the saved
model's check does not, so it is not the default.
  fold      static dims and constants (onnxscript optimizer)                 static_dims
  gemm      Gemm -> MatMul + Add                                              gemm_to_matmul
  patch     patch embedding Conv (kernel = stride) -> MatMul                  patch_matmul
  ort       ORT transformer optimizer: Gelu / FastGelu / LayerNormalization  ort_transformer
  rotary    2D RoPE -> RotaryEmbedding                                        rotary_embedding
  unskipln  SkipLayerNormalization -> Add + LayerNormalization                unfuse_skip_layer_norm
No pass makes SkipLayerNormalization: ORT 1.31's CPU kernel for it is about 4x slower than Add +
LayerNormalization (unfuse_skip_layer_norm's docstring has the figures); ORT's optimizer makes them for
Phi-4-multimodal (its Attention fusion needs them), unskipln splits them again.
Qwen3-VL's attention needs no pass: the export already runs it per frame as MultiHeadAttention inside
a Loop (builders/qwen_vl/segment_attention.py), one per block, with no N x N tensor. Phi-4-multimodal's
is fused by the ort pass into Attention WITH its key-padding mask (options from the family: head count
and width from the metadata).
OUT also keeps the saved model's outputs at the validation layouts (outputs.npz) and on the held-out photos
(photo-outputs.npz, `quantize.photo_check`): every quantize stage reading OUT takes them as its fp32 reference
(`core.stage_outputs`, fingerprinted) instead of running the 2B model again.
"""

import gc
from collections.abc import Callable
from pathlib import Path

import onnx_ir as ir
import onnxscript.optimizer

from quantize import photo_check, stage
from quantize.options import StageRun
from quantize.passes import (
    gemm_to_matmul,
    ort_transformer,
    patch_matmul,
    rotary_embedding,
    static_dims,
    unfuse_skip_layer_norm,
)
from vlm_vision_onnx.core import onnx_io, parity, stage_outputs
from vlm_vision_onnx.core import report as reports
from vlm_vision_onnx.core.errors import CheckFailed, UsageError
from vlm_vision_onnx.core.progress import say, step
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.core.staging import check_folder_output, staged_folder
from vlm_vision_onnx.families import validation as layouts_mod


def _ort(model: ir.Model, num_heads: int = 0, hidden_size: int = 0) -> tuple[ir.Model, dict]:
    optimized, stats = ort_transformer.apply(model, num_heads=num_heads, hidden_size=hidden_size)
    onnxscript.optimizer.optimize(optimized)  # shapes for the own passes' checks
    return optimized, stats


def _in_place(apply: Callable[[ir.Model], int]) -> Callable[[ir.Model], tuple[ir.Model, int]]:
    return lambda model: (model, apply(model))


PASSES: dict[str, tuple[str, Callable[[ir.Model], tuple[ir.Model, object]]]] = {
    "fold": ("fold static dims and constants", _in_place(static_dims.apply)),
    "gemm": ("Gemm -> MatMul + Add", _in_place(gemm_to_matmul.apply)),
    "patch": ("patch embedding Conv -> MatMul", _in_place(patch_matmul.apply)),
    "ort": ("ONNX Runtime transformer optimizer (vit)", _ort),
    "rotary": ("2D rotary -> RotaryEmbedding", _in_place(rotary_embedding.apply)),
    "unskipln": ("SkipLayerNormalization -> Add + LayerNorm", _in_place(unfuse_skip_layer_norm.apply)),
}


def optimize(source: stage.StageInput, skip: set[str], threads: int,
             check_at: list[int] | None = None) -> tuple[ir.Model, list[dict]]:
    """Run the passes not in `skip` on `source.model` (taken over: `source.model` is None after); return the
    model and one record per pass. `check_at`: indices of `source.layouts` to check after each pass (a pass
    beyond tolerance there raises CheckFailed naming it); None: no per-pass check (the saved model is)."""
    model, source.model = source.model, None  # the passes own the one in-memory copy from here
    records = []
    declared = source.family.optimize_passes
    for key, (title, run) in PASSES.items():
        if key not in declared:
            records.append({"pass": key, "title": title, "applies": False})
            continue
        if key in skip:
            records.append({"pass": key, "title": title, "skipped": True})
            continue
        options = source.family.optimize_options(source.metadata) if key == "ort" else {}
        with step(title, source.timings):
            model, made = run(model, **options)
        if check_at is None:
            records.append({"pass": key, "title": title, "rewrites": made})
            continue
        cases = parity.check(open_session(model, threads), [source.layouts[i] for i in check_at],
                             [source.inputs[i] for i in check_at], [source.reference[i] for i in check_at],
                             source.tolerance)
        gc.collect()  # the pass's session (ORT's copy of the weights) is gone before the next pass
        found = parity.worst(cases)
        max_abs, cosine = found["max_abs"], found["min_cosine"]
        record = {"pass": key, "title": title, "rewrites": made, "max_abs": max_abs, "min_cosine": cosine,
                  "checked_at": [c["case"] for c in cases], "ok": all(c["ok"] for c in cases)}
        records.append(record)
        say(f"  {key}: {made} {'fused' if isinstance(made, dict) else 'rewrite(s)'}; parity at {len(cases)} "
            f"layouts: max abs diff {max_abs:.2e}, min cosine {cosine:.8f}")
        if not record["ok"]:
            failed = [c["case"] for c in cases if not c["ok"]]
            raise CheckFailed(f"pass {key!r} ({title}) breaks parity at {', '.join(failed)} "
                              f"(max abs diff {max_abs:.3g}); rerun with --skip {key}")
    return model, records


def find_failing_pass(source: stage.StageInput, skip: set[str], threads: int, failed: list[int]) -> None:
    """The saved model failed at layouts `failed`: reload the input and apply the passes again one at a time,
    each checked at those layouts only, so that the first pass beyond tolerance is named (CheckFailed)."""
    source.model = onnx_io.load(source.path, in_memory=True)
    optimize(source, skip, threads, check_at=failed)


#: When each pass is checked: only through the saved model (at every layout; a failure then re-runs the passes
#: one at a time at the failing layouts to name the pass), after each pass at the quick layouts, or at all.
CHECKS = ("saved", "each", "all")


def run(path: str | Path, out: Path, skip: set[str], context: StageRun, checks: str = "saved") -> dict:
    """`python -m quantize optimize`: IN -> OUT/model.onnx + OUT/report.json; returns the report. `skip`: passes
    left out; `checks`: when each pass is checked (CHECKS)."""
    if checks not in CHECKS:
        raise UsageError(f"--checks must be one of {', '.join(CHECKS)}, got {checks!r}")
    check_folder_output(out, "optimize", [path], context.force)  # before any work
    threads, timings = context.threads, context.timings
    with step("load the input and run it at the validation layouts", timings):
        source = stage.read_input(path, threads)
    source.timings = timings
    check_at = {"saved": None, "each": layouts_mod.quick_indices(source.layouts, source.inputs),
                "all": list(range(len(source.layouts)))}[checks]
    model, records = optimize(source, skip, threads, check_at)
    stage.name_nodes(model)
    model.producer_name, model.producer_version = "vlm-vision-onnx.quantize", "optimize"
    counts = stage.op_counts(model)
    with staged_folder(out, "optimize", [path], context.force, keep_log=True) as tmp:
        with step("save", timings):
            files = onnx_io.save(model, tmp / "model.onnx")
        del model  # the check below runs the saved file: ORT's copy of the weights is the only one
        onnx_io.release_memory()
        with step("validate the saved model", timings):
            session = open_session(tmp / "model.onnx", threads)
            produced = parity.run_all(session, source.inputs)
            cases = parity.check_outputs([o.name for o in session.get_outputs()], source.layouts, produced,
                                         source.reference, source.tolerance)
        passed = all(c["ok"] for c in cases)
        if passed:
            with step("run it on the held-out photos (the quantize stages' fp32 reference there)", timings):
                photo_check.keep(tmp, tmp / "model.onnx", session, source.path)
        del session
        gc.collect()
        if not passed:
            failed = [i for i, c in enumerate(cases) if not c["ok"]]
            with step("find the pass that breaks parity", timings):
                find_failing_pass(source, skip, threads, failed)
            raise CheckFailed(f"the saved model fails parity at {', '.join(cases[i]['case'] for i in failed)}, "
                              "though each pass alone holds there; rerun with --checks all and report it")
        for record in records:
            if "rewrites" in record and "ok" not in record:
                record["ok"], record["checked_at"] = True, "the saved model, every layout"
        report = {
            **stage.report_header("optimize", source),
            "skipped_passes": sorted(skip),
            "checks": checks,
            "passes": records,
            "op_counts": counts,
            "validation": {"reference": "input model in ONNX Runtime", "passed": passed, "cases": cases},
            "files": files,
            "input_files": onnx_io.file_sizes(source.path),
            **stage.report_footer(timings),
        }
        reports.write(tmp, report)
        with step("keep the outputs for the next stage", timings):
            stage_outputs.write(tmp, tmp / "model.onnx", source.inputs, produced)
    fused = {k: v for k, v in report["op_counts"].items() if k.startswith("com.microsoft")}
    say(f"wrote {out}/model.onnx ({sum(files.values()) / 2**20:.1f} MiB); fused ops: {fused}")
    return report
