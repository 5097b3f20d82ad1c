"""What a runtime command imports, from process start to its result (docs/runtimes.md, "Start-up"): never torch,
transformers, onnx (with ml_dtypes), onnx-ir, onnxscript or sympy, even in the project's .venv where all of them
are installed; OpenVINO only where OpenVINO runs. Each command runs in a fresh interpreter (this one has them all
imported), on the tiny Qwen3-VL package (`qwen_dist`) and a photo."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import QWEN
from tools.photos import write_photos

ROOT = Path(__file__).resolve().parents[1]
#: Never imported by a runtime command.
NEVER = {"torch", "transformers", "onnx", "ml_dtypes", "onnx_ir", "onnxscript", "sympy", "scipy"}
PROBE = """
import json, sys
from vlm_vision_onnx.runtime import __main__ as cli
code = cli.main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted({m.split(".")[0] for m in sys.modules})}))
"""


def imported(*argv) -> set[str]:
    """Top-level modules loaded by `python -m runtime ARGV` (its exit code must be 0)."""
    done = subprocess.run([sys.executable, "-c", PROBE, *map(str, argv)], cwd=ROOT, capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["code"] == 0, done.stderr[-2000:]
    return set(found["modules"])


@pytest.fixture(scope="module")
def photo(tmp_path_factory) -> Path:
    return write_photos(tmp_path_factory.mktemp("photos"), 1)[0]


def test_embed_on_onnx_runtime_imports_neither_torch_nor_onnx_nor_openvino(qwen_dist, photo, tmp_path):
    pytest.importorskip("torch", reason="the point is a process where torch is installed")
    found = imported("embed", photo, "--package", qwen_dist / QWEN, "--out", tmp_path / "e.npz",
                     "--engine", "onnxruntime", "--threads", "1")
    assert not found & (NEVER | {"openvino"}), found & (NEVER | {"openvino"})
    assert {"onnxruntime", "numpy", "PIL"} <= found


def test_embed_on_openvino_imports_openvino_and_nothing_else_heavy(qwen_dist, photo, tmp_path):
    pytest.importorskip("openvino", reason="the openvino extra")
    found = imported("embed", photo, "--package", qwen_dist / QWEN, "--out", tmp_path / "e.npz",
                     "--engine", "openvino", "--threads", "1")
    assert "openvino" in found and not found & NEVER, found & NEVER


def test_verify_and_encode_import_neither_torch_nor_onnx(qwen_dist, tmp_path):
    found = imported("verify", qwen_dist / QWEN, "--threads", "1")
    assert not found & NEVER, found & NEVER
    import numpy as np

    inputs = tmp_path / "in.npz"
    np.savez(inputs, pixel_values=np.zeros((16, 1536), np.float32), grid_thw=np.array([[1, 4, 4]], np.int64))
    found = imported("encode", qwen_dist / QWEN / "onnx/vision_encoder.onnx", "--inputs", inputs, "--out",
                     tmp_path / "out.npz", "--threads", "1")
    assert not found & (NEVER | {"openvino"}), found & (NEVER | {"openvino"})
