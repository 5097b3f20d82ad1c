"""Surgery on real face detectors (SCRFD, YuNet, RetinaFace) from ../shared/fixtures/real/.

set-batch 8 matches every sample (SCRFD's Resize sizes [1, 16, 40, 40] rewritten, SCRFD 500m's
interleaved [-1, k] heads split right); doctor finds SCRFD 500m's output shapes true at 640×640
only and fix-dims repairs them; the naive batch script of the failure reports reproduces ORT's
"Shape mismatch attempting to re-use buffer" and doctor + fix-dims repair it.
"""

import json
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from surgery import examples as ex
from surgery.cli import main
from surgery.probe import neutral
from surgery.run import run, try_run

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "real"
pytestmark = pytest.mark.skipif(not (FIXTURES / "scrfd_500m.onnx").is_file(),
                                reason=f"real detector fixtures not found in {FIXTURES}")

# (file, input, shape to run at): static models at their 640×640, symbolic ones small to stay fast
DETECTORS = [
    ("scrfd_500m_bnkps", "input.1", (1, 3, 640, 640)),
    ("scrfd_500m", "input.1", (1, 3, 160, 160)),
    ("yunet", "input", (1, 3, 160, 160)),
    ("retinaface", "input0", (1, 3, 640, 640)),
]


