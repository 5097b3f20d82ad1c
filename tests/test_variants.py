"""The table of variants (release/variants.py) against what reads it: the Makefile's export step runs each variant's
stage as the table says (its command, from the optimized stage, its flags variable or `--shipped`, its switch), and
`release.stages` names the package files from it."""

import shutil
import subprocess
from pathlib import Path

import pytest

from vlm_vision_onnx.release import stages
from vlm_vision_onnx.release.variants import ALWAYS, BY_STAGE, QUANTIZED, VARIANTS, package_path

ROOT = Path(__file__).resolve().parents[1]
NEEDS_MAKE = pytest.mark.skipif(shutil.which("make") is None, reason="needs make to read the Makefile")


def _dry_run(*assignments: str) -> list[str]:
    """The commands `make export MODEL=qwen3-vl-tiny ASSIGNMENTS` would run (nothing is run or installed)."""
    done = subprocess.run(["make", "-n", "-o", ".venv/.installed", "-o", ".webgpu/.installed", "export",
                           "MODEL=qwen3-vl-tiny", *assignments], cwd=ROOT, capture_output=True, text=True, check=True)
    return done.stdout.splitlines()


def _stage_line(lines: list[str], kind) -> str | None:
    build = "build/qwen3-vl-tiny"
    wanted = f"-m quantize {kind.command} {build}/{'surgery' if kind.name == 'fp32' else 'optimized'} " \
             f"{build}/{kind.stage}"
    return next((line for line in lines if wanted in line), None)


@NEEDS_MAKE
def test_make_export_runs_every_variant_as_the_table_says():
    """Without its switch a variant is built always (no switch), never (FP16), or where the family ships it
    (`by_family`: ov-int8, `--if-shipped`); SWITCH=1 builds it for every family, SWITCH=0 never."""
    switches = sorted({v.switch for v in VARIANTS.values() if v.switch})
    plain, switched = _dry_run(), _dry_run(*(f"{s}=1" for s in switches))
    off = _dry_run(*(f"{s}=0" for s in switches))
    for kind in VARIANTS.values():
        line = _stage_line(switched, kind)
        assert line is not None, f"make export {' '.join(switches)}=1 does not run the {kind.name} stage as the table says"
        default = _stage_line(plain, kind)
        if kind.by_family:
            assert default is not None and default.endswith(" --if-shipped"), default
        else:
            assert (default is None) == bool(kind.switch), f"{kind.name}: switch {kind.switch!r}"
        if kind.switch:
            assert _stage_line(off, kind) is None, f"{kind.name}: {kind.switch}=0 still builds it"
        if kind.flags:
            assert line.endswith(" --shipped"), f"{kind.name}: the family's flags by default: {line}"


@NEEDS_MAKE
def test_a_flags_variable_replaces_the_shipped_flags():
    with_flags = [v for v in VARIANTS.values() if v.flags]
    lines = _dry_run(*(f"{v.switch}=1" for v in with_flags if v.switch),
                     *(f"{v.flags}=--threads 1" for v in with_flags))
    for kind in with_flags:
        assert _stage_line(lines, kind).endswith(f"{kind.stage} --threads 1"), kind.flags


def test_package_files_come_from_the_table():
    assert [package_path(s) for s in ALWAYS] == ["onnx/vision_encoder.onnx", "onnx/vision_encoder_int8.onnx",
                                                 "onnx/vision_encoder_q4.onnx"]
    assert QUANTIZED == ("int8", "int4")
    assert package_path("ov-int8") == "openvino/vision_encoder_int8.xml"
    assert stages.STAGES == ("export", "surgery", *BY_STAGE)
    names = {v.name for v in VARIANTS.values()}
    assert len(names) == len(VARIANTS) and len({package_path(s) for s in BY_STAGE}) == len(BY_STAGE)
