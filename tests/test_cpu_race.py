"""bench.cpu_race's default path per case: what `runtime embed` runs at each case's image size (runtime.path_choice
with the stage reports' measured sizes), and the table's bold cells."""

from pathlib import Path

import numpy as np

from bench import cpu_race
from tests import builds
from tests.support import QWEN
from vlm_vision_onnx.core.parity import min_token_cosine
from vlm_vision_onnx.runtime import __main__ as runtime_cli
from vlm_vision_onnx.runtime import path_choice


def test_the_default_path_follows_the_image_size(tmp_path, monkeypatch):
    """The tiny Qwen3-VL build's int8 (above the floor, its gates measured up to 1024^2): the default at 448^2, not
    at 2048^2, where the line says why. The CPU class is pinned to one whose ranking is ONNX Runtime INT8 alone."""
    from vlm_vision_onnx.families import family

    build = builds.assemble(builds.every_variant(builds.QWEN3_VL), tmp_path / "qwen3-vl-tiny")
    monkeypatch.setattr(path_choice, "cpu_class", lambda: path_choice.AVX2)
    qwen = family("qwen3-vl")
    feeds = {f"{side}x{side}": {"grid_thw": np.array([[1, side // 16, side // 16]]),
                                "pixel_values": np.zeros((1, 1536), np.float32)} for side in (448, 2048)}
    assert qwen.case_layout(feeds["448x448"])["grid_thw"] == [[1, 28, 28]]
    defaults = cpu_race.default_paths(build, feeds)
    assert defaults["448x448"][0] == "ORT INT8", defaults
    assert defaults["2048x2048"][0] == "ORT fp32", defaults
    assert "int8 measured on images up to 1,048,576 pixels, this call's largest image has 4,194,304" \
        in defaults["2048x2048"][1]


def test_the_table_bolds_the_default_of_each_case():
    cell = {"median_s": 1.0, "min_token_cosine": 0.999, "tflops": 0.5}
    run = {"peaks_tflops": {"clock_mhz": 2000.0, "fp32": 0.26, "amx_bf16": None, "amx_int8": None},
           "cases": {"448x448": {"OV INT8": cell, "OV bf16": cell}, "2048x2048": {"OV INT8": cell, "OV bf16": cell}},
           "peak_rss_mib": {"OV INT8": 1, "OV bf16": 2}}
    result = {"model": "m", "command": "c", "machine": {"cpu": "x", "cores": 2, "memory_gib": 24}, "cpu_flags": [], "started": "s", "finished": "f",
              "defaults": {"448x448": ("OV INT8", "path: a"), "2048x2048": ("OV bf16", "path: b")},
              "runs": {"2": run}}
    rows = {line.split(" | ")[0]: line for line in cpu_race.markdown(result).splitlines() if line.startswith("| OV")}
    assert rows["| OV INT8"].count("**") == 2 and rows["| OV INT8"].index("**") < rows["| OV INT8"].index(" | 1.000 s")
    assert rows["| OV bf16"].count("**") == 2 and rows["| OV bf16"].rindex("**") > rows["| OV bf16"].index(" | 1.000 s")


def test_the_process_race_names_every_other_ranked_path(every_variant_packages, monkeypatch):
    """On an AMX CPU (the tiny package ships no ov-int8: OpenVINO bf16 on fp32 first) the process race names every
    other ranked path beside the default of its call, 4 photos: at 1024^2 OpenVINO bf16, so ONNX Runtime INT8 and
    OpenVINO f32; at 448^2, too small a call for OpenVINO's compile to pay off, ONNX Runtime INT8, so the two
    OpenVINO paths. On an AVX2 CPU, whose ranking is ONNX Runtime INT8 alone (the default at 448^2), nothing at
    448^2 and INT8 at 2048^2, where the default is fp32 (int8 measured up to 1024^2)."""
    import json

    manifest = json.loads((every_variant_packages["qwen3-vl"] / "manifest.json").read_text())
    monkeypatch.setattr(path_choice.openvino_session, "available", lambda: True)
    monkeypatch.setattr(path_choice.openvino_session, "bf16_supported", lambda: True)
    monkeypatch.setattr(path_choice, "cpu_class", lambda: path_choice.AMX)
    assert path_choice.choose(manifest, largest=path_choice.Largest(448 * 448)).path == \
        path_choice.Path("openvino", "fp32", "bf16")
    assert cpu_race.embed_also(manifest, 1024) == [("--engine", "onnxruntime", "--variant", "int8"),
                                                    ("--engine", "openvino", "--variant", "fp32", "--precision", "f32")]
    assert cpu_race.embed_also(manifest, 448) == [("--engine", "openvino", "--variant", "fp32", "--precision", "bf16"),
                                                   ("--engine", "openvino", "--variant", "fp32", "--precision", "f32")]
    monkeypatch.setattr(path_choice, "cpu_class", lambda: path_choice.AVX2)
    assert cpu_race.embed_also(manifest, 448) == []
    assert cpu_race.embed_also(manifest, 2048) == [("--engine", "onnxruntime", "--variant", "int8")]


def test_the_pytorch_process_prints_its_stages(tmp_path, qwen_dist):
    """`bench.cpu_race_torch embed` (the race's PyTorch process) prints each stage's wall time in the form
    `cpu_race.stages` reads: import, load, preprocess, forward. Run on the tiny Qwen3-VL config with its random
    weights; the stage table puts the rest (the wall time less the stages) beside them. Its `reference` (the
    race's accuracy reference, fp32) writes the outputs under `runtime embed`'s names: the tiny package's export of
    the same weights embeds the photo to the same features."""
    import subprocess
    import sys

    from PIL import Image

    from vlm_vision_onnx.families.qwen_vl import processor_files

    weights, photo = tmp_path / "w.safetensors", tmp_path / "p.png"
    Image.fromarray(np.full((64, 64, 3), 128, np.uint8)).save(photo)
    processor_files.save_config(tmp_path)  # Qwen3-VL's processor, as a package holds it
    run = lambda *args: subprocess.run([sys.executable, "-m", "bench.cpu_race_torch", *map(str, args)], check=True,
                                       capture_output=True, text=True, cwd=cpu_race.ROOT)
    run("save", "qwen3-vl-tiny", 0, weights)
    err = run("embed", "qwen3-vl-tiny", weights, tmp_path, 1, photo).stderr
    stages = cpu_race.stages(err)
    assert list(stages) == ["import", "load", "preprocess", "forward"], err
    e = {"median_s": {"PyTorch bf16 process": 10.0}, "stages_s": {"PyTorch bf16 process": stages}}
    row = next(line for line in cpu_race.stage_table(e) if line.startswith("| PyTorch"))
    assert row.endswith(f"| {10.0 - sum(stages.values()):.2f} |"), row

    run("reference", "qwen3-vl-tiny", weights, tmp_path, tmp_path / "fp32.npz", photo)
    runtime_cli.main(["embed", str(photo), "--package", str(qwen_dist / QWEN), "--out", str(tmp_path / "e.npz"),
                      "--engine", "onnxruntime", "--threads", "1"])
    with np.load(tmp_path / "fp32.npz") as fp32, np.load(tmp_path / "e.npz") as embedded:
        assert sorted(fp32.files) == sorted(k for k in embedded.files if embedded[k].dtype.kind == "f")
        assert min(min_token_cosine(embedded[k], fp32[k]) for k in fp32.files) > 0.99999


def test_the_process_race_says_which_venv_ran_each_command(tmp_path):
    """`--venvs readme,runtime`: the README's .venv runs `python -m runtime` from the checkout, a `.[runtime]` venv
    (`--runtime-python`) `python -m vlm_vision_onnx.runtime` outside it; the table names the venv of every row and
    the ratio of each."""
    found = cpu_race.runtime_commands(["readme", "runtime"], tmp_path, Path("/venv/bin/python"))
    assert found == {cpu_race.VENVS["readme"]: ([str(cpu_race.ROOT / ".venv/bin/python"), "-m", "runtime"],
                                                cpu_race.ROOT),
                     cpu_race.VENVS["runtime"]: (["/venv/bin/python", "-m", "vlm_vision_onnx.runtime"], tmp_path)}
    readme, runtime = (f"runtime embed (default path) in {v}" for v in found)
    e = {"size": 448, "photos": ["a"] * 4, "threads": 2, "path_line": "path: x",
         "runtimes": {venv: " ".join(prefix) for venv, (prefix, _) in found.items()},
         "median_s": {readme: 5.0, runtime: 4.0, "PyTorch bf16 process": 10.0},
         "times_s": {readme: [5.0], runtime: [4.0], "PyTorch bf16 process": [10.0]},
         "speedup_vs_torch_bf16": {venv: ratio for venv, ratio in zip(found, (2.0, 2.5))}}
    result = {"model": "m", "command": "c", "machine": {"cpu": "x", "cores": 2, "memory_gib": 24}, "cpu_flags": [],
              "started": "s", "finished": "f", "defaults": {}, "runs": {}, "embed": [e]}
    text = cpu_race.markdown(result)
    assert f"| {readme} |" in text and f"| {runtime} |" in text
    assert f"**2.00x** PyTorch bf16 in {cpu_race.VENVS['readme']}" in text
    assert f"**2.50x** PyTorch bf16 in {cpu_race.VENVS['runtime']}" in text
