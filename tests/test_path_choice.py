"""`--engine auto`: the rule of runtime.path_choice on every CPU class, and the one line `embed` prints."""

import pytest

from runtime import path_choice as pc
from runtime.path_choice import AMX, AVX2, AVX512_BF16, VNNI, Path


def manifest(**accuracy) -> dict:
    """A manifest with fp32 and the variants given as name=min per-token cosine at the validation layouts and on
    held-out photos: one value for both, (layouts, photos) for two (photos None: not recorded), None: neither."""
    variants = [{"name": "fp32", "file": "onnx/vision_encoder.onnx"}]
    for name, value in accuracy.items():
        name = name.replace("_", "-")
        record = {"name": name, "file": f"onnx/vision_encoder_{name}.onnx",
                  "quantization": {"method": "dynamic", "reduce_range": True}}
        if value is not None:
            layouts, photos = value if isinstance(value, tuple) else (value, value)
            record["accuracy_vs_fp32"] = {"min_token_cosine": layouts}
            if photos is not None:
                record["accuracy_vs_fp32"]["photos"] = {"min_token_cosine": photos}
        variants.append(record)
    return {"variants": variants}


SHIPPED = manifest(int8=0.99830, q4=0.98515)
WITH_OV_INT8 = manifest(int8=0.99830, ov_int8=(0.99810, 0.99816))
WITH_OV_INT8["variants"][2]["file"] = "openvino/vision_encoder_int8.xml"


@pytest.mark.parametrize("kind, openvino, bf16, expected", [
    (AMX, True, True, Path("openvino", "fp32", "bf16")),
    (AMX, False, False, Path("onnxruntime", "int8")),
    (AVX512_BF16, True, True, Path("onnxruntime", "int8")),
    (VNNI, True, False, Path("onnxruntime", "int8")),
    (AVX2, True, False, Path("onnxruntime", "int8")),
])
def test_each_cpu_class_takes_its_fastest_path(kind, openvino, bf16, expected):
    choice = pc.choose(SHIPPED, cpu_kind=kind, have_openvino=openvino, have_bf16=bf16)
    assert choice.path == expected
    assert choice.why.startswith(f"auto: fastest on a {kind} CPU")


def test_avx512_bf16_takes_openvino_int8_when_shipped_and_above_the_floor():
    """Zen 4 (bench/results/cpu-race-avx512-bf16.md): OpenVINO INT8 first; under the floor on photos (the 2B
    variant before its output heads stayed float: 0.99770) ONNX Runtime INT8 runs, and the line says why."""
    choice = pc.choose(WITH_OV_INT8, cpu_kind=AVX512_BF16, have_openvino=True, have_bf16=True)
    assert choice.path == Path("openvino", "ov-int8", "bf16")
    under = manifest(int8=0.99830, ov_int8=(0.99810, 0.99770))
    choice = pc.choose(under, cpu_kind=AVX512_BF16, have_openvino=True, have_bf16=True)
    assert choice.path == Path("onnxruntime", "int8")
    assert "ov-int8 min per-token cosine 0.99770 < 0.998" in choice.line()
    assert pc.choose(WITH_OV_INT8, cpu_kind=AVX512_BF16, have_openvino=False).path == Path("onnxruntime", "int8")


def test_a_variant_under_the_floor_is_skipped_with_its_reason():
    """Qwen2.5-VL's INT8 misses 0.998 on random weights: fp32 runs, and the line says why."""
    choice = pc.choose(manifest(int8=0.98463), cpu_kind=AVX2, have_openvino=False, have_bf16=False)
    assert choice.path == Path("onnxruntime", "fp32")
    assert "int8 min per-token cosine 0.98463 < 0.998" in choice.line()


