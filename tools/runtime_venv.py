"""A fresh venv holding the project's wheel with its `runtime` extra and nothing else (no torch, no transformers):
the product runtime as users get it. `tests/test_runtime_venv.py` checks the package in it (beside another
application's numpy and pillow); `bench.cpu_race` times `runtime embed` in it.

About 45-90 s from the local package index. pip byte-compiles at install, as it does for users: where
PYTHONDONTWRITEBYTECODE is set (this project's sandboxes and CI set it) nothing is cached at the first import,
and a venv installed with `--no-compile` compiles numpy's (and then transformers') sources again in every process,
2-3 s of each `runtime embed` (cProfile of one, by hand: Intel Xeon with AMX, 2 cores, 2026-11-28, 813 modules,
2.1 s in `compile`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: pip output that means no package index is reachable (not a fault of the project).
OFFLINE = ("Could not find a version that satisfies", "NewConnectionError", "Temporary failure in name resolution",
           "No matching distribution found")


class NoIndex(RuntimeError):
    """No package index reachable: the venv cannot be made here (the message is pip's last line)."""


def project_source(dest: Path) -> Path:
    """A copy of what `pip install .` reads (pyproject.toml, README.md, the packages it lists) in `dest`, so the
    build never writes into the checkout (setuptools' build/ would land in the stage folders' build/)."""
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = [p.rstrip("*") for p in meta["tool"]["setuptools"]["packages"]["find"]["include"]]
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, dest / name)
    for name in packages:
        shutil.copytree(ROOT / name, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
    return dest


def make(root: Path, beside: tuple[str, ...] = ()) -> Path:
    """The python of a new venv in `root`/venv with the project's wheel installed with its `runtime` extra, as a
    user installs it (`pip install 'vlm-vision-onnx[runtime]'`: not editable, nothing of the checkout importable).
    The wheel is built from a copy of the sources in `root`/src; `beside`: requirements installed first (another
    application's numpy or pillow), which pip keeps when they are within the runtime's ranges. NoIndex when pip
    reaches no package index; RuntimeError with pip's output on other failures."""
    (root / "src").mkdir(parents=True)
    source = project_source(root / "src")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True)
    python = root / "venv" / "bin" / "python"
    start = time.perf_counter()
    steps = [["wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(root / "wheel"), str(source)],
             *([["install", "-q", *beside]] if beside else [])]
    for step in steps:  # the wheel is built by this venv's setuptools (no isolated build env to download)
        done = subprocess.run([sys.executable if step[0] == "wheel" else str(python), "-m", "pip", *step],
                              check=False, capture_output=True, text=True, cwd=root)  # build files stay in root
        _check(done, " ".join(step[:1] + step[-1:]))
    wheel = next((root / "wheel").glob("*.whl"))
    done = subprocess.run([str(python), "-m", "pip", "install", "-q", f"{wheel}[runtime]"],
                          check=False, capture_output=True, text=True, cwd=root)
    _check(done, f"install {wheel.name}[runtime]")
    print(f"[runtime-venv] the wheel with [runtime] into a fresh venv{' beside ' + ' '.join(beside) if beside else ''}: "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
    return python


def _check(done: subprocess.CompletedProcess, what: str) -> None:
    if done.returncode != 0:
        if any(marker in done.stderr for marker in OFFLINE):
            raise NoIndex(done.stderr.strip().splitlines()[-1])
        raise RuntimeError(f"pip {what} failed:\n{done.stderr[-3000:]}")


def environment() -> dict[str, str]:
    """This process's environment without what would point the venv's python at the checkout or this venv."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
