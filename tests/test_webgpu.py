"""WebGPU (docs/webgpu.md): the tiny Qwen3-VL and Phi-4-multimodal packages with every variant (fp32, fp16, int8, q4,
q4f16) on ONNX Runtime's WebGPU execution provider (onnxruntime-webgpu on Mesa's lavapipe, `make webgpu`), through
`python -m runtime webgpu-check`: every validation layout (mixed-size packs and video included), finite and within
each variant's floor against the CPU EP's fp32, the nodes that fell back to the CPU reported. Controls: the check
fails where WebGPU computes wrong (lavapipe's default vector width, where ONNX Runtime's subgroup attention path is
wrong), and on non-finite or far outputs; a missing install is one line."""

import json
from pathlib import Path

import numpy as np
import pytest

from tests import builds
from tests.conftest import EVERY_VARIANT, every_variant_package, single_error
from vlm_vision_onnx.runtime import __main__ as runtime_cli
from vlm_vision_onnx.runtime import webgpu

HOME = Path(__file__).resolve().parents[1] / webgpu.DEFAULT_HOME
VARIANTS = ["fp32", "fp16", "int8", "q4", "q4f16"]
#: transformers.js on WebGPU against `python -m runtime embed` of the same variant: the variant's own floor against
#: fp32 (fp16 0.999, q4f16 0.98), which also covers the two processors' resize difference (0.9994-0.9999 on the
#: tiny fp32 package, docs/transformers-js.md).
NODE_FLOORS = {"fp16": 0.999, "q4f16": 0.98}


def installed_home() -> Path:
    """The WebGPU install `make test` made (`make webgpu`), else skip with the reason it recorded."""
    if (HOME / "unavailable").exists():
        pytest.skip(f"WebGPU stack not installed: {(HOME / 'unavailable').read_text().strip()}")
    if not (HOME / ".installed").exists():
        pytest.skip(f"WebGPU stack not installed at {HOME}: `make webgpu` (which `make test` runs) installs it")
    return HOME


@pytest.fixture(scope="module", params=["qwen3-vl", "phi-4-mm"])
def checked(request) -> dict:
    """`webgpu-check --json`'s report of one family's every-variant package (a build, `builds.webgpu_check`: made
    on lavapipe once per package, runtime and install)."""
    home = installed_home()
    recipe = builds.webgpu_check(every_variant_package(request.param), EVERY_VARIANT[request.param][0], home)
    return json.loads((builds.path(recipe) / "report.json").read_text())


def test_every_variant_runs_on_webgpu_within_its_floor(checked):
    assert [v["variant"] for v in checked["variants"]] == VARIANTS
    if checked["family"] == "qwen3-vl":  # the layouts where traced graphs and Loops go wrong
        assert len(checked["cases"]) == 14
        assert {"pack 448x448 + 336x336", "video t=2 256x256", "pack image + video t=2 + image"} <= set(checked["cases"])
    for result in checked["variants"]:
        assert result["providers"][0] == "WebGpuExecutionProvider"
        assert result["ok"], (result["file"], result.get("error"), result.get("problems"))
        assert result["finite"] and result["min_token_cosine"] >= result["floor"]
        assert [c["case"] for c in result["cases"]] == checked["cases"]
    assert all(c["ok"] for c in checked["attention_canary"].values()), checked["attention_canary"]
    assert checked["ok"]
    floors = {v["variant"]: v["floor"] for v in checked["variants"]}
    assert floors["fp32"] == webgpu.FP32_FLOOR and floors["fp16"] >= 0.999 and floors["q4f16"] >= 0.98


def test_the_attention_and_the_4_bit_matmuls_run_on_webgpu(checked):
    """What falls back is reported per variant; the compute that matters stays on the GPU EP. The int8 variant's
    dynamic quantization has no WebGPU kernel: reported as on the CPU."""
    for result in checked["variants"]:
        on_cpu = set(result["on_cpu"])
        assert "com.microsoft.MultiHeadAttention" not in on_cpu and "com.microsoft.MatMulNBits" not in on_cpu
        assert sum(result["on_cpu"].values()) == len(result["on_cpu_nodes"])
        if result["variant"] == "int8":
            assert {"MatMulInteger", "DynamicQuantizeLinear"} <= on_cpu
    if checked["family"] == "qwen3-vl":  # the segment Loop's body (its attention) runs on WebGPU
        fp16 = next(v for v in checked["variants"] if v["variant"] == "fp16")
        assert "MatMul" not in fp16["on_cpu"]


def test_wrong_webgpu_attention_fails_the_canary(monkeypatch, tmp_path):
    """Control: at lavapipe's default vector width (subgroups of 8) ONNX Runtime's WebGPU attention takes its
    subgroup path, which computes wrong there: the canary must say so. (The tiny random-weight package attends almost
    uniformly and would hide it: `LP_NATIVE_VECTOR_WIDTH=256 python -m runtime webgpu-check dist/qwen3-vl-tiny
    --variant fp32` passes its fp32 variant and fails on the canary; docs/webgpu.md.)"""
    home = installed_home()
    monkeypatch.setenv("LP_NATIVE_VECTOR_WIDTH", "256")
    canary = webgpu.attention_canary(home, tmp_path, 600, dtypes=("float32",))
    assert not canary["float32"]["ok"]
    assert min(canary["float32"]["max_abs"].values()) > 100 * webgpu.CANARY_TOLERANCE["float32"]


def cpu_worker(home: Path, model: Path, inputs: Path, out: Path, timeout: float) -> dict:
    """`webgpu.run_worker`'s stand-in where the test is the check's own logic, not the GPU: the worker's code
    (runtime/webgpu_worker.py) run in this process on ONNX Runtime's CPU EP, its JSON record returned."""
    import contextlib
    import importlib.util
    import io

    spec = importlib.util.spec_from_file_location("webgpu_worker_on_cpu", webgpu.WORKER)
    worker = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(worker)
    worker.PROVIDERS = ["CPUExecutionProvider"]
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert worker.main([str(model), str(inputs), str(out)]) == 0
    return json.loads(printed.getvalue().splitlines()[-1])


