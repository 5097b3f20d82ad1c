"""The q4f16 stage (`python -m quantize q4f16`): the INT4 variant's weights under float16 activations, finite and
within the INT4 floor (0.98) of fp32 at every validation layout, on random weights and on the outlier-stress copy;
the same 4-bit weights as the int4 stage; refusals; the package's `_q4f16` variant, checked by `runtime verify`."""

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, numpy_helper

from quantize import __main__ as cli
from quantize import q4f16
from tests.conftest import single_error
from vlm_vision_onnx.runtime import __main__ as runtime_cli

RUNS = ("validation", "cpu_execution_provider")


@pytest.fixture(scope="module", params=["qwen3-vl", "phi-4-mm"])
def built(request, every_variant_builds, every_variant_packages):
    """({stage: folder}, package folder) of one family's every-variant tiny build and package."""
    return every_variant_builds[request.param], every_variant_packages[request.param]


def test_every_layout_finite_and_within_the_int4_floor(built):
    build, _ = built
    report = json.loads((build["q4f16"] / "report.json").read_text())
    layouts = [c["case"] for c in json.loads((build["optimized"] / "report.json").read_text())["validation"]["cases"]]
    stress = report["outlier_stress"]
    runs = [report[k] for k in RUNS] + [stress["validation"], stress["cpu_execution_provider"]]
    assert report["stage"] == "q4f16" and report["finite"] and stress["mode"] == "exclude"
    for run in runs:
        assert [c["case"] for c in run["cases"]] == layouts
        assert run["finite"] and run["min_token_cosine"] >= q4f16.DEFAULT_MIN_COSINE
    assert report["config"]["weights"]["from"] == str(build["int4"])  # the builds give --int4


def test_int4_weights_float16_activations(built):
    """Every MatMulNBits of int4 is there with the same packed weights; its activations and scales are float16;
    the I/O contract is fp32's."""
    build, _ = built
    model = onnx.load(str(build["q4f16"] / "model.onnx"))
    int4 = onnx.load(str(build["int4"] / "model.onnx"))
    weights = {t.name: t for t in model.graph.initializer}
    typed = {v.name: v.type.tensor_type.elem_type for v in model.graph.value_info}
    nbits = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    int4_nbits = {n.name: n for n in int4.graph.node if n.op_type == "MatMulNBits"}
    assert sorted(n.name for n in nbits) == sorted(int4_nbits)
    int4_weights = {t.name: t for t in int4.graph.initializer}
    for node in nbits:
        packed, scales = node.input[1], node.input[2]
        assert np.array_equal(numpy_helper.to_array(weights[packed]),
                              numpy_helper.to_array(int4_weights[int4_nbits[node.name].input[1]]))
        assert weights[scales].data_type == TensorProto.FLOAT16
        assert typed.get(node.input[0]) == TensorProto.FLOAT16, node.name
    io = [(v.name, v.type.tensor_type.elem_type) for v in list(model.graph.input) + list(model.graph.output)]
    assert io == [(v.name, v.type.tensor_type.elem_type) for v in list(int4.graph.input) + list(int4.graph.output)]


def test_package_ships_q4f16_and_verify_runs_it(built, tmp_path, capsys):
    _, package = built
    config = json.loads((package / "config.json").read_text())
    assert config["onnx_variants"]["q4f16"] == "onnx/vision_encoder_q4f16.onnx"
    manifest = json.loads((package / "manifest.json").read_text())
    assert [v["name"] for v in manifest["variants"]] == ["fp32", "fp16", "int8", "q4", "q4f16"]
    card = (package / "README.md").read_text()
    assert "## WebGPU" in card and "The `fp16` and `q4f16` variants are made for WebGPU" in card
    assert f"python -m runtime webgpu-check {package.name}" in card
    capsys.readouterr()
    assert runtime_cli.main(["verify", str(package), "--threads", "1"]) == 0
    assert "onnx/vision_encoder_q4f16.onnx: runs at" in capsys.readouterr().err


def test_without_int4_it_reads_the_sibling_stage(every_variant_builds, tmp_path):
    """`make export FP16=1` gives no --int4: the stage takes build/MODEL/int4 beside its input."""
    build = every_variant_builds["qwen3-vl"]
    for stage in ("optimized", "int4"):
        shutil.copytree(build[stage], tmp_path / "build" / stage)
    assert cli.main(["q4f16", str(tmp_path / "build/optimized"), str(tmp_path / "build/q4f16"), "--threads", "1"]) == 0
    report = json.loads((tmp_path / "build/q4f16/report.json").read_text())
    assert report["config"]["weights"]["from"] == str(tmp_path / "build/int4")
    assert (tmp_path / "build/q4f16/model.onnx").read_bytes() == (build["q4f16"] / "model.onnx").read_bytes()


def test_refused_without_an_int4_stage(every_variant_builds, tmp_path, capsys):
    build = every_variant_builds["qwen3-vl"]
    lone = tmp_path / "build" / "optimized"
    shutil.copytree(build["optimized"], lone)
    capsys.readouterr()
    assert cli.main(["q4f16", str(lone), str(tmp_path / "build/q4f16")]) == 2
    line = single_error(capsys.readouterr().err)
    assert "no int4 stage report at" in line and "python -m quantize int4" in line and "--int4" in line
    assert not (tmp_path / "build/q4f16").exists()
    assert cli.main(["q4f16", str(lone), str(tmp_path / "out"), "--int4", str(build["fp16"])]) == 2
    assert "not int4's" in single_error(capsys.readouterr().err)
