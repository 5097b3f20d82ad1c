"""Default probe sizes: symbolic image sides guessed (640, then smaller multiples of 32), else --probe."""

import onnx
import onnx_ir as ir
import pytest

from surgery import examples as ex
from surgery.cli import main
from surgery.probe import probe_feeds
from surgery.probe_sizes import guess_shapes, other_sizes
from vlm_vision_onnx.core.errors import UsageError


def test_first_guess_that_runs_is_taken_and_said():
    shapes, note = guess_shapes(ir.from_proto(ex.fixed_size(320)), {})
    assert shapes == {"x": (1, 3, 320, 320)}
    assert note.startswith("no --probe given for the symbolic image size of x [1,3,?,?]: running at x=1x3x320x320 "
                           "(640..352 fail: Reshape node 'flatten': ")


def test_a_given_probe_is_kept():
    model = ir.from_proto(ex.fixed_size(320))
    assert guess_shapes(model, {"x": (1, 3, 320, 320)}) == ({"x": (1, 3, 320, 320)}, None)


def test_no_guess_runs_asks_for_probe(tmp_path, capsys):
    with pytest.raises(UsageError, match=r"input 'x' has non-static dims \[1,3,\?,\?\] and no guessed size runs "
                                         r"\(640×640 down to 32×32; the last fails: Reshape node 'flatten': .*\); "
                                         r"say the size with --probe x=1x3xSIZExSIZE"):
        guess_shapes(ir.from_proto(ex.fixed_size(100)), {})
    path = tmp_path / "m.onnx"
    onnx.save(ex.fixed_size(100), path)
    assert main(["doctor", str(path)]) == 2
    assert capsys.readouterr().err.count("\n") == 1


def test_second_size_halves_image_sides_to_a_multiple_of_32():
    model = ir.from_proto(ex.interleaved_head())
    feeds = probe_feeds(model, {"x": (1, 4, 640, 640)})
    assert other_sizes(model, feeds)["x"].shape == (1, 4, 320, 320)
    assert other_sizes(model, probe_feeds(model, {"x": (1, 4, 32, 32)}))["x"].shape == (1, 4, 64, 64)
    assert other_sizes(ir.from_proto(ex.fpn()), probe_feeds(ir.from_proto(ex.fpn()), {})) is None
