"""fix-dims: repaired declarations, same computation; the naive-batch FPN runs at 32 and matches."""

import json

import numpy as np
import onnx
import onnx_ir as ir

from surgery import examples as ex
from surgery.cli import main
from surgery.fix_dims import check_claims, fix_dims
from surgery.probe import declared, probe_feeds
from surgery.run import run, try_run


def _per_sample_reference(images):
    """Each sample through the original batch-1 FPN."""
    original = ex.fpn()
    outs = [run(original, {"images": images[i:i + 1]}) for i in range(len(images))]
    return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}


def test_naive_batch_fpn_runs_at_32_and_matches_per_sample():
    broken = ir.from_proto(ex.naive_batch_rewrite(ex.fpn()))
    feeds = probe_feeds(broken, {"images": (32, 3, 64, 64)})
    assert "re-use buffer" in try_run(broken, feeds)[1]
    fixed, report = fix_dims(broken, feeds)
    assert [c["symbol"] for c in report["conflicts"]] == ["?"]
    assert report["renamed_input_dims"] == {"images axis 0": "? -> batch"}
    assert declared(fixed)["images"].dims == ("batch", 3, 64, 64)
    got = run(fixed, feeds)
    ref = _per_sample_reference(feeds["images"])
    for name in ref:
        np.testing.assert_allclose(got[name], ref[name], rtol=1e-5, atol=1e-5)
    assert check_claims(fixed, feeds) == []
    # nodes and weights untouched: only declarations changed
    assert [n.op_type for n in fixed.graph] == [n.op_type for n in broken.graph]


def test_stale_value_info_is_dropped_and_reinferred():
    stale = ir.from_proto(ex.stale_value_info(ex.fpn()))
    feeds = probe_feeds(stale, {})
    fixed, report = fix_dims(stale, feeds)
    assert [s["tensor"] for s in report["stale"]] == ["p1"]
    assert declared(fixed)["p1"].dims == (1, 8, 16, 16)
    assert check_claims(fixed, feeds) == []


def test_fix_dims_cli_writes_verified_model(tmp_path, capsys):
    src, out = tmp_path / "broken.onnx", tmp_path / "fixed" / "model.onnx"
    onnx.save(ex.naive_batch_rewrite(ex.fpn()), src)
    assert main(["fix-dims", str(src), str(out), "--probe", "images=32x3x64x64"]) == 0
    text = capsys.readouterr().out
    assert "renamed  images axis 0: ? -> batch" in text
    assert "verified: at images=32x3x64x64: runs, claims true, same outputs as IN" in text
    report = json.loads((out.parent / "report.json").read_text())
    assert report["command"] == "fix-dims" and report["probe"] == {"images": [32, 3, 64, 64]}
    assert main(["doctor", str(out), "--probe", "images=32x3x64x64"]) == 0
    assert sorted(p.name for p in out.parent.iterdir()) == ["model.onnx", "report.json"]


def test_claims_true_at_one_size_only_are_repaired_and_verified_at_both(tmp_path, capsys):
    # the FPN with symbolic sides keeps output shapes [1, 4, 1024] ... that hold at 64×64 only
    proto = ex.fpn()
    for dim in proto.graph.input[0].type.tensor_type.shape.dim[2:]:
        dim.dim_param = "side"
    src, out = tmp_path / "in" / "m.onnx", tmp_path / "out"
    src.parent.mkdir()
    onnx.save(proto, src)
    assert main(["fix-dims", str(src), str(out), "--probe", "images=1x3x64x64"]) == 0
    text = capsys.readouterr().out
    assert "fix-dims: 0 conflicting symbol(s), 16 stale claim(s)" in text  # 3 outputs, 13 4-D value_info
    assert "cleared  score_2 axis 2" in text
    assert "verified: at images=1x3x64x64: runs, claims true, same outputs as IN" in text
    assert "verified: at images=1x3x32x32: runs, claims true, same outputs as IN" in text
    report = json.loads((out / "report.json").read_text())
    assert report["probed_sizes"] == [{"images": [1, 3, 64, 64]}, {"images": [1, 3, 32, 32]}]
    assert main(["doctor", str(out / "model.onnx"), "--probe", "images=1x3x128x128"]) == 0


def test_a_second_size_the_model_cannot_run_at_is_skipped_with_a_note(tmp_path, capsys):
    src, out = tmp_path / "in" / "m.onnx", tmp_path / "out"
    src.parent.mkdir()
    onnx.save(ex.fixed_size(320), src)  # runs at 320×320 only
    assert main(["fix-dims", str(src), str(out), "--probe", "x=1x3x320x320"]) == 0
    text = capsys.readouterr().out
    assert "note: not checked at x=1x3x160x160: the model fails there even without shape claims (Reshape" in text
    assert "verified: at x=1x3x320x320: runs, claims true, same outputs as IN" in text
