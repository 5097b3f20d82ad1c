"""`python -m runtime encode MODEL.onnx --inputs IN.npz --out OUT.npz`: run an exported encoder, no torch.

IN.npz holds `pixel_values` float32 [num_patches, 1536] and `grid_thw` int64 [num_images, 3]; they are
checked against the I/O contract (merge size and row length from the model's metadata) before running.
OUT.npz gets every output by name. Exit 2 on bad input.
"""

import argparse
import os
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx

from runtime import contract, session
from core.errors import UsageError


def metadata(path: Path) -> dict[str, str]:
    """The model's metadata_props, read without loading external weights."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 -- any parse failure means the same to the user
        raise UsageError(f"{path} is not an ONNX model") from None
    return {p.key: p.value for p in model.metadata_props}


def encode(model_path: Path, inputs_path: Path, out_path: Path, threads: int | None) -> list[str]:
    """Check the inputs, run the model, write OUT.npz atomically; returns the output names."""
    if not model_path.is_file():
        raise UsageError(f"model {model_path} does not exist")
    meta = metadata(model_path)
    try:
        data = np.load(inputs_path)
        pixel_values, grid_thw = data["pixel_values"], data["grid_thw"]
    except (OSError, ValueError, KeyError) as err:
        raise UsageError(f"{inputs_path}: need an .npz with pixel_values and grid_thw ({err})") from None
    grid = contract.check_inputs(pixel_values, grid_thw, int(meta.get("spatial_merge_size", 2)),
                                 int(meta.get("patch_dim", 1536)))
    sess = session.open_session(model_path, threads)
    outputs = session.run(sess, {"pixel_values": pixel_values.astype(np.float32), "grid_thw": grid})
    names = [o.name for o in sess.get_outputs()]
    fd, tmp = tempfile.mkstemp(suffix=".npz", dir=out_path.parent)
    os.close(fd)
    np.savez(tmp, **dict(zip(names, outputs)))
    os.replace(tmp, out_path)
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m runtime", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("encode", help="run an exported vision encoder on one pack")
    run.add_argument("model", type=Path)
    run.add_argument("--inputs", type=Path, required=True)
    run.add_argument("--out", type=Path, required=True)
    run.add_argument("--threads", type=int)
    args = parser.parse_args(argv)
    try:
        names = encode(args.model, args.inputs, args.out, args.threads)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}: {', '.join(names)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
