"""The validation layouts every pass is checked at: the export stage's grids, or equivalent ones.

A layout is (name, grid_thw int64 [num_images, 3]). The export stage lists its layouts in
`report.json` under `validation.cases` (smoke sizes as the Qwen processor resizes them, a 2-image
pack, a t=2 video, a mixed pack, and layouts with the export example's patch count but other shapes).
Later stages copy that list into their own report, so it follows the model through the pipeline.
When no report in the chain has it, `default_layouts` recomputes an equivalent list (torch-free).
"""

import json
from pathlib import Path

import numpy as np

from core import report as reports
from core.errors import UsageError
from runtime.layouts import (
    SMOKE_SIZES,
    SYNTHETIC_PACKS,
    random_pixels,
    same_patch_count_layouts,
    smart_resize,
)

STAGE_FOLDERS = ("export", "surgery", "optimized")


def from_reports(model_file: Path) -> list[dict] | None:
    """The `validation.cases` grids of the model's own report, else of an earlier stage folder beside it."""
    folder = Path(model_file).parent
    candidates = [folder / "report.json"] + [folder.parent / name / "report.json" for name in STAGE_FOLDERS]
    for report in candidates:
        if report.exists():
            validation = reports.read_beside(report).get("validation")
            cases = (validation.get("cases") if isinstance(validation, dict) else None) or []
            if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
                raise UsageError(f"{report}: validation.cases is not a list of cases; fix or remove the report")
            layouts = [{"case": c["case"], "grid_thw": c["grid_thw"]} for c in cases if "grid_thw" in c]
            if layouts:
                return layouts
    return None


def default_layouts(example: list[list[int]], patch: int = 16, merge: int = 2) -> list[dict]:
    """Smoke sizes, a pack, a t=2 video, a mixed pack, the example and same-patch-count variants of it."""
    def image(h: int, w: int) -> list[int]:
        rh, rw = smart_resize(h, w, patch * merge)
        return [1, rh // patch, rw // patch]

    layouts = [{"case": f"image {h}x{w}", "grid_thw": [image(h, w)]} for h, w in SMOKE_SIZES]
    layouts.append({"case": "pack 448x448 + 336x336", "grid_thw": [image(448, 448), image(336, 336)]})
    layouts += [{"case": name, "grid_thw": grid} for name, grid in SYNTHETIC_PACKS]
    layouts.append({"case": "export example", "grid_thw": example})
    layouts += [{"case": f"same patch count #{number}", "grid_thw": grid}
                for number, grid in enumerate(same_patch_count_layouts(example, merge), 1)]
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
    pixels, grid = random_pixels(grid_thw, patch_dim, np.random.default_rng(seed))
    return {"pixel_values": pixels, "grid_thw": grid}
