"""`python -m quantize {optimize,int8,int4,fp16,q4f16,qnn} IN OUT ...`: the optimize, INT8, INT4, fp16, q4f16 and qnn stages.

IN is a model.onnx (or a stage folder holding one); OUT is a stage folder that receives model.onnx
(+ model.onnx.data when large) and report.json. Exit 0 on success, 1 when a pass breaks parity
(OUT untouched), 2 on bad input (one line on stderr).
"""

import argparse
import logging
import sys
from pathlib import Path

from core.errors import Parser, UsageError, main_wrapper
from core.staging import add_clobber_argument
from quantize import (
    fp16,
    fp16_plan,
    int4,
    int8,
    optimize,
    outlier_channels,
    outlier_check,
    ov_int8,
    q4f16,
    qnn,
    quantizers,
)


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
    qnn_cmd.add_argument("--min-cosine", type=float, default=qnn.DEFAULT_MIN_COSINE, metavar="COS",
                         help="min per-token cosine against fp32 on photos (default %(default)s)")
    for sub in (opt, int8_cmd, int4_cmd, fp16_cmd, q4f16_cmd, qnn_cmd, ov_int8_cmd):
        sub.add_argument("input", type=Path, metavar="IN", help="model.onnx or a stage folder")
        sub.add_argument("out", type=Path, metavar="OUT", help="output stage folder")
        sub.add_argument("--threads", type=int, default=0, help="ORT intra-op threads for the checks (0: all)")
        sub.add_argument("--force", action="store_true",
                         help="replace an existing OUT that another stage of this tool wrote (only its listed files)")
        add_clobber_argument(sub)
    opt.add_argument("--skip", action="append", default=[], choices=list(optimize.PASSES),
                     help="leave out a pass (repeatable), e.g. --skip rotary")
    opt.add_argument("--checks", default="saved", choices=optimize.CHECKS,
                     help="saved (default): the saved model at every validation layout, and on a failure each pass "
                          "again at the failing layouts to name it; each: also each pass at a few layouts as it "
                          "goes; all: each pass at every layout")
    int4_cmd.add_argument("--block-size", type=int, default=32, choices=quantizers.BLOCK_SIZES,
                          help="weights per quantization block along K (default 32)")
    sym = int4_cmd.add_mutually_exclusive_group()
    sym.add_argument("--symmetric", dest="symmetric", action="store_true", default=True,
                     help="no zero points (default)")
    sym.add_argument("--asymmetric", dest="symmetric", action="store_false", help="with zero points")
    int4_cmd.add_argument("--accuracy-level", type=int, default=4, choices=quantizers.ACCURACY_LEVELS,
                          help="MatMulNBits compute: 0 fp32, 4 int8 activations (default 4)")
    int4_cmd.add_argument("--algorithm", default="rtn", choices=quantizers.ALGORITHMS,
                          help="rtn: round to nearest per block (default); hqq: Half-Quadratic Quantization, scales "
                               "and zero points fitted per block without data (needs --asymmetric and torch); gptq: "
                               "rounding errors pushed where photos through the model's processor have little energy "
                               "(quantize/gptq.py)")
    int4_cmd.add_argument("--int8-matmuls", type=int, default=0, metavar="N",
                          help="mixed precision: the N MatMuls most sensitive to 4 bits (each alone, on the model's "
                               "own weights) are quantized to 8 bits instead (default 0: all 4-bit)")
    int4_cmd.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                          help="keep fp32 the MatMuls whose node or weight name matches this regex (repeatable)")
    add_int8_options(int8_cmd)
    add_outlier_options(int4_cmd, "report")
    add_fp16_options(fp16_cmd, fp16.DEFAULT_MIN_COSINE)
    add_fp16_options(q4f16_cmd, q4f16.DEFAULT_MIN_COSINE)
    q4f16_cmd.add_argument("--int4", type=Path, metavar="FOLDER",
                           help="the int4 stage whose weights recipe to take (default: the int4 folder beside IN)")
    args = parser.parse_args(argv)
    if args.command == "int8":
        check_int8_options(args)
    if args.threads < 0:
        raise UsageError(f"--threads must be >= 0, got {args.threads}")
    return args


