"""doctor: names each shape problem with the tensors and dims involved, found by running."""

import json

import onnx
import onnx_ir as ir
import pytest

from surgery import examples as ex
from surgery.cli import main
from surgery.doctor import diagnose
from surgery.grid import Grid


def _kinds(report):
    return [p["kind"] for p in report["problems"]]


def test_naive_batch_fpn_shared_symbol_and_conflicting_tensors():
    report = diagnose(ir.from_proto(ex.naive_batch_rewrite(ex.fpn())), {"images": (32, 3, 64, 64)})
    assert _kinds(report) == ["fails-in-ort", "dim-param-conflict"]
    assert "Shape mismatch attempting to re-use buffer" in report["problems"][0]["message"]
    conflict = report["problems"][1]
    assert conflict["symbol"] == "?"
    sizes = conflict["sizes"]
    # the upsampled maps of two scales share '?' on their height: 16 vs 32
    assert "u1 axis 2" in sizes[16] and "u0 axis 2" in sizes[32]
    assert "images axis 0" in sizes[32]  # the batch, at the probe's 32
    assert "symbol '?' is used for different sizes" in conflict["message"]


def test_clean_fpn_has_no_problem():
    report = diagnose(ir.from_proto(ex.fpn()), {})
    assert report["problems"] == []
    assert report["probe"] == {"images": [1, 3, 64, 64]}


def test_stale_value_info():
    report = diagnose(ir.from_proto(ex.stale_value_info(ex.fpn())), {})
    (problem,) = report["problems"]
    assert problem["kind"] == "stale-shape" and problem["tensor"] == "p1"
    assert (problem["declared"], problem["real"]) == ("[1,8,8,8]", "[1,8,16,16]")


def test_symbolic_batch_meant_static():
    report = diagnose(ir.from_proto(ex.symbolic_batch()), {"x": (4, 3, 8, 8)})
    problem, baked = report["problems"]
    assert problem["kind"] == "static-symbol" and problem["symbol"] == "s77"
    assert "fails at s77=2 (it runs at 4)" in problem["message"]
    assert "freeze IN OUT --shape x=4x3x8x8" in problem["message"]
    assert baked == {"kind": "batch-constant", "message": (
        "1 shape constant(s) hold the batch 4: Reshape 'flatten_baked' [4, -1]; the batch is declared dynamic "
        "('s77') but the model is right at 4 only; fix: python -m surgery set-batch IN OUT --batch dynamic "
        "--probe x=4x3x8x8")}


def test_batch_baked_in_a_static_model_is_a_note():
    report = diagnose(ir.from_proto(ex.batch_baked_ops()), {})
    assert report["problems"] == []
    (note,) = [n for n in report["notes"] if n["kind"] == "batch-constant"]
    assert note["message"].startswith("6 shape constant(s) hold the batch 1: Resize 'upsample' [1, 4, 16, 16], "
                                      "Slice 'keep' [1], Expand 'bias' [1, 2, 16, 16], +3 more; right at this batch only")


def test_nonzero_is_classified_data_dependent():
    report = diagnose(ir.from_proto(ex.nonzero_model()), {})
    assert report["problems"] == []
    assert report["sizes"]["nodes"]["data-dependent"] == [
        {"node": "NonZero 'where'", "because": ["its output size depends on the data"]}]
    assert report["sizes"]["outputs"]["positives"]["kind"] == "data-dependent"
    assert report["sizes"]["outputs"]["row_sum"]["kind"] == "inferable"
    assert [i["node"] for i in report["sizes"]["nodes"]["inferable"]] == ["Reshape 'row_sum'"]
    assert any(n["kind"] == "data-dependent" and "NonZero 'where'" in n["message"] for n in report["notes"])


def test_grid_model_reports_baked_constants():
    # it runs at its export grid and, thanks to the baked Slice, at another grid too: silently wrong
    report = diagnose(ir.from_proto(ex.baked_merger()), {}, Grid(((1, 22, 30),)))
    assert _kinds(report) == ["grid-constant"] * 8
    assert report["probe"] == {"pixel_values": [660, 8], "grid_thw": [1, 3]}


@pytest.mark.parametrize("name, proto, probe, code", [
    ("naive", ex.naive_batch_rewrite(ex.fpn()), ["--probe", "images=32x3x64x64"], 1),
    ("clean", ex.fpn(), [], 0),
    ("nonzero", ex.nonzero_model(), [], 0),
    ("dynamic-encoder", ex.dynamic_encoder(), [], 0),
])
def test_doctor_cli_exit_status_and_json(tmp_path, capsys, name, proto, probe, code):
    path = tmp_path / f"{name}.onnx"
    onnx.save(proto, path)
    assert main(["doctor", str(path), *probe, "--json"]) == code
    report = json.loads(capsys.readouterr().out)
    assert bool(report["problems"]) == (code == 1)


def test_doctor_guesses_symbolic_image_sides_and_checks_claims_at_two_sizes(tmp_path, capsys):
    proto = ex.naive_batch_rewrite(ex.fpn())
    for dim in proto.graph.input[0].type.tensor_type.shape.dim[2:]:
        dim.dim_param = "?"
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    assert main(["doctor", str(path)]) == 1
    out = capsys.readouterr().out
    assert "running at images=1x3x640x640" in out
    assert "claims checked at 2 sizes: images=1x3x640x640 | images=1x3x320x320" in out
    assert ("output 'score_8' declares [?,4,64]: fails at images=1x3x640x640 (the tensor is [1,4,6400]: axis 2 64 "
            "but really 6400); images=1x3x320x320 (the tensor is [1,4,1600]: axis 2 64 but really 1600)") in out


def test_doctor_needs_a_probe_when_no_guess_runs(tmp_path, capsys):
    proto = ex.naive_batch_rewrite(ex.fpn())
    for dim in proto.graph.input[0].type.tensor_type.shape.dim[1:]:
        dim.dim_param = "?"  # channels symbolic too: not an image input it can guess for
    path = tmp_path / "m.onnx"
    onnx.save(proto, path)
    assert main(["doctor", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [(f"error: {path}: input 'images' has non-static dims [?,?,?,?]; say the size to run it at with "
                    "--probe images=1xSIZExSIZExSIZE")]  # the file it is about in front (core.errors.subject)