def test_a_failing_canary_fails_the_check(every_variant_packages, monkeypatch, capsys):
    """The canary's verdict reaches the exit code and the one line, even when every variant passes (the variant run
    by the worker's code on the CPU EP: the verdict's path is under test here, lavapipe is in the report tests)."""
    home = installed_home()
    wrong = {"float32": {"ok": False, "max_abs": {16: 0.43}, "tolerance": 1e-4, "on_cpu": {}}}
    monkeypatch.setattr(webgpu, "attention_canary", lambda *args, **kwargs: wrong)
    monkeypatch.setattr(webgpu, "run_worker", cpu_worker)
    capsys.readouterr()
    assert runtime_cli.main(["webgpu-check", str(every_variant_packages["phi-4-mm"]), "--webgpu", str(home),
                             "--variant", "fp32", "--threads", "1"]) == 1
    assert "the float32 attention canary" in single_error(capsys.readouterr().err)


def test_check_variant_flags_nonfinite_and_far_outputs(tmp_path):
    """Without a GPU: the comparison itself, on outputs written as the worker writes them."""
    ref = np.random.default_rng(0).standard_normal((6, 8)).astype(np.float32)
    bad = ref.copy()
    bad[2, 3] = np.nan
    np.savez(tmp_path / "case_0.npz", out=bad)
    np.savez(tmp_path / "case_1.npz", out=-ref)
    record = {"providers": ["WebGpuExecutionProvider"], "on_cpu": [], "load_s": 0.0, "warm_s": [],
              "cases": [{"case": "case_0.npz", "seconds": 0.1}, {"case": "case_1.npz", "seconds": 0.1}]}
    variant = {"name": "fp16", "file": "onnx/vision_encoder_fp16.onnx", "quantization": {"min_cosine": 0.999},
               "accuracy_vs_fp32": {"min_token_cosine": 0.99995}}
    result = webgpu.check_variant(variant, record, ["out"], [[ref], [ref]], ["a", "b"], tmp_path)
    assert not result["ok"] and not result["finite"]
    assert result["problems"] == ["a: non-finite outputs", "b: min per-token cosine -1.00000 < 0.999"]
    assert webgpu.floor({"name": "q4", "accuracy_vs_fp32": {"min_token_cosine": 0.98289}}) == 0.982


def test_cli_json_report_and_missing_install(every_variant_packages, tmp_path, monkeypatch, capsys):
    """The command's options and refusals; its variant runs through the worker's code on the CPU EP (`cpu_worker`):
    the real lavapipe runs of every variant through this same command with --json are the cached reports that
    `checked` reads."""
    package = every_variant_packages["phi-4-mm"]
    assert runtime_cli.main(["webgpu-check", str(package), "--webgpu", str(tmp_path / "none")]) == 2
    line = single_error(capsys.readouterr().err)
    assert "no WebGPU install at" in line and "make webgpu" in line
    home = installed_home()
    monkeypatch.setattr(webgpu, "run_worker", cpu_worker)
    out = tmp_path / "webgpu.json"
    assert runtime_cli.main(["webgpu-check", str(package), "--webgpu", str(home), "--variant", "int8",
                             "--json", str(out), "--threads", "1"]) == 0
    assert "1 variant(s) on WebGPU" in capsys.readouterr().out
    report = json.loads(out.read_text())
    assert report["ok"] and [v["variant"] for v in report["variants"]] == ["int8"]
    other = tmp_path / "notes.json"
    other.write_text('{"mine": 1}\n')
    assert runtime_cli.main(["webgpu-check", str(package), "--webgpu", str(home), "--json", str(other)]) == 2
    assert "exists and was not written by this tool" in single_error(capsys.readouterr().err)
    assert other.read_text() == '{"mine": 1}\n'
    assert runtime_cli.main(["webgpu-check", str(package), "--webgpu", str(home), "--variant", "q8"]) == 2
    assert "--variant q8: the package has fp32, fp16, int8, q4, q4f16" in single_error(capsys.readouterr().err)


def test_transformers_js_in_node_on_webgpu(every_variant_packages, transformers_js_node, tmp_path):
    """transformers.js's own image processor and onnxruntime-node's WebGPU EP (what transformers.js runs for
    `device: 'webgpu'` in Node) embed real photos with the fp16 and q4f16 encoders on lavapipe; the grids and
    features agree with `python -m runtime embed` (CPU EP, same variant) within the variant's floor."""
    from bench import transformers_js as bench_transformers_js
    from tools import transformers_js

    home = installed_home()
    package = every_variant_packages["qwen3-vl"]
    photos = transformers_js.write_photos(tmp_path)
    calls = {"astronaut_300x220": [photos["astronaut_300x220"]],
             "astronaut_300x220 + chelsea": [photos["astronaut_300x220"], photos["chelsea"]]}
    variants = {"fp16": "vision_encoder_fp16.onnx", "q4f16": "vision_encoder_q4f16.onnx"}
    records = transformers_js.compare(package, variants, calls, tmp_path, transformers_js_node, webgpu=home)
    print("\n" + bench_transformers_js.markdown({"package": str(package), "created": "test (WebGPU, lavapipe)",
                                                 "transformers_js": "4.3.1", "machine": {"cpu": "this machine"},
                                                 "records": records}))
    assert len(records) == 4
    for record in records:
        assert record["same_grid"], record
        assert record["min_token_cosine"] >= NODE_FLOORS[record["variant"]], record
