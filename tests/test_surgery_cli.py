"""Command line: bad input -> one line and exit 2; external data; nothing half-written; no torch."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from surgery import examples as ex
from surgery.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _error_line(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1, captured.err
    assert captured.out == ""
    return lines[0]


@pytest.mark.parametrize("command", [
    ["debake", "{model}", "{out}"], ["audit", "{model}"], ["doctor", "{model}"],
    ["set-batch", "{model}", "{out}", "--batch", "2"], ["freeze", "{model}", "{out}"], ["fix-dims", "{model}", "{out}"],
])
def test_not_onnx(tmp_path, capsys, command):
    model = tmp_path / "notes.onnx"
    model.write_text("these are my notes, not a model\n")
    out = tmp_path / "out" / "model.onnx"
    argv = [a.format(model=model, out=out) for a in command]
    assert main(argv) == 2
    assert _error_line(capsys).startswith(f"error: {model} is not an ONNX model")
    assert not out.parent.exists()


def test_missing_external_data(tmp_path, capsys):
    model = tmp_path / "model.onnx"
    onnx.save(ex.baked_merger(channels=64, out=64), model, save_as_external_data=True, location="model.onnx.data")
    (tmp_path / "model.onnx.data").unlink()
    assert main(["debake", str(model), str(tmp_path / "out" / "model.onnx")]) == 2
    line = _error_line(capsys)
    assert "stored in external file 'model.onnx.data', which is missing" in line
    assert "copy the .data file" in line


def test_truncated_external_data(tmp_path, capsys):
    model = tmp_path / "model.onnx"
    onnx.save(ex.baked_merger(channels=64, out=64), model, save_as_external_data=True, location="model.onnx.data")
    data = tmp_path / "model.onnx.data"
    data.write_bytes(data.read_bytes()[:100])
    assert main(["audit", str(model)]) == 2
    assert "is truncated" in _error_line(capsys)


def test_probe_name_not_an_input(tmp_path, capsys):
    model = tmp_path / "fpn.onnx"
    onnx.save(ex.fpn(), model)
    assert main(["doctor", str(model), "--probe", "image=1x3x64x64"]) == 2
    assert _error_line(capsys) == (
        "error: --probe 'image=1x3x64x64': the model has no input named 'image'; inputs are: images [1,3,64,64]")


@pytest.mark.parametrize("argv, message", [
    (["--probe", "images=1x3x64"], "input 'images' has rank 4 [1,3,64,64], not 3"),
    (["--probe", "images=1x3xbigx64"], "shape '1x3xbigx64' is not like 1x3x640x640"),
    (["--probe", "images"], "--probe 'images' is not NAME=SHAPE"),
])
def test_malformed_probe(tmp_path, capsys, argv, message):
    model = tmp_path / "fpn.onnx"
    onnx.save(ex.fpn(), model)
    assert main(["doctor", str(model), *argv]) == 2
    assert message in _error_line(capsys)


def test_debake_with_external_data_writes_weights_next_to_out(tmp_path, capsys):
    src_dir = tmp_path / "export"
    src_dir.mkdir()
    onnx.save(ex.baked_merger(channels=64, out=64), src_dir / "model.onnx", save_as_external_data=True,
              location="model.onnx.data")
    out = tmp_path / "surgery" / "model.onnx"
    assert main(["debake", str(src_dir / "model.onnx"), str(out)]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.onnx", "model.onnx.data", "report.json"]
    proto = onnx.load(out, load_external_data=False)
    locations = {e.value for t in proto.graph.initializer for e in t.external_data if e.key == "location"}
    assert locations == {"model.onnx.data"}
    report = json.loads((out.parent / "report.json").read_text())
    assert report["fixed"] == 8 and report["verification"]["ok"]
    assert main(["audit", str(out)]) == 0
    text = capsys.readouterr().out
    assert "verified: grid [[1, 24, 34]]: runs, output sizes follow the grid" in text


def test_debake_nothing_to_fix_copies(tmp_path, capsys):
    src = tmp_path / "export" / "model.onnx"
    src.parent.mkdir()
    onnx.save(ex.dynamic_encoder(), src, save_as_external_data=True, location="model.onnx.data")
    out = tmp_path / "surgery" / "model.onnx"
    assert main(["debake", str(src), str(out)]) == 0
    text = capsys.readouterr().out
    assert "nothing to fix: every size is computed at run time" in text
    assert "verified: grid [[1, 18, 20], [1, 14, 24]]: runs, output sizes follow the grid" in text
    assert out.read_bytes() == src.read_bytes()
    assert (out.parent / "model.onnx.data").read_bytes() == (src.parent / "model.onnx.data").read_bytes()


def test_failed_verification_writes_nothing(tmp_path, capsys):
    # image_embeds[:62 * 2]: a token count computed from constants, which no shape input holds as such;
    # debake finds nothing, the run at another grid shows the size does not follow, OUT is not written
    proto = ex.dynamic_encoder()
    for node in proto.graph.node:
        if list(node.output) == ["image_embeds"]:
            node.output[0] = "all_tokens"
        node.input[:] = ["all_tokens" if name == "image_embeds" else name for name in node.input]
    proto.graph.initializer.extend([onnx.numpy_helper.from_array(np.array([v], np.int64), name)
                                    for name, v in (("c62", 62), ("c2", 2))])
    proto.graph.node.extend([
        onnx.helper.make_node("Mul", ["c62", "c2"], ["kept"]),
        onnx.helper.make_node("Slice", ["all_tokens", "zero", "kept", "zero"], ["image_embeds"]),
    ])
    src = tmp_path / "m.onnx"
    onnx.save(proto, src)
    out = tmp_path / "out" / "model.onnx"
    assert main(["debake", str(src), str(out)]) == 1
    text = capsys.readouterr().out
    assert "nothing to fix" in text
    assert "sizes do NOT follow the grid: image_embeds [124, 64] (expected [174, 64])" in text
    assert "verification FAILED: nothing written" in text
    assert list(out.parent.iterdir()) == []


def test_module_entry_point_without_torch(tmp_path):
    model = tmp_path / "fpn.onnx"
    onnx.save(ex.fpn(), model)
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['surgery', 'doctor', {str(model)!r}]\n"
        "try:\n    runpy.run_module('surgery', run_name='__main__')\n"
        "except SystemExit as e:\n    assert e.code == 0, e.code\n"
        "assert not [m for m in sys.modules if m == 'torch' or m.startswith('torch.')], 'torch imported'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                            check=False)
    assert result.returncode == 0, result.stderr
    assert "clean: no problem found" in result.stdout


def test_ort_error_line_keeps_the_cause(tmp_path):
    from surgery.run import try_run

    proto = ex.fpn()
    proto.ir_version = 99  # newer than any ONNX Runtime reads (the load check refuses it before any run)
    path = tmp_path / "ir99.onnx"
    onnx.save(proto, path)
    _, error = try_run(path, {"images": np.zeros((1, 3, 64, 64), np.float32)})
    cause = f"ONNX Runtime cannot load {path}: Unsupported model IR version: 99, max supported IR version: "
    assert error.startswith(cause) and error[len(cause):].isdigit(), error


def test_debake_records_the_grid_so_audit_needs_no_grid(tmp_path, capsys):
    proto = ex.baked_merger()
    del proto.metadata_props[:]
    src, out = tmp_path / "in" / "m.onnx", tmp_path / "out"
    src.parent.mkdir()
    onnx.save(proto, src)
    assert main(["audit", str(src)]) == 2
    assert main(["debake", str(src), str(out), "--grid", "1,22,30"]) == 0
    assert onnx.load(out / "model.onnx").ir_version <= 10
    capsys.readouterr()
    assert main(["audit", str(out / "model.onnx")]) == 0
    assert "clean: no grid-specific constant" in capsys.readouterr().out
