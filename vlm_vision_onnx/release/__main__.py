"""`python -m release {package,speed} BUILD ...`: release packages of a build (torch-free).

    python -m release package build/qwen3-vl [--dist dist] [--name NAME] [--threads N] [--force]
        -> dist/NAME/ (onnx/, config.json, preprocessor_config.json, manifest.json, README.md,
           SHA256SUMS) and dist/NAME.tar.gz; NAME defaults to the export's model (qwen3-vl-2b)
    python -m release speed build/qwen3-vl [--size 448x448] [--threads 1] [--reps 3]
        -> build/qwen3-vl/speed/report.json, which the next `package` puts in the model card
    python -m release genai build/qwen3-vl --checkpoint CKPT --out DIR [--decoder DIR] [--variant fp32|int8|q4]
            [--precision fp32|int8|int4] [--force]
        -> DIR/, a folder onnxruntime-genai 0.18.0 loads as it is (og.Model(DIR)): BUILD's encoder, an embedding
           model, genai's decoder (built from CKPT with exclude_embeds=true unless --decoder), genai_config.json,
           processor_config.json (release/genai.py, docs/genai.md)

Exit 0 done, 2 bad input (one `error:` line, nothing written), 1 a check failed (`genai`: the folder did not
run in onnxruntime-genai; nothing written). These commands never import torch, even where it is installed
(transformers would import it for its image processors when it finds it); `genai` runs genai's builder, which
does, in its own process.
"""

import os
import sys
from pathlib import Path

from vlm_vision_onnx.core.errors import Parser, UsageError, main_wrapper, subject
from vlm_vision_onnx.core.staging import add_clobber_argument


def hide_torch() -> None:
    """Make `import torch` fail in this process (before transformers is imported), so that transformers
    takes its torch-free paths even where torch is installed."""
    if "torch" not in sys.modules:
        sys.modules["torch"] = None  # type: ignore[assignment]  # `import torch` now raises ImportError
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" notice


def parse_args(argv: list[str] | None):
    parser = Parser(prog="python -m release", description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    pkg = commands.add_parser("package", help="dist/NAME/ and dist/NAME.tar.gz from build/NAME/")
    pkg.add_argument("build", type=Path, metavar="BUILD", help="build folder with export/ [surgery/ optimized/ int8/ int4/]")
    pkg.add_argument("--dist", type=Path, default=Path("dist"), help="where to write the package (default dist)")
    pkg.add_argument("--name", help="package name (default: the export's model name)")
    pkg.add_argument("--threads", type=int, help="ONNX Runtime threads for the smoke runs (default: all)")
    pkg.add_argument("--force", action="store_true",
                     help="replace an existing dist/NAME/ (and .tar.gz) that is not an earlier package")
    add_clobber_argument(pkg)
    speed = commands.add_parser("speed", help="time each model of the package-to-be (for its model card)")
    speed.add_argument("build", type=Path, metavar="BUILD")
    speed.add_argument("--size", default="448x448", help="a smoke size HxW (default 448x448)")
    speed.add_argument("--threads", type=int, default=1, help="ONNX Runtime intra-op threads (default 1)")
    speed.add_argument("--reps", type=int, default=3, help="timed runs after one warm-up (default 3)")
    gen = commands.add_parser("genai", help="DIR/: a package onnxruntime-genai 0.18.0 loads (og.Model)")
    gen.add_argument("build", type=Path, metavar="BUILD", help="build folder of `make export CHECKPOINT=CKPT`")
    gen.add_argument("--checkpoint", type=Path, required=True, metavar="CKPT",
                     help="save_pretrained folder of the full Qwen3VLForConditionalGeneration BUILD was exported from")
    gen.add_argument("--out", type=Path, required=True, metavar="DIR", help="the package folder to write")
    gen.add_argument("--decoder", type=Path, metavar="DIR",
                     help="a folder genai's builder wrote with exclude_embeds=true (default: run the builder on CKPT)")
    gen.add_argument("--variant", default="fp32", help="the vision encoder: fp32 (default), int8 or q4")
    gen.add_argument("--precision", default="fp32", choices=("fp32", "int8", "int4"),
                     help="the decoder genai's builder makes (default fp32)")
    gen.add_argument("--force", action="store_true", help="replace an existing DIR that is not an earlier genai package")
    add_clobber_argument(gen)
    args = parser.parse_args(argv)
    if args.command == "package" and args.name is not None and (not args.name or "/" in args.name
                                                                 or args.name in (".", "..")):
        raise UsageError(f"--name must be a plain folder name, got {args.name!r}")
    if getattr(args, "threads", None) is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    return args


def run(argv: list[str] | None) -> int:
    args = parse_args(argv)
    subject(args.build)
    if args.command == "package":
        from vlm_vision_onnx.release.package import package

        folder, archive = package(args.build, args.dist, args.name, args.threads, args.force)
        print(f"wrote {folder}/ and {archive}")
    elif args.command == "genai":
        from vlm_vision_onnx.release.genai import genai

        out = genai(args.build, args.checkpoint, args.out, args.decoder, args.variant, args.precision, args.force)
        print(f"wrote {out}/")
    else:
        from vlm_vision_onnx.release.speed import measure

        print(f"wrote {measure(args.build, args.size, args.threads, args.reps)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return main_wrapper(lambda: run(argv))


if __name__ == "__main__":
    hide_torch()
    sys.exit(main())
