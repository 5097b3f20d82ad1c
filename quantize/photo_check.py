"""A quantized model against its fp32 input on held-out real photos: the accuracy `--engine auto` reads.

Why: the stages' validation layouts feed random pixels. On Qwen3-VL-2B the shipped INT8 held min per-token cosine
0.99822 there and 0.9979 on a real photo (bench/results/cpu-race.md): photos are what users embed, so a variant's
accuracy for the default path (runtime/path_choice.py) is the lower of the two.

The photos: HELD_OUT (skimage.data photos that no stage calibrates on, `quantize.calibration.STAGE_PHOTOS`) at
SIZES (height, width), through the family's processor as `runtime embed` runs them (`quantize.calibration`).
Each case is one photo: pixel_values [patches, patch dim] and grid_thw [1, 3] (Qwen) or the family's inputs.

The fp32 reference: the optimize stage runs its saved model on the photos and keeps the outputs beside it
(`keep`, `core.stage_outputs.PHOTOS_FILE`, fingerprinted like its outputs.npz); every quantize stage reading that
folder takes them (`measure`) instead of running the fp32 model again, else runs it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from quantize import calibration
from vlm_vision_onnx.core import onnx_io, stage_outputs
from vlm_vision_onnx.core import parity as metrics
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.core.session import open_session

HELD_OUT: tuple[str, ...] = tuple(p for p in calibration.PHOTOS if p not in calibration.STAGE_PHOTOS)[:2]
#: (height, width): the size documents and chats send most, and a large non-square one.
SIZES: tuple[tuple[int, int], ...] = ((448, 448), (768, 1024))


def named_feeds(model_file: Path) -> list[tuple[str, dict]]:
    """[(case name, feeds)] of HELD_OUT at SIZES for the model at `model_file` (its release processor)."""
    metadata = onnx_io.metadata(model_file)
    with tempfile.TemporaryDirectory(prefix="vision-onnx-photos-") as tmp:
        folder = calibration.processor_folder(calibration.export_report(model_file), metadata, tmp)
        return calibration.named_items(metadata, folder, sizes=SIZES, photos=HELD_OUT, video=False)


def measure(fp32_file: Path, quantized_file: Path, threads: int, open_quantized=None) -> dict:
    """{photos, sizes, min_token_cosine, min_cosine, max_abs, cases} of `quantized_file` against `fp32_file` (ONNX
    Runtime) on the held-out photos; {skipped: why} when the photos cannot be made for the model (no export report
    in its stages' input links, scikit-image missing): the default path then leaves the variant alone.
    `open_quantized(path) -> session` opens the quantized file (default: ONNX Runtime's CPU EP at `threads`; the
    OpenVINO INT8 stage gives OpenVINO's)."""
    try:
        named = named_feeds(fp32_file)
    except UsageError as err:
        return {"skipped": str(err)}
    layouts = [{"case": name} for name, _ in named]
    inputs = [feeds for _, feeds in named]
    reference = stage_outputs.read(fp32_file, inputs, stage_outputs.PHOTOS_FILE)
    if reference is None:
        reference = metrics.run_all(open_session(fp32_file, threads), inputs)
    else:
        say(f"fp32 outputs on the held-out photos: those IN's stage kept ({stage_outputs.PHOTOS_FILE})")
    session = open_quantized(quantized_file) if open_quantized else open_session(quantized_file, threads)
    cases = metrics.check(session, layouts, inputs, reference, tolerance=None)
    return {"photos": list(HELD_OUT), "sizes": [list(s) for s in SIZES], **metrics.worst(cases), "cases": cases}


def keep(folder: Path, model_file: Path, session, source_file: Path) -> None:
    """Run `session` (the saved model at `model_file`) on the held-out photos of `source_file`'s model (same family,
    metadata and export as `model_file`'s: the optimize stage's input) and keep the outputs in `folder`
    (`core.stage_outputs.PHOTOS_FILE`) for the quantize stages' `measure`; nothing is kept when the photos cannot be
    made for the model (where `measure` skips them too)."""
    try:
        named = named_feeds(source_file)
    except UsageError:
        return
    inputs = [feeds for _, feeds in named]
    stage_outputs.write(folder, model_file, inputs, metrics.run_all(session, inputs), stage_outputs.PHOTOS_FILE)
