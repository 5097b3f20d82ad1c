"""`python -m builders.vision`: export a VLM vision encoder to ONNX and validate it against eager.

Writes OUT/model.onnx (+ model.onnx.data when large) and OUT/report.json. Exit 0 when every validation
case is within tolerance, 1 when one is not (the model and report then go to OUT.rejected/ for
inspection, OUT is left untouched), 2 on bad input.
"""

import argparse
import gc
import json
import platform
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import torch
import transformers

from builders import family as family_builder
from builders import onnx_export, static_export, validate
from builders.checkpoint import family_of as checkpoint_family
from builders.config import ModelConfig, load_config
from vlm_vision_onnx.core import onnx_io, session
from vlm_vision_onnx.core import report as reports
from vlm_vision_onnx.core.errors import CheckFailed, Parser, UsageError, main_wrapper, subject
from vlm_vision_onnx.core.progress import say, step
from vlm_vision_onnx.core.staging import (
    add_clobber_argument,
    check_folder_output,
    keep_rejected,
    staged_folder,
)
from vlm_vision_onnx.families.static_size import StaticSize

STAGE = "export"
DEFAULT_MODEL = "qwen3-vl"
EXPORTERS = {"torchscript": onnx_export.export_torchscript, "dynamo": onnx_export.export_dynamo}
OPSETS = {"torchscript": (17, 20), "dynamo": (18, 23)}  # inclusive ranges each exporter handles


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = Parser(prog="python -m builders.vision", description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="a config name in configs/ (default: the family the checkpoint's config.json "
                                         f"names, else {DEFAULT_MODEL} = qwen3-vl-2b)")
    parser.add_argument("--config", help="a config YAML file instead of --model")
    parser.add_argument("--checkpoint", help="save_pretrained folder (or hub id) of a whole VLM (Qwen2-VL, Qwen2.5-VL, "
                                             "Qwen3-VL, Qwen3.5, Phi-4-multimodal); its config.json names the family")
    parser.add_argument("--dynamo", action="store_true", help="export through torch.export (default: TorchScript)")
    parser.add_argument("--dynamic-shapes", choices=onnx_export.DYNAMIC_SHAPES,
                        help="with --dynamo: named = one named Dim per dynamic axis of the I/O contract, auto = "
                             "Dim.AUTO on every input dim, the dims torch specialised reported, refused when one the "
                             f"contract needs dynamic was (default {onnx_export.DEFAULT_DYNAMIC_SHAPES})")
    parser.add_argument("--opset", type=int, help="ONNX opset (default: the config's)")
    parser.add_argument("--ops", choices=onnx_export.OPS, default="contrib",
                        help="contrib (default): ONNX Runtime's com.microsoft MultiHeadAttention where it is faster; "
                             "standard: ai.onnx ops only, for OpenVINO, the ONNX reference evaluator and runtimes "
                             "without Microsoft's contrib ops (docs/runtimes.md)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights and inputs (default 0)")
    parser.add_argument("--example-grid", action="append", metavar="T,H,W",
                        help="an image of the export example, repeatable (default: the config's)")
    parser.add_argument("--static", metavar="WIDTHxHEIGHT",
                        help="a static graph of this one size, for NPUs (FRAMESxWIDTHxHEIGHT: a video): no symbolic "
                             "dim, no Loop, the grid folded into constants, no grid_thw input (docs/npu.md)")
    parser.add_argument("--out", required=True, type=Path, help="output folder")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing --out folder that another stage of this tool wrote (only its listed "
                             "files)")
    add_clobber_argument(parser)
    parser.add_argument("--no-memory-check", action="store_true",
                        help="export even when the example grid looks too large for this machine's memory")
    return parser.parse_args(argv)


def available_memory_bytes() -> int | None:
    """MemAvailable of /proc/meminfo (None where there is no such file)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_memory(needed: int, what: str) -> None:
    """UsageError when `needed` bytes exceed the memory available now, saying how to go on."""
    available = available_memory_bytes()
    if available is not None and needed > available:
        raise UsageError(f"{what} needs about {needed / 2**30:,.1f} GiB to trace and validate, and this machine has "
                         f"{available / 2**30:.1f} GiB available; the example's size does not limit the exported "
                         "model (every size works at run time): use a smaller --example-grid such as 1,16,16, or "
                         "--no-memory-check to try anyway")


def model_config(args: argparse.Namespace) -> ModelConfig:
    """The config the export runs with. With a checkpoint, its config.json's `model_type` names the family:
    without --model / --config the family's default config (its export settings; the dimensions are the
    checkpoint's), and a --model / --config of another family is refused naming both."""
    if not args.checkpoint:
        return load_config(None if args.config else (args.model or DEFAULT_MODEL), args.config)
    family, folder = checkpoint_family(args.checkpoint)
    if not (args.model or args.config):
        return load_config(family)
    config = load_config(None if args.config else args.model, args.config)
    if config.family != family:
        given = f"--config {args.config}" if args.config else f"--model {args.model}"
        raise UsageError(f"{given} is a {config.family} config but checkpoint {folder} is {family}: drop {given} "
                         f"(the checkpoint names its family) or give a {family} config")
    return config


