"""Shared fixtures: tiny-config exports through both paths, built once per test session."""

import json

import pytest


def export_tiny(out, *extra) -> dict:
    """Export the tiny config into `out`; return its report (the export itself asserts exit 0)."""
    from builders import vision  # imported here: torch-free test files must not need torch

    code = vision.main(["--model", "qwen3-vl-tiny", "--out", str(out), *extra])
    assert code == 0, f"export {extra} exited {code}"
    return json.loads((out / "report.json").read_text())


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
