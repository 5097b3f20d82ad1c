"""Shared fixtures: tiny-config exports through both paths, built once per test session; and the fixtures more
than one test module uses (their helpers are tests.support's)."""

import importlib
import json
import shutil
from pathlib import Path

import pytest

pytest.register_assert_rewrite("tests.support")  # before its import: its asserts report as the test modules' do

from tests.support import QWEN, install_torchvision_stub, stubbed_video_processor


def export_tiny(out, *extra) -> dict:
    """Export the tiny config into `out`; return its report (the export itself asserts exit 0)."""
    from builders import vision  # imported here: torch-free test files must not need torch

    code = vision.main(["--model", "qwen3-vl-tiny", "--out", str(out), *extra])
    assert code == 0, f"export {extra} exited {code}"
    return json.loads((out / "report.json").read_text())


def export_phi4_tiny(layers: int | None = None):
    """The tiny Phi-4 config (with `layers` encoder layers instead of its 2: with 3, two run, features from the
    second-last, and ORT fuses the second layer's attention; with 2, none), random weights (seed 0), exported
    through TorchScript with named dims: (config, embed module, onnx.ModelProto)."""
    import dataclasses

    from builders import onnx_export  # imported here: torch-free test files must not need torch
    from builders.config import load_config
    from builders.phi4_mm import family
    from families.phi4_mm import layouts

    config = load_config("phi-4-mm-tiny")
    if layers is not None:
        config = dataclasses.replace(config, vision={**config.vision, "num_hidden_layers": layers})
    embed = family.build(config, None, seed=0)[0]
    io = family.io_spec(embed)
    example = family.example_inputs(embed, layouts.EXAMPLE_IMAGES, seed=0)
    proto = onnx_export.export_torchscript(family.export_module(embed), tuple(example[n] for n in io.input_names),
                                           io, config.opset)
    onnx_export.name_io_dims(proto, io)
    return config, embed, proto


@pytest.fixture(scope="session")
def tiny_exports(tmp_path_factory) -> dict:
    """{'torchscript': folder, 'dynamo': folder} of tiny exports (model.onnx + report.json)."""
    root = tmp_path_factory.mktemp("tiny")
    export_tiny(root / "torchscript")
    export_tiny(root / "dynamo", "--dynamo")
    return {"torchscript": root / "torchscript", "dynamo": root / "dynamo"}


@pytest.fixture(scope="session")
def tiny_optimized(tiny_exports, tmp_path_factory):
    """The optimize stage folder of the tiny TorchScript export, shared by every test that reads it (one
    `python -m quantize optimize` for the session). Read-only: a test that writes beside it copies it."""
    from quantize import __main__ as cli

    out = tmp_path_factory.mktemp("tiny-optimized") / "optimized"
    assert cli.main(["optimize", str(tiny_exports["torchscript"]), str(out), "--threads", "1"]) == 0
    return out


@pytest.fixture(scope="session")
def transformers_js_node(tmp_path_factory):
    """bench/node installed once (`npm ci --ignore-scripts`, pinned by its lockfile): transformers.js 4.3.1 and
    onnxruntime-node, shared by every transformers.js test; skips with the reason where Node is missing."""
    from bench import transformers_js

    missing = transformers_js.node_missing()
    if missing is not None:
        pytest.skip(f"transformers.js needs Node: {missing}")
    return transformers_js.install(tmp_path_factory.mktemp("transformers-js") / "node")


def single_error(stderr: str) -> str:
    """The one `error:` line of a failed command (progress lines may precede it; no traceback)."""
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def snapshot(root) -> dict:
    """{relative path: bytes} of every file under `root` (folders as None): to prove nothing changed."""
    from pathlib import Path

    root = Path(root)
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def build_every_variant(export_folder, root, threads: int = 1):
    """`root`/{export, surgery, optimized, int8, int4, fp16, q4f16}: `make export FP16=1`'s stages from an export
    folder, through the commands (int4 in blocks of 32, onnx-community's q4 and q4f16 block, all 4-bit: the shipped
    2B recipe's 72 MatMuls at 8 bits would be every MatMul of a tiny model). Returns `root`."""
    import shutil

    from quantize import __main__ as quantize_cli
    from surgery import cli as surgery_cli

    t = ["--threads", str(threads)]
    shutil.copytree(export_folder, root / "export")
    assert surgery_cli.main(["stage", str(root / "export"), str(root / "surgery")]) == 0
    assert quantize_cli.main(["optimize", str(root / "surgery"), str(root / "optimized"), *t]) == 0
    assert quantize_cli.main(["int8", str(root / "optimized"), str(root / "int8"), *t]) == 0
    assert quantize_cli.main(["int4", str(root / "optimized"), str(root / "int4"), "--block-size", "32", *t]) == 0
    assert quantize_cli.main(["fp16", str(root / "optimized"), str(root / "fp16"), *t]) == 0
    assert quantize_cli.main(["q4f16", str(root / "optimized"), str(root / "q4f16"), *t]) == 0
    return root


