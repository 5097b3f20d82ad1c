"""`python -m quantize {optimize,int8,int4,fp16,q4f16,qnn} IN OUT ...`: the optimize, INT8, INT4, fp16, q4f16 and qnn stages.

IN is a model.onnx (or a stage folder holding one); OUT is a stage folder that receives model.onnx
(+ model.onnx.data when large) and report.json. `--shipped` (int8, int4, ov-int8): the flags the model's family
ships the stage with (its declared `families.shipping.Shipping.flags`, what `make export` runs), found from IN's
`family` metadata; options given beside it override them. `ov-int8 --if-shipped`: only where IN's family builds
the variant by default (`Shipping.ov_int8`; `make export` without OV_INT8). Exit 0 on success, 1 when a pass breaks parity
(OUT untouched), 2 on bad input (one line on stderr).
"""

import argparse
import logging
import sys
from pathlib import Path

from quantize import fp16, int4, int8, optimize, ov_int8, q4f16, qnn
from quantize.options import StageRun, WeightChecks, add_floor_argument
from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.errors import Parser, main_wrapper, subject
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.families import of_model
from vlm_vision_onnx.families.shipping import Shipping

#: The options object of each stage command that has one (bench.shipped resolves the shipped flags through them).
OPTIONS = {"int8": int8.Int8Options, "int4": int4.Int4Options, "fp16": fp16.Fp16Options, "q4f16": fp16.Fp16Options,
           "ov-int8": ov_int8.OvInt8Options}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="python -m quantize", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    opt = commands.add_parser("optimize", help="fuse for ONNX Runtime CPU (fp32)")
    int8_cmd = commands.add_parser("int8", help="weight INT8 (dynamic MatMulInteger, or MatMulNBits 8-bit)")
    int4_cmd = commands.add_parser("int4", help="weight-only INT4 (MatMulNBits)")
    fp16_cmd = commands.add_parser("fp16", help="float16 weights and activations, float32 where they would overflow")
    q4f16_cmd = commands.add_parser("q4f16", help="the INT4 variant's 4-bit weights under float16 activations (WebGPU)")
    ov_int8_cmd = commands.add_parser("ov-int8", help="INT8 for OpenVINO (NNCF: weights and activations; OpenVINO IR)")
    ov_int8.OvInt8Options.add_arguments(ov_int8_cmd)
    qnn_cmd = commands.add_parser("qnn", help="A16W8 QDQ of a static export for Qualcomm's HTP (docs/npu.md)")
    add_floor_argument(qnn_cmd, qnn.DEFAULT_MIN_COSINE, "min per-token cosine against fp32 on photos")
    for sub in (opt, int8_cmd, int4_cmd, fp16_cmd, q4f16_cmd, qnn_cmd, ov_int8_cmd):
        sub.add_argument("input", type=Path, metavar="IN", help="model.onnx or a stage folder")
        sub.add_argument("out", type=Path, metavar="OUT", help="output stage folder")
        StageRun.add_arguments(sub)
    opt.add_argument("--skip", action="append", default=[], choices=list(optimize.PASSES),
                     help="leave out a pass (repeatable), e.g. --skip rotary")
    opt.add_argument("--checks", default="saved", choices=optimize.CHECKS,
                     help="saved (default): the saved model at every validation layout, and on a failure each pass "
                          "again at the failing layouts to name it; each: also each pass at a few layouts as it "
                          "goes; all: each pass at every layout")
    for sub in (int8_cmd, int4_cmd, ov_int8_cmd):
        sub.add_argument("--shipped", action="store_true",
                         help="start from the flags the model's family ships this stage with (what `make export` "
                              "runs; families/shipping.py); options given beside it override them")
    ov_int8_cmd.add_argument("--if-shipped", action="store_true",
                             help="only where IN's family builds this variant by default (what `make export` runs: "
                                  "families/shipping.py, Shipping.ov_int8); otherwise say so, write nothing, exit 0")
    int8.Int8Options.add_arguments(int8_cmd)
    WeightChecks.add_arguments(int8_cmd, "exclude")
    int4.Int4Options.add_arguments(int4_cmd)
    WeightChecks.add_arguments(int4_cmd, "report")
    fp16.Fp16Options.add_arguments(fp16_cmd, fp16.DEFAULT_MIN_COSINE)
    fp16.Fp16Options.add_arguments(q4f16_cmd, q4f16.DEFAULT_MIN_COSINE)
    q4f16_cmd.add_argument("--int4", type=Path, metavar="FOLDER",
                           help="the int4 stage whose weights recipe to take (default: the int4 folder beside IN)")
    return parser.parse_args(argv)


def shipping(model: Path) -> Shipping:
    """What the family of `model` (a model file or stage folder, by its `family` metadata) ships."""
    path = onnx_io.model_path(model)
    return of_model(onnx_io.metadata(path), path).shipping


def shipped_flags(command: str, model: Path) -> list[str]:
    """The flags the family of `model` ships `command` with."""
    return shipping(model).stage_flags(command)


def resolve_shipped(argv: list[str]) -> argparse.Namespace:
    """`argv` parsed; with `--shipped`, parsed again with the family's flags first, so that the options given beside
    it override them (argparse: the last occurrence wins)."""
    args = parse_args(argv)
    if not getattr(args, "shipped", False):
        return args
    command, *rest = argv
    return parse_args([command, *shipped_flags(command, args.input), *(a for a in rest if a != "--shipped")])


def main(argv: list[str] | None = None, hooks: StageRun | None = None) -> int:
    """The command; `hooks`: a StageRun whose measurement hooks (keep_prepared, cases) the stage takes
    (`bench.sweep`)."""
    logging.disable(logging.INFO)  # onnxscript / ORT log every rewrite and quantized node at INFO

    def body() -> int:
        args = resolve_shipped(sys.argv[1:] if argv is None else list(argv))
        subject(getattr(args, "input", None))
        context = StageRun.from_args(args, hooks)
        if args.command == "optimize":
            optimize.run(args.input, args.out, set(args.skip), context, args.checks)
        elif args.command == "int8":
            int8.run(args.input, args.out, int8.Int8Options.from_args(args), WeightChecks.from_args(args), context)
        elif args.command == "int4":
            int4.run(args.input, args.out, int4.Int4Options.from_args(args), WeightChecks.from_args(args), context)
        elif args.command == "fp16":
            fp16.run(args.input, args.out, fp16.Fp16Options.from_args(args), context)
        elif args.command == "q4f16":
            q4f16.run(args.input, args.out, args.int4, fp16.Fp16Options.from_args(args), context)
        elif args.command == "ov-int8":
            if args.if_shipped and not shipping(args.input).ov_int8:
                say(f"ov-int8: not built: {args.input}'s family does not ship it by default (families/shipping.py; "
                    "make export OV_INT8=1 builds it)")
                return 0
            ov_int8.run(args.input, args.out, ov_int8.OvInt8Options.from_args(args), context)
        else:
            qnn.run(args.input, args.out, context, args.min_cosine)
        return 0

    return main_wrapper(body)


if __name__ == "__main__":
    sys.exit(main())
