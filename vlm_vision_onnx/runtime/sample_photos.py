"""`python -m runtime.sample_photos DIR`: real photographs to try `embed` on, from scikit-image's
`skimage.data` (the photos ship inside the scikit-image wheel of the dev extra: nothing is downloaded).

Writes DIR/NAME.png for each photo in `PHOTOS` (RGB and one grayscale, 300 to 640 pixels a side) and
DIR/pan/frame_K.png: `FRAMES` crops of 360 x 480 panning 40 pixels right per frame across `rocket`,
a short video (t = FRAMES / 2). DIR gets a report.json naming what it holds.
"""

import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

from vlm_vision_onnx.core.errors import Parser, UsageError, main_wrapper
from vlm_vision_onnx.core.staging import add_clobber_argument, staged_folder

PHOTOS = ["astronaut", "coffee", "chelsea", "camera", "rocket"]
FRAMES, STEP, FRAME_SIZE = 4, 40, (360, 480)  # frames, pixels panned per frame, (height, width)
STAGE = "sample-photos"


def pan(photo: np.ndarray) -> list[np.ndarray]:
    """FRAMES crops [FRAME_SIZE..., 3] of `photo`, each STEP pixels right of the previous."""
    height, width = FRAME_SIZE
    return [photo[:height, k * STEP: k * STEP + width] for k in range(FRAMES)]


def write(out: Path, force: bool = False) -> list[Path]:
    try:
        import skimage
        import skimage.data
    except ImportError:
        raise UsageError("scikit-image is not installed: pip install '.[dev]' (it ships the sample photos)") from None
    written = []
    with staged_folder(out, STAGE, force=force) as tmp:
        for name in PHOTOS:
            Image.fromarray(getattr(skimage.data, name)()).save(tmp / f"{name}.png")
            written.append(out / f"{name}.png")
        (tmp / "pan").mkdir()
        for k, frame in enumerate(pan(skimage.data.rocket())):
            Image.fromarray(np.ascontiguousarray(frame)).save(tmp / "pan" / f"frame_{k}.png")
            written.append(out / "pan" / f"frame_{k}.png")
        report = {"stage": STAGE, "source": f"skimage.data (scikit-image {skimage.__version__})",
                  "photos": PHOTOS, "video": {"photo": "rocket", "frames": FRAMES, "step": STEP,
                                               "frame_size": list(FRAME_SIZE)}}
        (tmp / "report.json").write_text(json.dumps(report, indent=2) + "\n")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m runtime.sample_photos", description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder to write the photos into")
    parser.add_argument("--force", action="store_true", help="replace an output of another command of this tool")
    add_clobber_argument(parser)

    def body() -> int:
        args = parser.parse_args(argv)
        files = write(args.out, args.force)
        print(f"wrote {len(files)} files to {args.out}/ ({', '.join(PHOTOS)}; pan/ holds {FRAMES} frames)")
        return 0

    return main_wrapper(body)


if __name__ == "__main__":
    sys.exit(main())
