"""The validation layouts a stage (surgery, optimize, int8, int4) is checked at: those its input's own report lists, else the family's.

A layout is {"case": name, **facts}: the facts are the family's `layout_keys` (Qwen3-VL: grid_thw;
Phi-4-multimodal: each image's crop grid and valid patches), from which `Family.layout_inputs` rebuilds
inputs with random pixels. Every stage records its layouts per case in its own report, so they follow
the model through the pipeline; a stage reads only the report beside its input (never a sibling's).
A model without such a report is checked at the family's `default_layouts` (the export's suite,
recomputed from the ONNX metadata).
"""

from pathlib import Path

import numpy as np

from vlm_vision_onnx.core import report as reports
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families import Family, Metadata

SEED = 0


def from_report(model_file: Path, family: Family) -> list[dict]:
    """The layouts of `validation.cases` in the report beside the model ([] when it lists none)."""
    report = reports.read_beside(model_file)
    validation = report.get("validation")
    cases = (validation.get("cases") if isinstance(validation, dict) else None) or []
    if not isinstance(cases, list) or not all(isinstance(c, dict) and "case" in c for c in cases):
        raise UsageError(f"{Path(model_file).parent / 'report.json'}: validation.cases is not a list of "
                         "cases; fix or remove the report")
    layouts = [{"case": c["case"], **{k: c[k] for k in family.layout_keys}} for c in cases
               if all(k in c for k in family.layout_keys)]
    for layout in layouts:
        for key in family.layout_keys:
            rows = layout[key]
            if not (isinstance(rows, list) and rows and all(isinstance(r, list) for r in rows)
                    and _small_ints(rows)) or _volume(rows) > MAX_LAYOUT_VOLUME:
                raise UsageError(f"{Path(model_file).parent / 'report.json'}: validation case {layout['case']!r} "
                                 f"has {key} {str(rows)[:80]}, not rows of integers in 1..{MAX_LAYOUT_INT} "
                                 f"whose rows multiply to at most {MAX_LAYOUT_VOLUME} in all; fix or remove the report")
    return layouts


#: The largest number a layout in a report holds (a grid's patches per side, a crop count), and the most its rows
#: may multiply to in all (Qwen: patches; a 4096x4096 image, the processors' largest, is 65536).
MAX_LAYOUT_INT = 16384
MAX_LAYOUT_VOLUME = 2**18


def _volume(value) -> int:
    """The sum over the innermost lists of their products."""
    if value and all(isinstance(v, list) for v in value):
        return sum(_volume(v) for v in value)
    product = 1
    for v in value:
        product *= v
    return product


def _small_ints(value) -> bool:
    """Whether `value` is a non-empty list of integers in 1..MAX_LAYOUT_INT, or a list of such lists of one length
    and depth (found by tools/fuzz: a report's negative or 10^12 grid reached numpy as an allocation, a row replaced
    by a number as an AxisError, a zero width ONNX Runtime's Reshape as a traceback; no stage writes a 0: 1589
    validation cases of the test builds checked)."""
    if not isinstance(value, list) or not value:
        return False
    if all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        return all(1 <= v <= MAX_LAYOUT_INT for v in value)
    return (all(isinstance(v, list) and _small_ints(v) for v in value)
            and len({_shape(v) for v in value}) == 1)


def _shape(value) -> tuple:
    return (len(value), *(_shape(value[0]) if isinstance(value[0], list) else ()))


def layouts_for(model_file: Path, metadata: Metadata, family: Family) -> list[dict]:
    """The layouts to check a stage at: from the input's report, else the family's defaults."""
    return from_report(model_file, family) or [{"case": name, **layout}
                                               for name, layout in family.default_layouts(metadata)]


def layout_inputs(family: Family, layouts: list[dict], metadata: Metadata) -> list[dict[str, np.ndarray]]:
    """Deterministic random inputs for every layout (seed SEED + index)."""
    return [family.layout_inputs(lay, metadata, np.random.default_rng(SEED + i)) for i, lay in enumerate(layouts)]


#: Case names of the layouts where a traced graph lies (same token count, another shape; padding).
HIDDEN_WORDS = ("same", "padded")


def quick_indices(layouts: list[dict], inputs: list[dict[str, np.ndarray]]) -> list[int]:
    """A few layouts that still catch what a graph rewrite breaks: the first layout, the first of each
    HIDDEN_WORDS kind, the export example when present, and the largest (most input elements).

    For the checks after each pass of a stage; the stage's saved model is then checked at every layout."""
    picked = [0]
    for word in HIDDEN_WORDS:
        picked += [next((i for i, lay in enumerate(layouts) if lay["case"].startswith(word)), 0)]
    picked += [i for i, lay in enumerate(layouts) if lay["case"].startswith("export example")][:1]
    picked.append(max(range(len(inputs)), key=lambda i: sum(a.size for a in inputs[i].values())))
    return sorted(set(picked))
