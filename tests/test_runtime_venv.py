"""The product runtime alone: a fresh venv with `pip install .[runtime]` only (no torch) packages a build,
verifies the package and embeds images from it.

Installing onnxruntime, onnx, transformers and their dependencies takes about 1 minute here (from the
local package index, without byte-compiling: 46 s while other jobs loaded both cores), so the venv is built once
for the module. Marked `venv` (`pytest -m "not venv"` leaves it out); it runs in `make test`.
"""

import shutil
import subprocess
from pathlib import Path

import pytest

from release.package import package
from tools import runtime_venv

ROOT = Path(__file__).resolve().parent.parent
NAME = "qwen3-vl-tiny"

pytestmark = pytest.mark.venv


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """The python of a fresh venv holding `.[runtime]` only (`tools.runtime_venv`)."""
    try:
        return runtime_venv.make(tmp_path_factory.mktemp("venv"))
    except runtime_venv.NoIndex as err:
        pytest.skip(f"no package index reachable for the fresh venv: {err}")
    except RuntimeError as err:
        pytest.fail(str(err))


def run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run `python ARGS` in the venv, outside the checkout (so only the installed packages are importable)."""
    return subprocess.run([str(python), *args], check=False, capture_output=True, text=True, cwd=cwd,
                          env=runtime_venv.environment())


def test_runtime_venv_has_no_torch(venv, tmp_path):
    done = run(venv, "-c", "import torch", cwd=tmp_path)
    assert done.returncode == 1 and "No module named 'torch'" in done.stderr
    listed = run(venv, "-m", "pip", "list", "--format=freeze", cwd=tmp_path).stdout.lower()
    assert "transformers==5.23.0" in listed and "onnxruntime==" in listed
    assert not [line for line in listed.splitlines() if line.startswith(("torch==", "torchvision=="))]


def test_package_verify_and_embed_without_torch(venv, tiny_exports, tmp_path):
    """In the torch-free venv: package the tiny export (the same bytes as packaging here, where torch is
    installed), verify the tarball, embed two images from it."""
    from PIL import Image

    build = tmp_path / "build" / NAME
    shutil.copytree(tiny_exports["torchscript"], build / "export")
    done = run(venv, "-m", "release", "package", str(build), "--dist", str(tmp_path / "dist"), "--threads", "1",
               cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    archive = tmp_path / "dist" / f"{NAME}.tar.gz"
    _, here = package(build, tmp_path / "dist-here", threads=1)
    assert archive.read_bytes() == here.read_bytes()

    done = run(venv, "-m", "runtime", "verify", str(archive), "--threads", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"ok: {NAME}:")

    Image.new("RGB", (300, 200), (200, 30, 40)).save(tmp_path / "red.png")
    Image.new("L", (97, 301), 128).save(tmp_path / "gray.png")
    out = tmp_path / "embeddings.npz"
    done = run(venv, "-m", "runtime", "embed", str(tmp_path / "red.png"), str(tmp_path / "gray.png"),
               "--package", str(archive), "--out", str(out), "--threads", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    check = ("import numpy as np, sys; d = np.load(sys.argv[1]); "
             "print([str(e) for e in d['entries']]); "
             "[print(d[e + '.grid_thw'].tolist(), d[e + '.image_features'].shape, "
             "bool(np.isfinite(d[e + '.image_features']).all())) for e in d['entries']]; "
             "print('torch' in sys.modules)")
    done = run(venv, "-c", check, str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "['image_0', 'image_1']" and lines[-1] == "False"
    # each image's tokens follow the processor's grid (both sizes are scaled up to its minimum pixel count)
    from families.qwen_vl.layouts import smart_resize

    for line, (w, h) in zip(lines[1:3], [(300, 200), (97, 301)]):
        rh, rw = smart_resize(h, w, 32)
        grid = [1, rh // 16, rw // 16]
        assert line == f"{grid} ({grid[1] * grid[2] // 4}, 96) True"


def test_runtime_start_imports_no_heavy_module(venv, tmp_path):
    """What `runtime embed` and `verify` import before any work (the CLI and the families' preprocessing) holds no
    torch, onnx_ir or sympy: each costs a user's process 1-3 s of start on 2 cores (core.onnx_io imports onnx_ir
    on first use)."""
    check = ("import sys, runtime.__main__, families.qwen_vl.preprocess, families.phi4_mm.preprocess; "
             "print(sorted(m for m in ('torch', 'onnx_ir', 'sympy', 'onnxscript') if m in sys.modules))")
    done = run(venv, "-c", check, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
