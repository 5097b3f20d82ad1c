"""`runtime verify`'s checks of a package's OpenVINO IR variants (`openvino/vision_encoder_int8.xml` + `.bin`: the
ov-int8 stage, `quantize/ov_int8.py`), which only OpenVINO runs. Without the openvino package they are checked by
their checksums only (steps 1-3 of runtime/verify.py), and verify says so.

- `check_model`: the IR's metadata (kept in its rt_info: family, model) and its inputs' and outputs' names and
  dtypes against the manifest;
- `run_variants`: each IR at the smoke sizes in OpenVINO, at the precision `--engine openvino` runs by default
  here: output shapes as the manifest records them, finite values, and the min per-token cosine against ONNX
  Runtime's fp32 outputs at least the variant's own floor (its stage's `--min-cosine`, in the manifest).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vlm_vision_onnx.core import openvino_session
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.parity import min_token_cosine
from vlm_vision_onnx.families.base import FEATURES

#: The floor when a variant's manifest record names none: the INT8 variant's.
DEFAULT_FLOOR = 0.998


def _fail(file: str, reason: str):
    from vlm_vision_onnx.runtime.package_records import fail

    fail(file, reason)


def check_model(manifest: dict, variant: dict, folder: Path) -> dict[str, str]:
    """One IR variant against the manifest; returns its metadata ({} when OpenVINO is not installed)."""
    file = variant["file"]
    if not openvino_session.available():
        return {}
    try:
        model = openvino_session._openvino().Core().read_model(str(folder / file))
    except RuntimeError as err:
        _fail(file, f"does not load as an OpenVINO IR ({' '.join(str(err).split())[:200]})")
    meta = openvino_session.metadata(model)
    for key in ("family", "model"):
        if meta.get(key) != manifest[key]:
            _fail(file, f"the model's metadata says {key} {meta.get(key)!r}, manifest.json says {manifest[key]!r}: "
                        "the package mixes models (or the manifest was edited)")
    for what, ports in (("inputs", model.inputs), ("outputs", model.outputs)):
        actual = [{"name": p.get_any_name(), "dtype": np.dtype(p.get_element_type().to_dtype()).name} for p in ports]
        expected = [{"name": r["name"], "dtype": r["dtype"]} for r in manifest[what]]
        if actual != expected:
            _fail(file, f"{what} {actual} differ from manifest.json's {expected}")
    if model.outputs[0].get_any_name() != FEATURES:
        _fail(file, f"its first output is not {FEATURES!r}")
    return meta


def run_variants(manifest: dict, folder: Path, threads: int | None, cases: list) -> list[str]:
    """Every IR variant at the smoke `cases` [(size, feeds, ONNX Runtime fp32 outputs {name: array})]; one line
    per variant of what was checked."""
    from vlm_vision_onnx.core.engine import default_precision

    recorded = {case.get("size"): case for case in manifest["smoke"]}
    lines = []
    for variant in manifest["variants"]:
        file = variant["file"]
        if not openvino_session.is_ir(file):
            continue
        floor = float((variant.get("quantization") or {}).get("min_cosine") or DEFAULT_FLOOR)
        precision = default_precision()
        try:
            session = openvino_session.OpenVINOSession(folder / file, threads, precision)
        except UsageError as err:
            _fail(file, str(err))
        worst = 1.0
        names = [o.name for o in session.get_outputs()]
        for size, feeds, expected in cases:
            got = dict(zip(names, session.run(None, feeds)))
            shapes = {k: list(v.shape) for k, v in got.items()}
            if shapes != recorded[size].get("outputs", {}):
                _fail(file, f"at {size} gives output shapes {shapes}, manifest.json records "
                            f"{recorded[size].get('outputs')}")
            for name, value in got.items():
                if not np.isfinite(value).all():
                    _fail(file, f"at {size} output {name} holds non-finite values")
                cosine = min_token_cosine(value, expected[name])
                if cosine < floor:
                    _fail(file, f"OpenVINO {precision} at {size}: {name} min per-token cosine {cosine:.5f} against "
                                f"ONNX Runtime fp32 < its floor {floor}")
                worst = min(worst, cosine)
        lines.append(f"{file}: OpenVINO {precision} at {', '.join(s for s, _, _ in cases)}: min per-token cosine "
                     f"{worst:.5f} against fp32 (floor {floor})")
    return lines
