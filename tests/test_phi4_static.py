"""Phi-4-multimodal `--static WIDTHxHEIGHT`: one image of that size, its crop layout the model's constants
(builders/phi4_mm/static_model.py). Static by the NPU rule, equal to the eager model and to the dynamic export at
that layout; a video refused; its A16W8 QDQ and fp16 forms run with every node on Qualcomm's HTP (simulator; skipped
with the reason where the QNN EP is unavailable)."""

import json

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from tests import builds
from tests.conftest import export_phi4_tiny, single_error
from vlm_vision_onnx.core import static_graph
from vlm_vision_onnx.core.parity import compare
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.families.phi4_mm import layouts
from vlm_vision_onnx.runtime import npu

SIZE, IMAGE = "600x250", [[250, 600]]  # 1 x 2 HD crops + the global one; 27 of 32 patch rows real
STATIC = builds.export("phi-4-mm-tiny", "--static", SIZE)
STATIC_QNN = builds.stage(STATIC, "qnn")
STATIC_FP16 = builds.stage(STATIC, "fp16", "--outliers", "off")


@pytest.fixture(scope="module")
def static():
    """`builders.vision --static 600x250` of the tiny config (builds.export). Read-only."""
    return builds.path(STATIC)


def _full_inputs(seed: int) -> dict[str, np.ndarray]:
    return layouts.pack(IMAGE, np.random.default_rng(seed))


def test_static_by_the_rule_with_the_layout_as_constants(static):
    proto = onnx.load(str(static / "model.onnx"))
    assert static_graph.problems(proto) == []
    assert [(i.name, [d.dim_value for d in i.type.tensor_type.shape.dim]) for i in proto.graph.input] == [
        ("pixel_values", [1, 3, 3, 448, 448])]
    metadata = {p.key: p.value for p in proto.metadata_props}
    assert json.loads(metadata["static_image_sizes"]) == IMAGE and metadata["static_num_crops"] == "3"
    assert metadata["static_size"] == SIZE and json.loads(metadata["static_inputs"]) == ["pixel_values"]
    report = json.loads((static / "report.json").read_text())
    assert report["validation"]["passed"] and len(report["validation"]["cases"]) == 2


def test_equal_to_eager_and_to_the_dynamic_export(static):
    """Pixels the export never saw (seed 7): the static model against the eager embedding (the export's weights,
    seed 0) and against the dynamic export of the same weights fed the layout's mask and sizes."""
    from builders.phi4_mm.model import reference_outputs

    _, embed, dynamic = export_phi4_tiny()
    inputs = _full_inputs(7)
    got = open_session(static / "model.onnx").run(None, {"pixel_values": inputs["pixel_values"]})[0]
    tolerance = json.loads((static / "report.json").read_text())["tolerance"]
    assert compare(got, reference_outputs(embed, inputs)[0], tolerance)["ok"]
    want = ort.InferenceSession(dynamic.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)[0]
    assert got.shape == want.shape and compare(got, want, 1e-4)["ok"]


def test_a_video_size_is_refused(tmp_path, capsys):
    from builders import vision

    out = tmp_path / "out"
    assert vision.main(["--model", "phi-4-mm-tiny", "--static", "2x448x448", "--out", str(out)]) == 2
    assert "takes no video" in single_error(capsys.readouterr().err)
    assert not out.exists()


needs_qnn = pytest.mark.skipif(npu.unavailable() is not None,
                               reason=f"QNN EP HTP backend unavailable: {npu.unavailable()}")


@pytest.fixture(scope="module")
def static_qnn():
    """The static model's A16W8 QDQ form (`quantize qnn`). Its biases, all zeros with random weights, are one shared
    tensor in the export: the stage gives each reader its own copy, else the HTP refuses the model. Read-only."""
    return builds.path(STATIC_QNN)


