"""`python -m quantize {optimize,int4} IN OUT ...`: the optimize and INT4 stages.

IN is a model.onnx (or a stage folder holding one); OUT is a stage folder that receives model.onnx
(+ model.onnx.data when large) and report.json. Exit 0 on success, 1 when a pass breaks parity
(OUT untouched), 2 on bad input (one line on stderr).
"""

import argparse
import logging
import sys
from pathlib import Path

from quantize import int4, optimize, stage
from core.errors import Parser, UsageError, main_wrapper


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="python -m quantize", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    opt = commands.add_parser("optimize", help="fuse for ONNX Runtime CPU (fp32)")
    int4_cmd = commands.add_parser("int4", help="weight-only INT4 (MatMulNBits)")
    for sub in (opt, int4_cmd):
        sub.add_argument("input", type=Path, metavar="IN", help="model.onnx or a stage folder")
        sub.add_argument("out", type=Path, metavar="OUT", help="output stage folder")
        sub.add_argument("--threads", type=int, default=0, help="ORT intra-op threads for the checks (0: all)")
        sub.add_argument("--force", action="store_true",
                         help="replace an existing OUT that is not an earlier output of this stage")
    opt.add_argument("--skip", action="append", default=[], choices=list(optimize.PASSES),
                     help="leave out a pass (repeatable), e.g. --skip rotary")
    int4_cmd.add_argument("--block-size", type=int, default=32, choices=int4.BLOCK_SIZES,
                          help="weights per quantization block along K (default 32)")
    sym = int4_cmd.add_mutually_exclusive_group()
    sym.add_argument("--symmetric", dest="symmetric", action="store_true", default=True,
                     help="no zero points (default)")
    sym.add_argument("--asymmetric", dest="symmetric", action="store_false", help="with zero points")
    int4_cmd.add_argument("--accuracy-level", type=int, default=4, choices=int4.ACCURACY_LEVELS,
                          help="MatMulNBits compute: 0 fp32, 4 int8 activations (default 4)")
    int4_cmd.add_argument("--exclude", action="append", default=[], metavar="PATTERN",
                          help="keep fp32 the MatMuls whose node or weight name matches this regex (repeatable)")
    args = parser.parse_args(argv)
    if args.threads < 0:
        raise UsageError(f"--threads must be >= 0, got {args.threads}")
    return args


def main(argv: list[str] | None = None) -> int:
    logging.disable(logging.INFO)  # onnxscript / ORT log every rewrite and quantized node at INFO

    def body() -> int:
        args = parse_args(argv)
        if args.command == "optimize":
            optimize.run(args.input, args.out, set(args.skip), args.threads, force=args.force)
        else:
            int4.run(args.input, args.out, args.block_size, args.symmetric, args.accuracy_level,
                     args.exclude, args.threads, force=args.force)
        return 0

    return main_wrapper(body)


if __name__ == "__main__":
    sys.exit(main())