def export(args: argparse.Namespace) -> int:
    timings: dict[str, float] = {}
    if not 0 <= args.seed < 2**32:
        raise UsageError(f"--seed must be in 0..{2**32 - 1}, got {args.seed}")
    check_folder_output(args.out, STAGE, force=args.force)  # before any work
    config = model_config(args)
    # The registry is families.FAMILIES; each entry names its torch side (builders/<family>/family.py).
    fam = family_builder.of_config(config)
    if args.static:  # the size is checked against the patch grid here, before any work
        if args.dynamic_shapes:
            raise UsageError("--static and --dynamic-shapes exclude each other: a static export has no dynamic dim")
        fam = static_export.StaticBuilder(fam, config, args.checkpoint, StaticSize.parse(args.static))
        args.ops = "standard"  # its attention is MatMul + Softmax
    exporter = "dynamo" if args.dynamo else "torchscript"
    if args.dynamic_shapes and not args.dynamo:
        raise UsageError("--dynamic-shapes applies to the torch.export path: add --dynamo")
    shapes: dict = {}  # the dynamo path's record of its dynamic shapes (onnx_export.export_dynamo)
    export_fn = EXPORTERS[exporter]
    if args.dynamo:
        export_fn = partial(export_fn, dynamic=args.dynamic_shapes or onnx_export.DEFAULT_DYNAMIC_SHAPES, facts=shapes)
    if args.static:
        export_fn = fam.exporter(export_fn)  # constants folded, then the static check
    opset = args.opset if args.opset is not None else config.opset
    if not OPSETS[exporter][0] <= opset <= OPSETS[exporter][1]:
        raise UsageError(f"opset {opset} is not supported by the {exporter} path; use {OPSETS[exporter][0]}.."
                         f"{OPSETS[exporter][1]} (LayerNormalization needs 17)")

    with step("load model" + (f" from {args.checkpoint}" if args.checkpoint else ""), timings, "load"):
        module, origin = fam.build(config, args.checkpoint, args.seed)
    if origin["weights"] == "random":
        say(f"NOTE: no checkpoint given: RANDOM weights (seed {args.seed}) at the dimensions of {config.name}")
    example = fam.example(config, module, args.example_grid)
    shown = json.dumps(example.tolist() if isinstance(example, np.ndarray) else example)
    if not args.no_memory_check:
        check_memory(fam.trace_memory_bytes(module, example), f"the export example {shown}")
    spec = fam.io_spec(module)
    inputs = fam.example_inputs(module, example, args.seed)

    with step(f"export through {exporter} (opset {opset}, example {shown})", timings, "export"):
        model = export_fn(fam.export_module(module, args.ops), tuple(inputs[n] for n in spec.input_names), spec,
                          opset)
    if args.ops == "standard":
        model = onnx_export.lower_to_standard(model)
    peak_export = reports.peak_rss_mib()
    if shapes.get("mode") == "auto":
        say(f"Dim.AUTO: torch specialised {', '.join(shapes['specialised']) or 'no input dim'}; kept symbolic "
            + ", ".join(f"{d['input']}[{d['axis']}]" for d in shapes["dims"] if d["torch"].startswith("symbolic")))
    onnx_export.name_io_dims(model, spec)
    onnx_export.set_metadata(model, {
        "model": config.name, "exporter": exporter, "ops": args.ops, "weights": origin["weights"],
        **({"seed": args.seed} if origin["weights"] == "random" else {}), **fam.metadata(module, example),
    })

    out = Path(args.out)
    with staged_folder(out, STAGE, force=args.force, keep_log=True) as tmp:
        with step("save", timings, "save"):
            files = onnx_io.save_proto(model, tmp / "model.onnx")
            del model
        cases = fam.validation_cases(module, example, args.seed)
        with step(f"validate against eager PyTorch ({len(cases)} cases)", timings, "validate"):
            # Eager outputs first, then the torch weights go: one copy of the weights in memory at a time.
            expected = iter([fam.reference(module)(feed) for _, feed in cases])
            del module
            gc.collect()
            sess = session.open_session(tmp / "model.onnx")
            records = validate.validate(lambda feed: sess.run(None, feed), lambda feed: next(expected), cases,
                                        spec.output_names, config.tolerance, fam.case_facts)
        passed = all(r["ok"] for r in records)
        report = {
            "stage": "export",
            "model": config.name,
            "config": config.path,
            "family": config.family,
            **origin,
            "exporter": exporter,
            "ops": args.ops,
            **({"dynamic_shapes": shapes} if shapes else {}),
            "opset": opset,
            "example": json.loads(shown),
            "inputs": {n: spec.dynamic_axes[n] for n in spec.input_names},
            "outputs": spec.output_names,
            "tolerance": config.tolerance,
            "validation": {"passed": passed, "cases": records},
            "files": files,
            "timings_s": timings,
            "peak_rss_mib": {"load_and_export": peak_export, "total": reports.peak_rss_mib()},
            "versions": {"torch": torch.__version__, "transformers": transformers.__version__,
                         "onnx": onnx.__version__, "python": platform.python_version()},
            "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        }
        reports.write(tmp, report)
        if not passed:
            rejected = keep_rejected(tmp, Path(args.out).resolve(), STAGE)
            failed = [r["case"] for r in records if not r["ok"]]
            raise CheckFailed(f"{len(failed)} validation case(s) exceed tolerance: {', '.join(failed)}; "
                                   f"model and report kept in {rejected}")
    say(f"wrote {out}/model.onnx ({sum(files.values()) / 2**20:.1f} MiB), {out}/report.json; "
        f"{len(records)} validation cases passed")
    return 0


def main(argv: list[str] | None = None) -> int:
    def body() -> int:
        args = parse_args(argv)
        subject(args.config or args.checkpoint)  # a --model name is no file: its messages name it
        return export(args)

    return main_wrapper(body)


if __name__ == "__main__":
    sys.exit(main())
