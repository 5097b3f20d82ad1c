"""The product runtime as users install it: the project's wheel (not editable) with its `runtime` extra in a fresh
venv that already holds another application's numpy 2.2.6 and pillow 11.3.0 (older than requirements.lock's, within
pyproject.toml's ranges, kept by pip). Without torch and transformers it verifies a package and embeds images
from it, through `python -m` and through the console command; `--model NAME` resolves from the
installed wheel (configs as package data).

Installing the wheel and its dependencies takes about 1 minute here (from the local package index), so the venv is
built once for the module. Marked `venv` (`pytest -m "not venv"` leaves it out); it runs in `make test`.
"""

import subprocess
from pathlib import Path

import pytest

from tools import runtime_venv

ROOT = Path(__file__).resolve().parent.parent
NAME = "qwen3-vl-tiny"
#: Another application's versions, in the runtime's ranges (pyproject.toml) and older than requirements.lock's.
BESIDE = ("numpy==2.2.6", "pillow==11.3.0")

pytestmark = pytest.mark.venv


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """The python of a fresh venv holding BESIDE, then the wheel with `[runtime]` (`tools.runtime_venv`)."""
    try:
        return runtime_venv.make(tmp_path_factory.mktemp("venv"), beside=BESIDE)
    except runtime_venv.NoIndex as err:
        pytest.skip(f"no package index reachable for the fresh venv: {err}")
    except RuntimeError as err:
        pytest.fail(str(err))


def run(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run `python ARGS` in the venv, outside the checkout (so only the installed packages are importable)."""
    return subprocess.run([str(python), *args], check=False, capture_output=True, text=True, cwd=cwd,
                          env=runtime_venv.environment())


def console(python: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Run the venv's console command `vlm-vision-onnx ARGS` outside the checkout."""
    return subprocess.run([str(python.parent / "vlm-vision-onnx"), *args], check=False, capture_output=True,
                          text=True, cwd=cwd, env=runtime_venv.environment())


def test_runtime_venv_has_no_torch_and_keeps_the_applications_versions(venv, tmp_path):
    done = run(venv, "-c", "import torch", cwd=tmp_path)
    assert done.returncode == 1 and "No module named 'torch'" in done.stderr
    listed = run(venv, "-m", "pip", "list", "--format=freeze", cwd=tmp_path).stdout.lower().splitlines()
    assert set(BESIDE) <= set(listed) and any(line.startswith("onnxruntime==") for line in listed)
    assert not [line for line in listed if line.startswith(("torch==", "torchvision==", "transformers=="))]
    assert any(line.startswith("vlm-vision-onnx==") for line in listed)  # the wheel, not an editable checkout
    done = run(venv, "-c", "import vlm_vision_onnx.runtime as r; print(r.__file__)", cwd=tmp_path)
    assert "site-packages" in done.stdout, done.stdout


def test_the_wheel_claims_no_generic_top_level_name(venv, tmp_path):
    """The wheel's import packages: the three stages the design names and the project's own name, nothing generic
    (`core`, `runtime`, `release`, `families` live under vlm_vision_onnx; the checkout's runtime/ and release/ shims
    are not shipped)."""
    check = ("from importlib import metadata; d = metadata.distribution('vlm-vision-onnx'); "
             "print(sorted({f.parts[0] for f in d.files if f.suffix == '.py'}))")
    done = run(venv, "-c", check, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['builders', 'quantize', 'surgery', 'vlm_vision_onnx']"
    for name in ("core", "runtime", "release", "families"):
        done = run(venv, "-c", f"import {name}", cwd=tmp_path)
        assert f"No module named '{name}'" in done.stderr, (name, done.stderr)


def test_model_names_resolve_from_the_wheel(venv, tmp_path):
    """`--model NAME` reads the configs the wheel ships (builders/configs, package data), not a checkout's."""
    check = ("from builders import config; c = config.load_config('qwen3-vl'); "
             "print(config.CONFIG_DIR.parent.parent.name, c.family, len(config.config_names()) > 5)")
    done = run(venv, "-c", check, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["site-packages", "qwen3-vl", "True"]


def test_the_console_command(venv, tmp_path):
    """`vlm-vision-onnx`: its commands are the `python -m` entries; `export` without torch is one line."""
    done = console(venv, "--help", cwd=tmp_path)
    assert done.returncode == 0 and "runtime" in done.stdout and "python -m builders.vision" in done.stdout
    done = console(venv, "runtime", "verify", "--help", cwd=tmp_path)
    assert done.returncode == 0 and "usage:" in done.stdout
    done = console(venv, "export", "--model", "qwen3-vl-tiny", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("error:") and len(done.stderr.splitlines()) == 1
    assert "torch" in done.stderr


def test_verify_and_embed_without_torch_or_transformers(venv, qwen_dist, tmp_path):
    """In the venv: verify the tiny package's tarball (made in the project's .venv: packaging writes the processor
    config through transformers, the release extra) and embed two images from it."""
    from PIL import Image

    archive = qwen_dist / f"{NAME}.tar.gz"
    done = console(venv, "runtime", "verify", str(archive), "--threads", "1", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"ok: {NAME}:")

    Image.new("RGB", (300, 200), (200, 30, 40)).save(tmp_path / "red.png")
    Image.new("L", (97, 301), 128).save(tmp_path / "gray.png")
    out = tmp_path / "embeddings.npz"
    done = run(venv, "-m", "vlm_vision_onnx.runtime", "embed", str(tmp_path / "red.png"), str(tmp_path / "gray.png"),
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
    from vlm_vision_onnx.families.qwen_vl.layouts import smart_resize

    for line, (w, h) in zip(lines[1:3], [(300, 200), (97, 301)]):
        rh, rw = smart_resize(h, w, 32)
        grid = [1, rh // 16, rw // 16]
        assert line == f"{grid} ({grid[1] * grid[2] // 4}, 96) True"


def test_runtime_start_imports_no_heavy_module(venv, tmp_path):
    """What `runtime embed` and `verify` import before any work (the CLI and the families' preprocessing) holds no
    torch, onnx_ir or sympy: each costs a user's process 1-3 s of start on 2 cores (core.onnx_io imports onnx_ir
    on first use)."""
    check = ("import sys, vlm_vision_onnx.runtime.__main__, vlm_vision_onnx.families.qwen_vl.preprocess, "
             "vlm_vision_onnx.families.phi4_mm.preprocess; "
             "print(sorted(m for m in ('torch', 'onnx_ir', 'sympy', 'onnxscript') if m in sys.modules))")
    done = run(venv, "-c", check, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