@needs_qnn
@pytest.mark.parametrize("stage", ["qnn", "fp16"])
def test_every_node_on_the_htp(static_qnn, tmp_path, capsys, stage):
    """quantize qnn and quantize fp16 (`--outliers off`) of the static export (builds.stage), then npu-check."""
    from vlm_vision_onnx.runtime import __main__ as runtime_cli

    variant = static_qnn if stage == "qnn" else builds.path(STATIC_FP16)
    report = tmp_path / "npu.json"
    code = runtime_cli.main(["npu-check", str(variant), "--json", str(report), "--context-dir", str(tmp_path / "ctx")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "every node on the HTP" in out
    (record,) = json.loads(report.read_text())["npu_check"]
    assert record["ok"] and record["finite"] and record["static_size"] == SIZE


# --- in a package (docs/npu.md "In a package") ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def phi_dist():
    """dist/phi-4-mm-tiny/ of a build with the dynamic export and the static-600x250/{export, qnn} bucket, made by
    `release package` (builds.package). Read-only."""
    stages = {"export": builds.PHI4_MM, f"static-{SIZE}/export": STATIC, f"static-{SIZE}/qnn": STATIC_QNN}
    return builds.path(builds.package("phi-4-mm-tiny", stages)) / "phi-4-mm-tiny"


def test_a_package_ships_and_verifies_the_phi4_bucket(phi_dist, capsys):
    """The bucket records its crop layout under the names `runtime embed` writes (image_size: the HD canvas, 1 x 2
    crops of 448; num_crops with the global one), and `runtime verify` runs each file at its size."""
    from vlm_vision_onnx.runtime import __main__ as runtime_cli
    from vlm_vision_onnx.runtime import buckets

    config = json.loads((phi_dist / "config.json").read_text())
    assert config[buckets.KEY] == [
        {"size": [600, 250], "image_size": [448, 896], "num_crops": 3,
         "files": {"fp32": f"onnx/vision_encoder_static_{SIZE}.onnx", "qdq": f"onnx/vision_encoder_static_{SIZE}_qdq.onnx"}}]
    (bucket,) = buckets.read(json.loads((phi_dist / "manifest.json").read_text()))
    assert bucket.layout == {"image_size": [448, 896], "num_crops": 3}
    assert "| 600x250 | HD 448x896, 3 crops | qdq |" in (phi_dist / "README.md").read_text()
    capsys.readouterr()
    code = runtime_cli.main(["verify", str(phi_dist), "--threads", "1"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "1 static bucket(s): all checks passed" in captured.out
    assert f"static bucket {SIZE} (fp32, qdq): runs at its size" in captured.err


@needs_qnn
def test_embed_qnn_runs_a_phi4_bucket(phi_dist, tmp_path, capsys):
    """A photo (chelsea, 451x300) through `runtime embed --engine qnn` on the HTP: the bucket's layout facts and the
    features of the QDQ file, at its floor against the CPU EP's run of the fp32 file on the same resized pixels."""
    from PIL import Image

    from vlm_vision_onnx.core import onnx_io, session
    from vlm_vision_onnx.core.parity import min_token_cosine
    from vlm_vision_onnx.families.phi4_mm import static_inputs
    from vlm_vision_onnx.runtime import __main__ as runtime_cli

    skimage_data = pytest.importorskip("skimage.data")
    rgb = skimage_data.chelsea()
    photo, out = tmp_path / "chelsea.png", tmp_path / "emb.npz"
    Image.fromarray(rgb).save(photo)
    capsys.readouterr()
    code = runtime_cli.main(["embed", str(photo), "--package", str(phi_dist), "--engine", "qnn", "--out", str(out),
                             "--no-context-cache"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert f"{SIZE} for image_0" in captured.err
    assert "(HD 448x896, 3 crops, bucket 600x250) -> image_features" in captured.out
    fp32 = phi_dist / f"onnx/vision_encoder_static_{SIZE}.onnx"
    want = session.run(session.open_session(fp32, 1),
                       {"pixel_values": static_inputs.pixels(rgb, onnx_io.metadata(fp32))})["image_features"]
    with np.load(out) as data:
        assert data["image_0.image_size"].tolist() == [448, 896] and int(data["image_0.num_crops"]) == 3
        assert data["image_0.bucket"].tolist() == [600, 250]
        got = data["image_0.image_features"]
    assert got.shape == want.shape
    assert min_token_cosine(got, want) >= npu.FLOORS["qdq"]