def _per_sample(value: np.ndarray, layout: dict, batch: int) -> list[np.ndarray]:
    """Sample i of an output, independently of surgery's own splitting: rows reshaped to
    [rows/block, batch, block] along the layout's axis, [:, i]."""
    axis, rows, block = layout["axis"], layout["rows"], layout["block"]
    front = np.moveaxis(value, axis, 0)
    assert front.shape[0] == batch * rows
    grouped = front.reshape(rows // block, batch, block, *front.shape[1:])
    return [np.moveaxis(grouped[:, i].reshape(rows, *front.shape[1:]), 0, axis) for i in range(batch)]


@pytest.mark.parametrize("name, input_name, shape", DETECTORS, ids=[d[0] for d in DETECTORS])
def test_set_batch_8_matches_every_sample(tmp_path, capsys, name, input_name, shape):
    out = tmp_path / "b8"
    probe = [] if shape[2] == 640 else ["--probe", f"{input_name}={'x'.join(map(str, shape))}"]
    assert main(["set-batch", str(FIXTURES / f"{name}.onnx"), str(out), "--batch", "8", *probe]) == 0
    text = capsys.readouterr().out
    assert "verified: batch 8: 8 chunk(s) of 1 vs the original" in text
    report = json.loads((out / "report.json").read_text())
    layouts = report["layouts"]
    for output, layout in layouts.items():
        assert f"  layout   {output}: {layout['layout']}" in text
    if name == "scrfd_500m_bnkps":  # the two top-down Resize sizes now follow the batch
        assert [(f["op"], f["replacement"]) for f in report["constants"] if f["op"] == "Resize"] == [
            ("Resize", "[N, 16, 40, 40]"), ("Resize", "[N, 16, 80, 80]")]
    if name == "scrfd_500m":  # Transpose [2, 3, 0, 1] + Reshape [-1, k]: rows of the samples interleaved by 2
        assert {(v["axis"], v["rows"], v["block"]) for v in layouts.values()} == {
            (0, 800, 2), (0, 200, 2), (0, 50, 2)}
    else:
        assert {(v["axis"], v["rows"], v["block"]) for v in layouts.values()} == {(0, 1, 1)}
    images = np.random.default_rng(5).standard_normal((8, *shape[1:])).astype(np.float32)
    got = run(out / "model.onnx", {input_name: images})
    original = FIXTURES / f"{name}.onnx"
    for i in range(8):
        ref = run(original, {input_name: images[i:i + 1]})
        for output, value in ref.items():
            np.testing.assert_allclose(_per_sample(got[output], layouts[output], 8)[i], value, rtol=1e-5, atol=1e-5)


def test_doctor_finds_outputs_true_at_640_only_and_fix_dims_repairs_them(tmp_path, capsys):
    src = FIXTURES / "scrfd_500m.onnx"
    assert main(["doctor", str(src), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["probe_guess"].endswith("running at input.1=1x3x640x640")
    stale = {p["tensor"]: p for p in report["problems"] if p["kind"] == "stale-shape"}
    assert sorted(stale) == sorted(["443", "468", "493", "446", "471", "496", "449", "474", "499"])
    assert stale["443"]["declared"] == "[12800,1]"
    assert stale["443"]["holds_at"] == ["input.1=1x3x640x640"]
    assert stale["443"]["fails_at"] == ["input.1=1x3x320x320"]
    out = tmp_path / "fixed"
    assert main(["fix-dims", str(src), str(out)]) == 0
    text = capsys.readouterr().out
    assert "fix-dims: 0 conflicting symbol(s), 9 stale claim(s)" in text
    assert "verified: at input.1=1x3x640x640: runs, claims true, same outputs as IN" in text
    assert "verified: at input.1=1x3x320x320: runs, claims true, same outputs as IN" in text
    assert main(["doctor", str(out), "--probe", "input.1=1x3x160x160"]) == 0


def test_naive_batch_script_reproduces_buffer_reuse_failure_and_is_repaired(tmp_path, capsys):
    naive = tmp_path / "in" / "scrfd_naive.onnx"
    naive.parent.mkdir()
    onnx.save(ex.naive_fixed_batch(onnx.load(FIXTURES / "scrfd_500m.onnx"), 2), naive)
    feeds = {"input.1": np.random.default_rng(0).standard_normal((2, 3, 160, 160)).astype(np.float32)}
    _, error = try_run(naive, feeds)
    assert "Shape mismatch attempting to re-use buffer" in error
    probe = ["--probe", "input.1=2x3x160x160"]
    assert main(["doctor", str(naive), *probe]) == 1
    text = capsys.readouterr().out
    assert "problem  fails-in-ort: fails in ONNX Runtime at input.1=2x3x160x160: " in text
    assert "problem  dim-param-conflict: symbol '?' is used for different sizes" in text
    out = tmp_path / "fixed"
    assert main(["fix-dims", str(naive), str(out), *probe]) == 0
    text = capsys.readouterr().out
    assert "renamed  input.1 axis 2: ? -> dim_2" in text and "renamed  input.1 axis 3: ? -> dim_3" in text
    assert main(["doctor", str(out), *probe]) == 0
    reference = neutral(ir.load(str(FIXTURES / "scrfd_500m.onnx")))
    reference.graph.inputs[0].shape = ir.Shape(["n", 3, "h", "w"])
    for size in (160, 320):
        at = {"input.1": np.random.default_rng(size).standard_normal((2, 3, size, size)).astype(np.float32)}
        got, ref = run(out / "model.onnx", at), run(reference, at)
        for name, value in ref.items():
            np.testing.assert_array_equal(got[name], value)


def test_set_batch_contiguous_gives_each_scrfd_sample_its_own_rows(tmp_path, capsys):
    out = tmp_path / "b4"
    assert main(["set-batch", str(FIXTURES / "scrfd_500m.onnx"), str(out), "--batch", "4", "--contiguous",
                 "--probe", "input.1=1x3x160x160"]) == 0
    text = capsys.readouterr().out
    assert text.count("contiguous  Transpose") == 9 and "interleaved " not in text
    report = json.loads((out / "report.json").read_text())
    assert {(v["axis"], v["block"] == v["rows"]) for v in report["layouts"].values()} == {(0, True)}
    images = np.random.default_rng(6).standard_normal((4, 3, 160, 160)).astype(np.float32)
    got = run(out / "model.onnx", {"input.1": images})
    for i in range(4):
        ref = run(FIXTURES / "scrfd_500m.onnx", {"input.1": images[i:i + 1]})
        for name, value in ref.items():
            rows = len(value)
            np.testing.assert_allclose(got[name][rows * i:rows * (i + 1)], value, rtol=1e-5, atol=1e-5)
