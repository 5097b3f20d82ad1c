"""Torch-free timing helpers shared by the benchmarks: inputs for a size, interleaved medians, load."""

import json
import os
import random
import sys
import time
from pathlib import Path

import numpy as np

from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.families.qwen_vl.layouts import random_pixels, smart_resize

ROOT = Path(__file__).resolve().parents[1]
PATCH_DIM = 1536  # 3 channels x temporal patch 2 x 16 x 16 (Qwen3-VL, Qwen3.5; Qwen2-VL and Qwen2.5-VL: 1176)


def grid_for(height: int, width: int, patch: int = 16) -> list[list[int]]:
    """grid_thw [[1, h, w]] (patches) of one image of `height` x `width` as the Qwen processor resizes it."""
    h, w = smart_resize(height, width, 2 * patch)
    return [[1, h // patch, w // patch]]


def patch_of(patch_dim: int) -> int:
    """The patch side P of a Qwen pixel_values row of 3 * 2 * P * P values."""
    return round((patch_dim / 6) ** 0.5)


def pixels(grid: list[list[int]], seed: int = 0, patch_dim: int = PATCH_DIM) -> dict[str, np.ndarray]:
    """Random pixel_values [sum(t*h*w), patch_dim] and grid_thw int64 [num_images, 3] for `grid`, as an ORT feed."""
    values, g = random_pixels(grid, patch_dim, np.random.default_rng(seed))
    return {"pixel_values": values, "grid_thw": g}


#: The photo every benchmark times on (its pixels do not change the time; its layout is what a user's photo of
#: that size gets from the family's processor).
TIMING_PHOTO = "astronaut"


def photo_feed(model_file, size: tuple[int, int]) -> dict[str, np.ndarray]:
    """The ORT feed of TIMING_PHOTO resized to `size` (height, width) through the processor of the model at
    `model_file` (its family from the metadata): pixel_values plus the family's integer inputs."""
    from quantize import calibration

    return calibration.for_model(model_file, photos=(TIMING_PHOTO,), sizes=(size,), video=False)[0]


def interleaved(runners: dict, reps: int) -> dict[str, dict]:
    """Warm each runner once, then `reps` rounds over all runners, each round in an order of its own (shuffled,
    seeded: the same orders in every run); {label: {median_s, times_s}} (times in round order).

    Why shuffled: a runner can slow whatever runs right after it (PyTorch's OpenMP threads spin on after its run;
    seen on 2026-11-29 as a slower OpenVINO attention right after a PyTorch sdpa call than half a second later, by
    hand, not a bench of this repo), so no runner may always follow the same one (a fixed or merely rotated order
    keeps every runner's predecessor)."""
    for run in runners.values():
        run()
    order = random.Random(0)
    labels = list(runners)
    times = {label: [] for label in runners}
    for _ in range(reps):
        for label in order.sample(labels, len(labels)):
            start = time.perf_counter()
            runners[label]()
            times[label].append(time.perf_counter() - start)
    return {label: {"median_s": float(np.median(t)), "times_s": [round(x, 4) for x in t]} for label, t in times.items()}


def shown(path) -> str:
    """`path` relative to the checkout when inside it (results name no machine's folders)."""
    full = Path(path).resolve()
    return str(full.relative_to(ROOT) if full.is_relative_to(ROOT) else path)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def stage_model(build, model: str, stage: str = "optimized"):
    """BUILD/MODEL/STAGE/model.onnx; when `make export` has not made it: one error line, exit 2."""
    path = Path(build) / model / stage / "model.onnx"
    if not path.exists():
        print(f"error: {path} is missing: run `make export MODEL={model}` first", file=sys.stderr)
        raise SystemExit(2)
    return path


def write_results(out: Path, stem: str, result: dict, markdown: str, tag: str) -> None:
    """OUT/STEM.json (the result, with its load average at the end) and OUT/STEM.md, then one line saying so."""
    result["load_average_end"] = load_average()
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{stem}.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / f"{stem}.md").write_text(markdown)
    say(f"wrote {out / stem}.json and {out / stem}.md", tag)
