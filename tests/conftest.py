"""Shared fixtures: tiny-config exports through both paths, built once per test session."""

import json

import pytest


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
