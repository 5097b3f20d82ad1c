"""The seeds a fuzz run mutates, gathered into one folder (read-only to the cases: each case mutates a copy):

    models/NAME.onnx        the real detectors (../shared/fixtures/real) and the tiny exports' model.onnx
    stages/NAME/            tiny export folders (model.onnx, report.json)
    packages/NAME/, NAME.tar.gz   tiny release packages
    photos/*.png|jpg        real photographs (skimage.data), small
    videos/pan/             a short video as frames (runtime.sample_photos)
    configs/NAME.yaml       the tiny model configs (builders/configs)
    checkpoints/NAME/       a checkpoint folder holding a package's config.json (and no weights)

`make(dest)` exports the tiny Qwen3-VL and Phi-4-multimodal configs and packages them (about a minute);
`gather(dest, stages, packages)` takes folders made elsewhere (the tests pass their cached builds).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: The real detectors others exported (absent: the run goes on without them and says so).
REAL = ROOT.parent / "shared" / "fixtures" / "real"
TINY = ("qwen3-vl-tiny", "phi-4-mm-tiny")


def gather(dest: Path, stages: dict[str, Path], packages: dict[str, Path]) -> Path:
    """`dest` filled from {name: export folder} and {name: dist folder holding NAME/ and NAME.tar.gz}."""
    from tools.photos import write_photos
    from vlm_vision_onnx.runtime import sample_photos

    for sub in ("models", "stages", "packages", "configs", "checkpoints"):
        (dest / sub).mkdir(parents=True, exist_ok=True)
    if REAL.is_dir():
        for model in sorted(REAL.glob("*.onnx")):
            shutil.copyfile(model, dest / "models" / model.name)
    for name, folder in stages.items():
        shutil.copytree(folder, dest / "stages" / name)
        shutil.copyfile(folder / "model.onnx", dest / "models" / f"{name}.onnx")
    for name, dist in packages.items():
        shutil.copytree(dist / name, dest / "packages" / name)
        shutil.copyfile(dist / f"{name}.tar.gz", dest / "packages" / f"{name}.tar.gz")
        (dest / "checkpoints" / name).mkdir()
        shutil.copyfile(dist / name / "config.json", dest / "checkpoints" / name / "config.json")
    for name in TINY:
        shutil.copyfile(ROOT / "builders" / "configs" / f"{name}.yaml", dest / "configs" / f"{name}.yaml")
    write_photos(dest / "photos", 6)
    sample_photos.write(dest / "sample")
    shutil.move(str(dest / "sample" / "pan"), dest / "videos" / "pan")
    shutil.rmtree(dest / "sample")
    return dest


def make(dest: Path) -> Path:
    """`dest` with the tiny exports and packages made here (builders.vision, release package)."""
    work = dest.with_name(dest.name + ".work")
    shutil.rmtree(work, ignore_errors=True)
    stages, packages = {}, {}
    for name in TINY:
        build = work / "build" / name
        for command in ([sys.executable, "-m", "builders.vision", "--model", name, "--out", str(build / "export")],
                        [sys.executable, "-m", "vlm_vision_onnx.release", "package", str(build), "--dist",
                         str(work / "dist"), "--threads", "1"]):
            print(f"[fuzz] seeds: {' '.join(command[2:4])} {name}", file=sys.stderr)
            subprocess.run(command, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
        stages[name], packages[name] = build / "export", work / "dist"
    gather(dest, stages, packages)
    shutil.rmtree(work)
    return dest