def test_the_lower_of_layouts_and_photos_counts():
    """Qwen3-VL-2B's INT8 on an AVX2 CPU: 0.99822 at the random-pixel layouts, 0.99790 on photos: fp32 runs. A
    package made before the stages measured photos does not get a quantized variant automatically."""
    choice = pc.choose(manifest(int8=(0.99822, 0.99790)), cpu_kind=AVX2, have_openvino=False, have_bf16=False)
    assert choice.path == Path("onnxruntime", "fp32")
    assert "int8 min per-token cosine 0.99790 < 0.998" in choice.line()
    choice = pc.choose(manifest(int8=(0.99822, None)), cpu_kind=AVX2, have_openvino=False, have_bf16=False)
    assert choice.path == Path("onnxruntime", "fp32")
    assert "int8 min per-token cosine on photos not recorded (package it again) < 0.998" in choice.line()


def test_amx_without_the_int8_variant_keeps_bf16_then_f32():
    assert pc.choose(manifest(), cpu_kind=AMX, have_openvino=True, have_bf16=True).path == \
        Path("openvino", "fp32", "bf16")
    assert pc.choose(manifest(), cpu_kind=AMX, have_openvino=True, have_bf16=False).path == \
        Path("openvino", "fp32", "f32")


def test_unrecorded_accuracy_and_saturating_full_range_int8_are_not_taken():
    assert pc.choose(manifest(int8=None), cpu_kind=VNNI, have_openvino=False).path == Path("onnxruntime", "fp32")
    full_range = manifest(int8=0.9995)
    full_range["variants"][1]["quantization"]["reduce_range"] = False
    original = pc.cpu.int8_saturates
    try:
        pc.cpu.int8_saturates = lambda: True
        choice = pc.choose(full_range, cpu_kind=AVX2, have_openvino=False)
    finally:
        pc.cpu.int8_saturates = original
    assert choice.path == Path("onnxruntime", "fp32") and "saturate" in choice.why


@pytest.mark.parametrize("engine, variant, precision, expected", [
    ("onnxruntime", None, None, Path("onnxruntime", "fp32")),  # an explicit engine alone: fp32, as before
    ("openvino", "int8", "f32", Path("openvino", "int8", "f32")),
    ("auto", None, "bf16", Path("openvino", "fp32", "bf16")),  # --precision alone means OpenVINO
    ("auto", "q4", None, Path("onnxruntime", "q4")),  # a variant no ranked path names: its file's engine
    ("auto", "int8", None, Path("onnxruntime", "int8")),
])
def test_explicit_options_win(engine, variant, precision, expected):
    choice = pc.choose(SHIPPED, engine, variant, precision, cpu_kind=AMX, have_openvino=True, have_bf16=True)
    assert choice.path == expected


def test_an_openvino_ir_variant_runs_on_openvino():
    ir = manifest(ov_int8=0.999)
    ir["variants"][1]["file"] = "openvino/vision_encoder_int8.xml"
    assert pc.choose(ir, "auto", "ov-int8", cpu_kind=AVX2, have_openvino=True).path.engine == "openvino"


def test_embed_says_which_path_ran(every_variant_packages, tmp_path, capsys):
    """The real command on the tiny package with every variant: one `path:` line, and the outputs of the path it
    names (run again with that path's explicit options)."""
    import json

    import numpy as np

    from runtime.__main__ import main
    from runtime.sample_photos import write

    tiny_package = every_variant_packages["qwen3-vl"]
    photos = write(tmp_path / "photos")
    out = tmp_path / "auto.npz"
    assert main(["embed", str(photos[0]), "--package", str(tiny_package), "--out", str(out)]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "path:" in line]
    assert len(lines) == 1, lines
    chosen = pc.choose(json.loads((tiny_package / "manifest.json").read_text()))
    assert chosen.path.describe() in lines[0]
    explicit = tmp_path / "explicit.npz"
    assert main(["embed", str(photos[0]), "--package", str(tiny_package), "--out", str(explicit),
                 "--engine", chosen.path.engine, "--variant", chosen.variant,
                 *(["--precision", chosen.path.precision] if chosen.path.precision else [])]) == 0
    with np.load(out) as a, np.load(explicit) as b:
        np.testing.assert_array_equal(a["image_0.image_features"], b["image_0.image_features"])
