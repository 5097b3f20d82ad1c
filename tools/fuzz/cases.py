"""The commands a fuzz run drives and how one case is made: a command, a mutated copy of one of its inputs in the
case's folder, and the argv that points the command at it (OUT, where the command writes, is `case/out` or
`case/out.npz` and does not exist before).

Case N of a run is made from `random.Random(f"{seed}:{N}")` alone: `python -m tools.fuzz run --seed S --only N`
makes and runs it again."""

from __future__ import annotations

import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx

from tools.fuzz import mutate_bytes, mutate_files, mutate_onnx


@dataclass
class Case:
    number: int
    command: str  # its label, e.g. "surgery doctor"
    module: str  # the module whose main(argv) runs it
    argv: list[str]
    folder: Path
    out: Path  # the one path the command may create
    what: str  # the mutation
    seed_file: str
    input: str = ""  # the mutated input's path


@dataclass(frozen=True)
class Command:
    label: str
    module: str
    kind: str  # the input it mutates: model, stage, build, package, tarball, image, video, config, checkpoint
    argv: Callable[[dict], list[str]]  # from {"in": the mutated input, "out": OUT, "photo", "package", "npz"}
    out: str = "out"  # OUT's name in the case folder
    weight: float = 1.0
    needs: tuple[str, ...] = field(default=())  # modules that must import (an extra), else the command is left out


#: The runtime's and the release's command modules.
RUNTIME, RELEASE = "vlm_vision_onnx.runtime.__main__", "vlm_vision_onnx.release.__main__"
COMMANDS = [
    Command("surgery doctor", "surgery.cli", "model", lambda p: ["doctor", p["in"]], weight=3),
    Command("surgery audit", "surgery.cli", "model", lambda p: ["audit", p["in"]]),
    Command("surgery fix-dims", "surgery.cli", "model", lambda p: ["fix-dims", p["in"], p["out"]], weight=2),
    Command("surgery set-batch", "surgery.cli", "model", lambda p: ["set-batch", p["in"], p["out"], "--batch", "2"],
            weight=2),
    Command("surgery freeze", "surgery.cli", "model", lambda p: ["freeze", p["in"], p["out"]]),
    Command("surgery debake", "surgery.cli", "model", lambda p: ["debake", p["in"], p["out"]]),
    Command("surgery stage", "surgery.cli", "stage", lambda p: ["stage", p["in"], p["out"]], weight=0.5),
    Command("quantize optimize", "quantize.__main__", "stage",
            lambda p: ["optimize", p["in"], p["out"], "--threads", "1"], weight=0.5),
    Command("quantize int8", "quantize.__main__", "stage", lambda p: ["int8", p["in"], p["out"], "--threads", "1"],
            weight=0.5),
    Command("quantize int4", "quantize.__main__", "stage",
            lambda p: ["int4", p["in"], p["out"], "--threads", "1", "--block-size", "32"], weight=0.3),
    Command("quantize fp16", "quantize.__main__", "stage", lambda p: ["fp16", p["in"], p["out"], "--threads", "1"],
            weight=0.3),
    Command("quantize qnn", "quantize.__main__", "stage", lambda p: ["qnn", p["in"], p["out"], "--threads", "1"],
            weight=0.2),
    Command("quantize ov-int8", "quantize.__main__", "stage",
            lambda p: ["ov-int8", p["in"], p["out"], "--threads", "1"], weight=0.1, needs=("nncf",)),
    Command("release package", RELEASE, "build",
            lambda p: ["package", p["in"], "--dist", p["out"], "--threads", "1"], weight=0.5),
    Command("runtime verify", RUNTIME, "package", lambda p: ["verify", p["in"], "--threads", "1"], weight=2),
    Command("runtime verify (tarball)", RUNTIME, "tarball", lambda p: ["verify", p["in"], "--threads", "1"]),
    Command("runtime embed (package)", RUNTIME, "package",
            lambda p: ["embed", p["photo"], "--package", p["in"], "--out", p["out"], "--threads", "1"],
            out="out.npz", weight=2),
    Command("runtime embed (image)", RUNTIME, "image",
            lambda p: ["embed", p["in"], "--package", p["package"], "--out", p["out"], "--threads", "1"],
            out="out.npz", weight=3),
    Command("runtime embed (video)", RUNTIME, "video",
            lambda p: ["embed", "--video", p["in"], "--package", p["package"], "--out", p["out"], "--threads", "1"],
            out="out.npz"),
    Command("runtime embed-collection", RUNTIME, "image",
            lambda p: ["embed-collection", p["package"], str(Path(p["in"]).parent), p["out"], "--scheduler",
                       "local", "--threads", "1"], weight=0.5, needs=("pyarrow",)),
    Command("runtime encode", RUNTIME, "model",
            lambda p: ["encode", p["in"], "--inputs", p["npz"], "--out", p["out"], "--threads", "1"], out="out.npz"),
    Command("runtime npu-check", RUNTIME, "model", lambda p: ["npu-check", p["in"]], weight=0.3,
            needs=("onnxruntime_qnn",)),
    Command("builders.vision --config", "builders.vision", "config",
            lambda p: ["--config", p["in"], "--out", p["out"]], weight=0.4, needs=("torch",)),
    Command("builders.vision --checkpoint", "builders.vision", "checkpoint",
            lambda p: ["--checkpoint", p["in"], "--out", p["out"]], weight=0.3, needs=("torch",)),
]
#: The package a command that mutates something else reads as its well-formed other input.
GOOD_PACKAGE = "qwen3-vl-tiny"


