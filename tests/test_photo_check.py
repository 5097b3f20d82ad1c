"""quantize.photo_check's fp32 reference: the optimize stage keeps its saved model's outputs on the held-out photos
(core.stage_outputs.PHOTOS_FILE); a quantize stage reading that folder takes them instead of running the fp32 model
again, and runs it when they are not there."""

import shutil

import numpy as np

from quantize import photo_check
from vlm_vision_onnx.core import onnx_io, stage_outputs
from vlm_vision_onnx.core.session import open_session


def test_the_optimize_stage_keeps_the_fp32_outputs_on_the_photos(tiny_optimized):
    model = onnx_io.model_path(tiny_optimized)
    named = photo_check.named_feeds(model)
    kept = stage_outputs.read(model, [feeds for _, feeds in named], stage_outputs.PHOTOS_FILE)
    assert kept is not None and len(kept) == len(named) == 4
    session = open_session(model, 1)
    for (_, feeds), outputs in zip(named, kept):
        run = session.run(None, feeds)
        assert len(outputs) == len(run)
        for got, want in zip(outputs, run):  # the stage ran them on its own thread count: float sums may reorder
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_measure_takes_the_kept_outputs_and_runs_the_model_without_them(tiny_optimized, tmp_path, monkeypatch,
                                                                         capsys):
    model = onnx_io.model_path(tiny_optimized)
    opened = []

    def counting(path, threads):
        opened.append(path)
        return open_session(path, threads)

    monkeypatch.setattr(photo_check, "open_session", counting)
    kept = photo_check.measure(model, model, 1, lambda path: open_session(path, 1))
    assert opened == [] and "those IN's stage kept" in capsys.readouterr().err
    assert kept["min_token_cosine"] > 0.99999

    copy = tmp_path / "optimized"
    shutil.copytree(tiny_optimized, copy)
    (copy / stage_outputs.PHOTOS_FILE).unlink()
    ran = photo_check.measure(copy / "model.onnx", copy / "model.onnx", 1, lambda path: open_session(path, 1))
    assert opened == [copy / "model.onnx"] and ran["min_token_cosine"] > 0.99999
