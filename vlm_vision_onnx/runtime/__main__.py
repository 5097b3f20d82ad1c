"""`python -m runtime encode MODEL.onnx --inputs IN.npz --out OUT.npz`: run an exported encoder, no torch.

IN.npz holds the inputs of the model's family by name (Qwen3-VL: `pixel_values` float32 [num_patches, 1536]
and `grid_thw` int64 [num_images, 3]; Phi-4-multimodal: `pixel_values`, `image_attention_mask`,
`image_sizes`); they are checked against the family's I/O contract (`Family.check_inputs`, with the sizes
the model's metadata records) before running. OUT.npz gets every output by name. Exit 2 on bad input.
"""

import sys
from pathlib import Path

import numpy as np

from vlm_vision_onnx.core import onnx_io, session
from vlm_vision_onnx.core.errors import Parser, UsageError, main_wrapper, subject
from vlm_vision_onnx.core.staging import (
    add_clobber_argument,
    check_result_file,
    is_marked_result,
    staged_file,
)
from vlm_vision_onnx.families import check_graph_inputs, of_model
from vlm_vision_onnx.runtime import collection, embed, npu, npu_embed, verify, webgpu


def check_finite(name: str, array: np.ndarray) -> None:
    """UsageError with the count and first index of non-finite values (NaN/Inf make every embedding NaN)."""
    bad = ~np.isfinite(array)
    if bad.any():
        first = tuple(int(i) for i in np.argwhere(bad)[0])
        raise UsageError(f"{name} holds {int(bad.sum())} non-finite value(s) (NaN or Inf), the first at index "
                         f"{list(first)}; fix the input, or pass --allow-nonfinite to run anyway")


def _earlier_result(names: list[str]):
    """Whether an existing OUT.npz carries this tool's mark and holds only this model's output names (an earlier
    `encode` result)."""
    def ours(path: Path) -> bool:
        if not is_marked_result(path):
            return False
        try:
            with np.load(path) as data:
                return set(data.files) <= set(names)
        except (OSError, ValueError):
            return False
    return ours


def encode(model_path: Path, inputs_path: Path, out_path: Path, threads: int | None, force: bool = False,
           allow_nonfinite: bool = False) -> list[str]:
    """Check the inputs, run the model, write OUT.npz atomically; returns the output names."""
    proto = onnx_io.read_light(model_path)
    meta = {p.key: p.value for p in proto.metadata_props}
    names = [o.name for o in proto.graph.output]
    out_path = check_result_file(out_path, [model_path, inputs_path], force, ".npz", _earlier_result(names))
    family = of_model(meta, model_path)
    check_graph_inputs(family, proto.graph, model_path)
    try:
        with np.load(inputs_path) as data:
            inputs = {name: data[name] for name in family.input_names}
    except (OSError, ValueError, KeyError, EOFError) as err:
        raise UsageError(f"{inputs_path}: need an .npz with {', '.join(family.input_names)} ({err})") from None
    family.check_inputs(inputs, meta)
    if not allow_nonfinite:
        for name, array in inputs.items():
            if np.issubdtype(array.dtype, np.floating):
                check_finite(name, array)
    sess = session.open_session(model_path, threads)
    outputs = session.run(sess, embed.cast_feeds(sess, inputs, model_path, family.name))
    with staged_file(out_path) as tmp:
        np.savez(tmp, **outputs)
    return list(outputs)


#: {subcommand: its argument naming the file or folder it is about} (`core.errors.subject`).
INPUT_ARGUMENT = {"verify": "package", "webgpu-check": "package", "npu-check": "model", "encode": "model"}


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m runtime", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    run = sub.add_parser("encode", help="run an exported vision encoder on one pack")
    run.add_argument("model", type=Path)
    run.add_argument("--inputs", type=Path, required=True)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (default: all cores)")
    run.add_argument("--force", action="store_true",
                     help="replace an existing OUT that another command of this tool wrote (never a file it did not)")
    add_clobber_argument(run)
    run.add_argument("--allow-nonfinite", action="store_true", help="run even if a float input holds NaN or Inf")
    verify.add_arguments(sub.add_parser("verify", help="check a release package (dist/NAME or dist/NAME.tar.gz): "
                                                     "checksums, manifest, every variant at the smoke sizes"))
    embed.add_arguments(sub.add_parser("embed", help="embeddings of image files (and one video of frames) from a "
                                                   "release package, one pack, written by image to an .npz"))
    collection.add_arguments(sub.add_parser("embed-collection", help="embeddings of a whole collection (a folder, a "
                                                                     "glob, a Parquet/CSV list) into a Parquet "
                                                                     "dataset, resumable, on Ray or locally"))
    npu.add_arguments(sub.add_parser("npu-check", help="a static model on Qualcomm's HTP (QNN EP, simulator on x86) "
                                                      "with CPU fallback disabled, against the CPU EP's fp32, and its "
                                                      "context binary (needs the npu extra; docs/npu.md)"))
    webgpu.add_arguments(sub.add_parser("webgpu-check", help="every variant of a release package on ONNX Runtime's "
                                                            "WebGPU EP at every validation layout, against the CPU "
                                                            "EP's fp32 (needs `make webgpu`)"))

    def body() -> int:
        args = parser.parse_args(argv)
        # the one input of these commands (embed's images and collection's list name themselves in their errors)
        subject(getattr(args, INPUT_ARGUMENT[args.command]) if args.command in INPUT_ARGUMENT else None)
        if args.command == "verify":
            return verify.run(args)
        if args.command == "embed":  # --engine qnn: the package's static buckets on the NPU
            return npu_embed.run(args) if args.engine == "qnn" else embed.run(args)
        if args.command == "embed-collection":
            return collection.run(args)
        if args.command == "npu-check":
            return npu.run(args)
        if args.command == "webgpu-check":
            return webgpu.run(args)
        if args.threads is not None and args.threads < 1:
            raise UsageError(f"--threads must be >= 1, got {args.threads}")
        names = encode(args.model, args.inputs, args.out, args.threads, args.force, args.allow_nonfinite)
        print(f"wrote {args.out}: {', '.join(names)}")
        return 0

    return main_wrapper(body)


if __name__ == "__main__":
    sys.exit(main())