def available(commands: list[Command]) -> list[Command]:
    """The commands whose extras are installed."""
    import importlib.util

    return [c for c in commands if all(importlib.util.find_spec(m) is not None for m in c.needs)]


def _mutate_model_file(path: Path, rng: random.Random) -> str:
    """An ONNX file mutated in place: its structure (2 of 3 cases) or its bytes."""
    if rng.random() < 0.67:
        model = onnx.load(str(path), load_external_data=False)
        what = mutate_onnx.mutate(model, rng, path.parent)
        path.write_bytes(model.SerializeToString())
        return what
    data, name = mutate_bytes.mutate(path.read_bytes(), rng)
    path.write_bytes(data)
    return f"bytes {name}"


def _qwen_inputs(path: Path) -> Path:
    """A well-formed IN.npz for the tiny Qwen3-VL model (one 64x64 image), for `runtime encode`."""
    np.savez(path, pixel_values=np.zeros((16, 1536), np.float32), grid_thw=np.array([[1, 4, 4]], np.int64))
    return path


def make(number: int, seed: int, seeds: Path, work: Path, commands: list[Command]) -> Case:
    """Case `number` of the run `seed`: its folder `work/case-NNNNNN/` made, its input mutated."""
    rng = random.Random(f"{seed}:{number}")
    command = rng.choices(commands, weights=[c.weight for c in commands])[0]
    folder = work / f"case-{number:06d}"
    shutil.rmtree(folder, ignore_errors=True)
    (folder / "in").mkdir(parents=True)
    paths = {"out": str(folder / command.out), "package": str(seeds / "packages" / GOOD_PACKAGE),
             "photo": str(min((seeds / "photos").iterdir())),
             "npz": str(_qwen_inputs(folder / "inputs.npz"))}
    kind = command.kind
    if kind == "model":
        source = rng.choice(sorted((seeds / "models").glob("*.onnx")))
        target = folder / "in" / source.name
        shutil.copyfile(source, target)
        what = _mutate_model_file(target, rng)
    elif kind in ("stage", "build"):
        source = rng.choice(sorted((seeds / "stages").iterdir()))
        stage = folder / "in" / source.name / "export" if kind == "build" else folder / "in" / source.name
        shutil.copytree(source, stage)
        target = stage.parent if kind == "build" else stage
        files = [stage / "model.onnx", stage / "report.json"]
        chosen = rng.choice(files)
        what = (_mutate_model_file(chosen, rng) if chosen.suffix == ".onnx"
                else mutate_files.mutate_json(chosen, rng))
    elif kind == "package":
        source = seeds / "packages" / rng.choice([p.name for p in (seeds / "packages").iterdir() if p.is_dir()])
        target = folder / "in" / source.name
        shutil.copytree(source, target, symlinks=True)
        what = mutate_files.mutate_package(target, rng, _mutate_model_file)
    elif kind == "tarball":
        source = rng.choice(sorted((seeds / "packages").glob("*.tar.gz")))
        target = folder / "in" / source.name
        if rng.random() < 0.5:
            data, name = mutate_bytes.mutate(source.read_bytes(), rng)
            target.write_bytes(data)
            what = f"bytes {name}"
        else:
            what = mutate_files.evil_tarball(target, seeds / "packages" / source.name.removesuffix(".tar.gz"), rng)
    elif kind == "image":
        source = rng.choice(sorted((seeds / "photos").iterdir()))
        target = folder / "in" / source.name
        shutil.copyfile(source, target)
        target, what = mutate_files.mutate_image(target, rng)
    elif kind == "video":
        source = seeds / "videos" / "pan"
        target = folder / "in" / "pan"
        shutil.copytree(source, target)
        what = mutate_files.mutate_frames(target, rng)
    elif kind == "config":
        source = rng.choice(sorted((seeds / "configs").glob("*.yaml")))
        target = folder / "in" / source.name
        shutil.copyfile(source, target)
        what = mutate_files.mutate_yaml(target, rng)
    else:  # checkpoint
        source = rng.choice(sorted((seeds / "checkpoints").iterdir()))
        target = folder / "in" / source.name
        shutil.copytree(source, target)
        what = mutate_files.mutate_json(target / "config.json", rng)
    paths["in"] = str(target)
    return Case(number, command.label, command.module, [str(a) for a in command.argv(paths)], folder,
                folder / command.out, what, str(source.relative_to(seeds)), str(target))
