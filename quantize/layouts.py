"""The validation layouts every pass is checked at: the export stage's grids, or equivalent ones.

A layout is (name, grid_thw int64 [num_images, 3]). The export stage lists its layouts in
`report.json` under `validation.cases` (smoke sizes as the Qwen processor resizes them, a 2-image
pack, a t=2 video, a mixed pack, and layouts with the export example's patch count but other shapes).
Later stages copy that list into their own report, so it follows the model through the pipeline.
When no report in the chain has it, `default_layouts` recomputes an equivalent list (torch-free).
"""

import json
import math
from pathlib import Path

import numpy as np

SMOKE_SIZES = [(224, 224), (336, 336), (448, 448), (512, 384)]
MIN_PIXELS, MAX_PIXELS = 65536, 16777216
STAGE_FOLDERS = ("export", "surgery", "optimized")


def from_reports(model_file: Path) -> list[dict] | None:
    """The `validation.cases` grids of the model's own report, else of an earlier stage folder beside it."""
    folder = Path(model_file).parent
    candidates = [folder / "report.json"] + [folder.parent / name / "report.json" for name in STAGE_FOLDERS]
    for report in candidates:
        if report.exists():
            cases = json.loads(report.read_text()).get("validation", {}).get("cases") or []
            layouts = [{"case": c["case"], "grid_thw": c["grid_thw"]} for c in cases if "grid_thw" in c]
            if layouts:
                return layouts
    return None


def smart_resize(height: int, width: int, factor: int) -> tuple[int, int]:
    """The Qwen processor's resize: multiples of `factor`, pixel count within [MIN_PIXELS, MAX_PIXELS]."""
    h, w = round(height / factor) * factor, round(width / factor) * factor
    if h * w > MAX_PIXELS:
        beta = math.sqrt(height * width / MAX_PIXELS)
        h, w = (max(factor, math.floor(x / beta / factor) * factor) for x in (height, width))
    elif h * w < MIN_PIXELS:
        beta = math.sqrt(MIN_PIXELS / (height * width))
        h, w = (math.ceil(x * beta / factor) * factor for x in (height, width))
    return h, w


def default_layouts(example: list[list[int]], patch: int = 16, merge: int = 2) -> list[dict]:
    """Smoke sizes, a pack, a t=2 video, a mixed pack, the example and same-patch-count variants of it."""
    def image(h: int, w: int) -> list[int]:
        rh, rw = smart_resize(h, w, patch * merge)
        return [1, rh // patch, rw // patch]

    layouts = [{"case": f"image {h}x{w}", "grid_thw": [image(h, w)]} for h, w in SMOKE_SIZES]
    layouts += [
        {"case": "pack 448x448 + 336x336", "grid_thw": [image(448, 448), image(336, 336)]},
        {"case": "video t=2 256x256", "grid_thw": [[2, 16, 16]]},
        {"case": "pack image + video t=2 + image", "grid_thw": [[1, 12, 20], [2, 8, 8], [1, 6, 4]]},
        {"case": f"export example {example}", "grid_thw": example},
    ]
    blocks = sum(t * h * w for t, h, w in example) // (merge * merge)
    variants = [[[1, merge, merge * blocks]], [[1, merge * blocks, merge]], example[::-1],
                [[t, w, h] for t, h, w in example]]
    if blocks % 2 == 0:
        variants.append([[2, merge, merge * blocks // 2]])
    seen = {str(example)}
    for grid in variants:
        if str(grid) not in seen:
            seen.add(str(grid))
            layouts.append({"case": f"same patch count {grid}", "grid_thw": grid})
    return layouts


def layouts_for(model_file: Path, metadata: dict[str, str]) -> list[dict]:
    """The layouts to check a stage at: from the reports, else recomputed from the model's metadata."""
    found = from_reports(model_file)
    if found:
        return found
    example = json.loads(metadata.get("export_grid_thw", "[[1, 16, 16], [1, 12, 20]]"))
    merge = int(metadata.get("spatial_merge_size", 2))
    return default_layouts(example, merge=merge)


def random_inputs(grid_thw: list[list[int]], patch_dim: int, seed: int) -> dict[str, np.ndarray]:
    """Normal(0, 1) pixel_values [sum(t*h*w), patch_dim] and grid_thw int64 [num_images, 3]."""
    grid = np.asarray(grid_thw, dtype=np.int64)
    rng = np.random.default_rng(seed)
    pixels = rng.standard_normal((int(np.prod(grid, 1).sum()), patch_dim), dtype=np.float32)
    return {"pixel_values": pixels, "grid_thw": grid}