def add_outlier_options(sub: argparse.ArgumentParser, default: str) -> None:
    sub.add_argument("--outliers", default=default, choices=outlier_check.MODES,
                     help="outlier-stress check: exclude = keep fp32 the MatMuls it shows must stay fp32, "
                          f"report = measure only, off (default {default})")
    sub.add_argument("--stress-target", type=float, default=outlier_check.DEFAULT_TARGET, metavar="COS",
                     help="min per-token cosine the outlier-stress copy (outliers written once by the patch "
                          "embedding, as in trained ViTs) must reach with --outliers exclude "
                          f"(default {outlier_check.DEFAULT_TARGET})")
    sub.add_argument("--worst-case-budget", type=float, default=outlier_check.DEFAULT_WORST_CASE_BUDGET,
                     metavar="S", help="also measure the worst-case outlier-stress figure (every writer of the stream "
                     "scaled; a figure, never a gate) for up to S seconds after its first layout (default: not "
                     "measured; `python -m bench.sweep` measures it for every point)")
    sub.add_argument("--min-cosine", type=float, default=0.0, metavar="COS",
                     help="refuse (exit 2, nothing written) when the min per-token cosine against fp32 over the "
                          "validation layouts is below COS (default 0: no floor)")
    sub.add_argument("--outlier-ratio", type=float, default=outlier_channels.DEFAULT_RATIO, metavar="R",
                     help="split off into fp32 the MatMul input channels whose max |x| exceeds R x the median "
                          f"channel's (LLM.int8()-style; 0: off; default {outlier_channels.DEFAULT_RATIO:g})")


def add_int8_options(sub: argparse.ArgumentParser) -> None:
    """int8's options; those of the other method default to None so that giving them is an error."""
    sub.add_argument("--method", default="dynamic", choices=int8.METHODS,
                     help="dynamic: quantize_dynamic, MatMulInteger with per-tensor uint8 activations (default); "
                          "static: quantize_static (QDQ), activation scales calibrated on photos through the "
                          "family's processor; nbits: MatMulNBits bits=8")
    sub.add_argument("--smooth", action="store_true",
                     help="dynamic/static: SmoothQuant-style smoothing first (LayerNorm scale moved into the next "
                          "MatMuls' weights, from the calibration photos)")
    sub.add_argument("--per-tensor", dest="per_channel", action="store_false", default=None,
                     help="dynamic/static: one weight scale per tensor instead of per output column")
    rng = sub.add_mutually_exclusive_group()
    rng.add_argument("--reduce-range", dest="reduce_range", action="store_true", default=None,
                     help="dynamic/static: weights in 7 bits, exact on every x86 CPU (default)")
    rng.add_argument("--full-range", dest="reduce_range", action="store_false",
                     help="dynamic/static: weights in 8 bits: more accurate on CPUs with VNNI/AMX (and ARM), but the "
                          "int8 kernel of x86 CPUs without VNNI saturates")
    sub.add_argument("--block-size", type=int, default=None, choices=quantizers.BLOCK_SIZES,
                     help="nbits: weights per quantization block along K (default 32)")
    sym = sub.add_mutually_exclusive_group()
    sym.add_argument("--symmetric", dest="symmetric", action="store_true", default=None,
                     help="nbits: no zero points (default)")
    sym.add_argument("--asymmetric", dest="symmetric", action="store_false", help="nbits: with zero points")
    sub.add_argument("--accuracy-level", type=int, default=None, choices=quantizers.ACCURACY_LEVELS,
                     help="nbits: MatMulNBits compute, 0 fp32, 4 int8 activations per block (default 4)")
    sub.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                     help="keep fp32 the MatMuls whose node or weight name matches this regex (repeatable)")
    sub.add_argument("--nbits-for", action="append", default=[], metavar="PATTERN",
                     help="dynamic/static: quantize the MatMuls whose node or weight name matches this regex as "
                          "MatMulNBits 8-bit, block 32, accuracy level 4 instead (int8 activations per token and "
                          "block: for inputs with outlier tokens, e.g. down_proj after SwiGLU; repeatable)")
    add_outlier_options(sub, "exclude")


