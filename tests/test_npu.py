"""Static exports on Qualcomm's HTP (the QNN EP's simulator on x86): `quantize qnn`, `quantize fp16` and
`runtime npu-check` on conftest's `tiny_static` models, and the dynamic export refused (why static exists).

Skips with the reason where onnxruntime-qnn cannot be installed or its HTP backend does not load.
"""

import json

import onnx
import pytest

from tests import builds
from tests.conftest import single_error
from vlm_vision_onnx.runtime import npu

REASON = npu.unavailable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"QNN EP HTP backend unavailable: {REASON}")


@pytest.fixture(scope="module")
def variants() -> dict:
    """{"qdq": Qwen3-VL 64x64 through quantize qnn, "fp16": Qwen2.5-VL 196x140 (windows cut at both edges) through
    quantize fp16}. The QDQ model is the smallest: the simulator runs uint16 activations about 15x slower than fp16.
    Read-only."""
    return {"qdq": builds.path(builds.stage(builds.export("qwen3-vl-tiny", "--static", "64x64"), "qnn")),
            "fp16": builds.path(builds.stage(builds.export("qwen2.5-vl-tiny", "--static", "196x140"), "fp16",
                                             "--outliers", "off"))}


def npu_check(args, capsys) -> tuple[int, str, str]:
    from vlm_vision_onnx.runtime import __main__ as runtime_cli

    code = runtime_cli.main(["npu-check", *map(str, args)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_qnn_stage_is_a16w8_and_within_its_floor(variants):
    report = json.loads((variants["qdq"] / "report.json").read_text())
    assert report["config"]["activations"] == "QUInt16" and report["config"]["weights"] == "QInt8"
    assert report["validation"]["photos"]["finite"]
    assert report["min_token_cosine"] >= npu.FLOORS["qdq"]
    assert not set(report["config"]["calibration_photos"]) & set(npu.PHOTOS)  # checked on photos it never saw
    proto = onnx.load(str(variants["qdq"] / "model.onnx"))
    assert {"QuantizeLinear", "DequantizeLinear"} <= {n.op_type for n in proto.graph.node}


@pytest.mark.parametrize("which", ["fp32", "fp16", "qdq"])
def test_npu_check_every_node_on_the_htp(tiny_static, variants, tmp_path, capsys, which):
    model = tiny_static["qwen3-vl-tiny", "96x64"] if which == "fp32" else variants[which]
    report, context = tmp_path / "npu.json", tmp_path / "context"
    code, out, err = npu_check([model, "--json", report, "--context-dir", context], capsys)
    assert code == 0, err
    assert "every node on the HTP" in out
    (record,) = json.loads(report.read_text())["npu_check"]
    assert record["ok"] and record["finite"]
    assert record["precision"] == ("qdq" if which == "qdq" else "fp16")
    assert record["min_token_cosine"] >= record["floor"] == npu.FLOORS[record["precision"]]
    if which != "fp32":  # a variant is compared with the fp32 model it was made from
        assert record["reference"] != record["file"]
    assert (context / record["context"]["model"]).is_file()
    assert all((context / name).stat().st_size > 0 for name in record["context"]["binaries"])
    assert record["context_load_s"] >= 0 and record["htp_run_s"] > 0  # the photos ran on the binary loaded back


def test_npu_check_refuses_the_dynamic_export(tiny_exports, capsys):
    code, _, err = npu_check([tiny_exports["torchscript"]], capsys)
    assert code == 1
    line = single_error(err)
    assert "the QNN EP refused node" in line and "the graph is not static" in line and "--static" in line


def test_qnn_stage_refuses_a_dynamic_export(tiny_exports, tmp_path, capsys):
    from quantize import __main__ as quantize_cli

    out = tmp_path / "qnn"
    assert quantize_cli.main(["qnn", str(tiny_exports["torchscript"]), str(out)]) == 2
    assert "not a static export" in single_error(capsys.readouterr().err)
    assert not out.exists()


def test_npu_check_of_a_file_ort_cannot_load_is_one_line(tmp_path, capsys):
    """Found by tools/fuzz: ONNX Runtime's InvalidGraph escaped `npu-check` as a traceback."""
    import onnx

    source = builds.path(builds.export("qwen3-vl-tiny", "--static", "64x64")) / "model.onnx"
    model = onnx.load(str(source))
    node = next(n for n in model.graph.node if n.op_type == "Mul")
    node.op_type = "Loop"  # a Loop without its body: ORT refuses the graph
    onnx.save(model, str(tmp_path / "model.onnx"))
    code, _, err = npu_check([tmp_path / "model.onnx"], capsys)
    assert code == 2 and "ONNX Runtime cannot load" in single_error(err)