@pytest.fixture(scope="session")
def every_variant_packages(tiny_exports, tmp_path_factory) -> dict:
    """{family: dist/NAME/} of the tiny Qwen3-VL and Phi-4-multimodal packages with every variant (fp32, fp16,
    int8, q4, q4f16), built once per session through the stage commands and `release package`."""
    from builders import vision
    from release.package import package

    root = tmp_path_factory.mktemp("every-variant")
    phi_export = root / "phi-export"
    assert vision.main(["--model", "phi-4-mm-tiny", "--out", str(phi_export)]) == 0
    found = {}
    for fam, name, export in (("qwen3-vl", "qwen3-vl-tiny", tiny_exports["torchscript"]),
                              ("phi-4-mm", "phi-4-mm-tiny", phi_export)):
        build = build_every_variant(export, root / "build" / name)
        found[fam], _ = package(build, root / "dist", threads=1)
    return found


#: `--static` sizes of the tiny configs (pixels, WxH): a square and a non-square one per Qwen generation, each a
#: few patches a side; Qwen2.5-VL's windows (8 patches) are cut at the right and bottom edges at both sizes; and
#: one video (FRAMESxWxH: 4 frames, t = 2, one batch of two frames in every attention).
TINY_STATIC = {"qwen2-vl-tiny": ("56x56", "84x56"), "qwen2.5-vl-tiny": ("168x168", "196x140"),
               "qwen3-vl-tiny": ("64x64", "96x64"), "qwen3.5-tiny": ("64x64", "96x64", "4x64x64")}


@pytest.fixture(scope="session")
def tiny_static(tmp_path_factory) -> dict:
    """{(config, size): folder} of `--static` exports (TorchScript, random weights seed 0) of every TINY_STATIC
    size, plus ("qwen2.5-vl-tiny", "196x140", "dynamo") through torch.export; built once per session."""
    from builders import vision

    root = tmp_path_factory.mktemp("tiny-static")
    found = {}
    for model, sizes in TINY_STATIC.items():
        for size in sizes:
            found[model, size] = root / f"{model}-{size}"
            assert vision.main(["--model", model, "--static", size, "--out", str(found[model, size])]) == 0
    found["qwen2.5-vl-tiny", "196x140", "dynamo"] = root / "qwen2.5-vl-tiny-196x140-dynamo"
    assert vision.main(["--model", "qwen2.5-vl-tiny", "--static", "196x140", "--dynamo", "--out",
                        str(found["qwen2.5-vl-tiny", "196x140", "dynamo"])]) == 0
    return found


# ---------------------------------------------------------------- fixtures more than one test module uses
@pytest.fixture(scope="module")
def qwen_dist(tiny_exports, tmp_path_factory) -> Path:
    """dist/ with qwen3-vl-tiny/ and qwen3-vl-tiny.tar.gz, packaged from the tiny export."""
    from release import __main__ as release_cli

    build = tmp_path_factory.mktemp("build") / QWEN
    shutil.copytree(tiny_exports["torchscript"], build / "export")
    dist = tmp_path_factory.mktemp("dist")
    assert release_cli.main(["package", str(build), "--dist", str(dist), "--threads", "1"]) == 0
    return dist


@pytest.fixture
def transformers_processor(monkeypatch):
    """transformers' Phi4MultimodalImageProcessor with its class defaults, on the torchvision stand-in."""
    install_torchvision_stub(monkeypatch)
    name = "transformers.models.phi4_multimodal.image_processing_phi4_multimodal"
    monkeypatch.delitem(importlib.sys.modules, name, raising=False)  # imported afresh, dropped afterwards
    module = importlib.import_module(name)
    return module.Phi4MultimodalImageProcessor()


@pytest.fixture
def transformers_video_processor(monkeypatch):
    """transformers' Qwen3VLVideoProcessor (class defaults) on the torchvision stand-in."""
    return stubbed_video_processor(monkeypatch, "transformers.models.qwen3_vl.video_processing_qwen3_vl",
                                   "Qwen3VLVideoProcessor")


@pytest.fixture
def transformers_qwen2_video_processor(monkeypatch):
    """transformers' Qwen2VLVideoProcessor (class defaults: Qwen2-VL's and Qwen2.5-VL's) on the stand-in."""
    return stubbed_video_processor(monkeypatch, "transformers.models.qwen2_vl.video_processing_qwen2_vl",
                                   "Qwen2VLVideoProcessor")