def add_fp16_options(sub: argparse.ArgumentParser, min_cosine: float) -> None:
    sub.add_argument("--min-cosine", type=float, default=min_cosine, metavar="COS",
                     help="refuse (exit 2, nothing written) when the min per-token cosine against fp32, over the "
                          "validation layouts, emulated and on the CPU EP, of the model and of its outlier-stress "
                          f"copy, is below COS (default {min_cosine}; 0: no floor)")
    sub.add_argument("--headroom", type=float, default=fp16_plan.DEFAULT_HEADROOM, metavar="H",
                     help="keep float32 every node whose tensors reach max |x| > 65504 / H at the calibration "
                          f"layouts (default {fp16_plan.DEFAULT_HEADROOM:g})")
    sub.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                     help="keep float32 the nodes whose name matches this regex (repeatable)")
    sub.add_argument("--outliers", default="exclude", choices=outlier_check.MODES,
                     help="outlier-stress copy: exclude = its magnitudes keep nodes float32 too and its checks "
                          "are gated (default), report = measured only, off")


def check_int8_options(args: argparse.Namespace) -> None:
    """Refuse options of the other method; fill in the defaults of the chosen one."""
    nbits_only = {"--block-size": args.block_size, "--symmetric/--asymmetric": args.symmetric,
                  "--accuracy-level": args.accuracy_level}
    other = {"dynamic": nbits_only, "static": nbits_only,
             "nbits": {"--per-tensor": args.per_channel, "--reduce-range/--full-range": args.reduce_range}}[args.method]
    given = [name for name, value in other.items() if value is not None]
    if given:
        raise UsageError(f"{', '.join(given)} do(es) not apply to --method {args.method}")
    defaults = {"per_channel": True, "reduce_range": int8.REDUCE_RANGE, "block_size": 32, "symmetric": True,
                "accuracy_level": 4}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)


def main(argv: list[str] | None = None) -> int:
    logging.disable(logging.INFO)  # onnxscript / ORT log every rewrite and quantized node at INFO

    def body() -> int:
        args = parse_args(argv)
        if args.command == "optimize":
            optimize.run(args.input, args.out, set(args.skip), args.threads, args.checks, force=args.force)
        elif args.command == "int8":
            int8.run(args.input, args.out, args.method, args.per_channel, args.block_size, args.symmetric,
                     args.accuracy_level, args.exclude, args.outliers, args.stress_target, args.threads, args.force,
                     args.outlier_ratio, args.reduce_range, args.min_cosine, args.worst_case_budget, args.smooth,
                     args.nbits_for)
        elif args.command == "fp16":
            fp16.run(args.input, args.out, args.threads, args.force, args.min_cosine, args.headroom, args.exclude,
                     args.outliers)
        elif args.command == "ov-int8":
            ov_int8.run(args.input, args.out, ov_int8.OvInt8Options.from_args(args), args.force)
        elif args.command == "qnn":
            qnn.run(args.input, args.out, args.threads, args.force, args.min_cosine)
        elif args.command == "q4f16":
            q4f16.run(args.input, args.out, args.int4, args.threads, args.force, args.min_cosine, args.headroom,
                      args.exclude, args.outliers)
        else:
            int4.run(args.input, args.out, args.block_size, args.symmetric, args.accuracy_level,
                     args.exclude, args.threads, force=args.force, outliers=args.outliers,
                     target=args.stress_target, outlier_ratio=args.outlier_ratio, min_cosine=args.min_cosine,
                     worst_case_budget=args.worst_case_budget, int8_matmuls=args.int8_matmuls,
                     algorithm=args.algorithm)
        return 0

    return main_wrapper(body)


if __name__ == "__main__":
    sys.exit(main())
