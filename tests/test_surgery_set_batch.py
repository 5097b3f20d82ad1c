"""set-batch: right for multi-scale models, verified per sample against the original."""

import numpy as np
import onnx
import onnx_ir as ir
import pytest

from surgery import examples as ex
from surgery.cli import main
from surgery.probe import declared
from surgery.run import run
from surgery.set_batch import set_batch, verify


def _check_per_sample(model, batch, seed=3):
    images = np.random.default_rng(seed).standard_normal((batch, 3, 64, 64)).astype(np.float32)
    got = run(model, {"images": images})
    original = ex.fpn()
    for i in range(batch):
        ref = run(original, {"images": images[i:i + 1]})
        for name, value in ref.items():
            np.testing.assert_allclose(got[name][i:i + 1], value, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("source", ["naive-rewrite", "batch-1", "baked-batch"])
def test_batch_32_matches_original_per_sample(source):
    proto = {"naive-rewrite": ex.naive_batch_rewrite(ex.fpn()), "batch-1": ex.fpn(),
             "baked-batch": ex.fpn(baked_batch=True)}[source]
    model = ir.from_proto(proto)
    new, report = set_batch(model, 32, {})
    decl = declared(new)
    assert decl["images"].dims == (32, 3, 64, 64)
    assert [decl[f"score_{s}"].dims for s in (2, 4, 8)] == [(32, 4, 1024), (32, 4, 256), (32, 4, 64)]
    rewritten = [(f["node"], f["replacement"]) for f in report["constants"]]
    assert rewritten == ([(f"flatten{i}", "[0, 4, -1]") for i in range(3)] if source == "baked-batch" else [])
    assert {k: (v.axis, v.rows, v.block) for k, v in report["layouts"].items()} == {
        "score_2": (0, 1, 1), "score_4": (0, 1, 1), "score_8": (0, 1, 1)}
    _check_per_sample(new, 32)


def test_dynamic_batch():
    new, _ = set_batch(ir.from_proto(ex.fpn(baked_batch=True)), None, {})
    assert declared(new)["images"].dims == ("batch", 3, 64, 64)
    for batch in (1, 5):
        _check_per_sample(new, batch)


def test_verify_catches_a_wrong_rewrite():
    # put the baked [1, 4, -1] back: the batch folds into the last axis and samples no longer match
    model = ir.from_proto(ex.fpn(baked_batch=True))
    new, report = set_batch(model, 4, {})
    baked = ir.val("baked_flat_shape", const_value=ir.tensor(np.array([1, 4, -1], np.int64)))
    new.graph.register_initializer(baked)
    for node in new.graph:
        if node.op_type == "Reshape":
            node.replace_input_with(1, baked)
    ok, lines = verify(new, model, report["probe"], 4, 1)
    assert not ok
    assert "score_2 [1, 4, 4096]" in lines[0]  # it runs, with the batch folded away


def test_set_batch_cli(tmp_path, capsys):
    src, out = tmp_path / "broken.onnx", tmp_path / "b32" / "model.onnx"
    onnx.save(ex.naive_batch_rewrite(ex.fpn(baked_batch=True)), src)
    assert main(["set-batch", str(src), str(out), "--batch", "32"]) == 0
    text = capsys.readouterr().out
    assert "set-batch: batch symbolic -> 32 (probe batch 1)" in text
    assert "verified: batch 32: 32 chunk(s) of 1 vs the original" in text
    _check_per_sample(ir.load(str(out)), 32)
    assert main(["doctor", str(out)]) == 0


def test_batch_constants_of_every_kind_follow_the_batch():
    model = ir.from_proto(ex.batch_baked_ops())
    new, report = set_batch(model, None, {})
    assert [(f["op"], f["replacement"]) for f in report["constants"]] == [
        ("Resize", "[N, 4, 16, 16]"), ("Slice", "[N]"), ("Expand", "[N, 2, 16, 16]"),
        ("ConstantOfShape", "[N, 1, 16, 16]"), ("Tile", "[N, 1, 1, 1]"), ("Reshape", "[0, -1]")]
    x = np.random.default_rng(1).standard_normal((5, 4, 8, 8)).astype(np.float32)
    got = run(new, {"x": x})["y"]
    original = ex.batch_baked_ops()
    for i in range(5):
        np.testing.assert_array_equal(got[i:i + 1], run(original, {"x": x[i:i + 1]})["y"])


def test_outputs_that_mix_samples_are_refused(tmp_path, capsys):
    src, out = tmp_path / "in" / "mix.onnx", tmp_path / "out"
    src.parent.mkdir()
    onnx.save(ex.batch_mixing(), src)
    assert main(["set-batch", str(src), str(out), "--batch", "4"]) == 1
    err = capsys.readouterr().err
    assert "at batch 2 the outputs mix samples: no chunking (contiguous or in blocks) matches" in err
    assert not out.exists()


def test_interleaved_head_layout_is_found_and_each_sample_matches(capsys):
    model = ir.from_proto(ex.interleaved_head())
    new, report = set_batch(model, 3, {"x": (1, 4, 8, 8)})
    layout = report["layouts"]["scores"]
    assert (layout.axis, layout.rows, layout.block) == (0, 128, 2)
    assert layout.describe(1) == ("axis 0 = batch × 128, samples interleaved: blocks of 2 from each sample in turn "
                                  "(sample i = that axis viewed as [64, batch, 2], [:, i])")
    x = np.random.default_rng(2).standard_normal((3, 4, 8, 8)).astype(np.float32)
    got = run(new, {"x": x})["scores"].reshape(64, 3, 2)  # rows ordered (h·w, sample, anchor)
    for i in range(3):
        np.testing.assert_array_equal(got[:, i].reshape(128, 1), run(model, {"x": x[i:i + 1]})["scores"])
    ok, lines = verify(new, model, report["probe"], 3, 1, report["layouts"])
    assert ok and lines[1] == "batch 3: 3 chunk(s) of 1 vs the original: scores max abs diff 0.00e+00"


def test_symbolic_batch_run_at_its_probe_batch_becomes_dynamic():
    # the export runs at batch 4 only (Reshape [4, -1]); --probe says so, and chunks of 4 are compared
    model = ir.from_proto(ex.symbolic_batch())
    new, report = set_batch(model, None, {"x": (4, 3, 8, 8)})
    assert report["probe_batch"] == 4
    assert [(f["node"], f["replacement"]) for f in report["constants"]] == [("flatten_baked", "[0, -1]")]
    for batch in (4, 12):
        ok, lines = verify(new, model, report["probe"], batch, 4, report["layouts"])
        assert ok, lines


def test_contiguous_keeps_the_batch_first_in_the_interleaving_transpose():
    model = ir.from_proto(ex.interleaved_head())
    new, report = set_batch(model, 3, {"x": (1, 4, 8, 8)}, contiguous=True)
    assert report["transposes"] == ["Transpose 'to_hwbc' (before scores): perm [2, 3, 0, 1] -> [0, 2, 3, 1]"]
    assert report["left_interleaved"] == []
    layout = report["layouts"]["scores"]
    assert (layout.axis, layout.rows, layout.block) == (0, 128, 128)
    x = np.random.default_rng(3).standard_normal((3, 4, 8, 8)).astype(np.float32)
    got = run(new, {"x": x})["scores"]
    for i in range(3):  # sample i is rows 128·i .. 128·(i+1)
        np.testing.assert_array_equal(got[128 * i:128 * (i + 1)], run(model, {"x": x[i:i + 1]})["scores"])
