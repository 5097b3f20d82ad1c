"""`--engine auto`: the rule of runtime.path_choice on every CPU class, and the one line `embed` prints."""

import pytest

from vlm_vision_onnx.runtime import path_choice as pc
from vlm_vision_onnx.runtime.path_choice import AMX, AVX2, AVX512_BF16, VNNI, Path


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


def test_a_miss_hidden_by_rounding_is_shown_with_more_digits():
    """Qwen2-VL-2B's ov-int8 on held-out photos: 0.9979955, which five decimals would show as 0.99800."""
    choice = pc.choose(manifest(int8=(0.99835, 0.9979955)), cpu_kind=AVX2, have_openvino=False, have_bf16=False)
    assert "int8 min per-token cosine 0.997996 < 0.998" in choice.line()


def test_amx_takes_openvino_int8_when_shipped_then_bf16_on_the_fp32_file():
    """The Xeon with AMX (bench/results/cpu-race-amx.md): ov-int8 first; under the floor, or above the size its
    gates measured, OpenVINO bf16 on the fp32 file, not ONNX Runtime INT8."""
    choice = pc.choose(WITH_OV_INT8, cpu_kind=AMX, have_openvino=True, have_bf16=True)
    assert choice.path == Path("openvino", "ov-int8", "bf16")
    under = manifest(int8=0.99830, ov_int8=(0.99810, 0.99770))
    assert pc.choose(under, cpu_kind=AMX, have_openvino=True, have_bf16=True).path == Path("openvino", "fp32", "bf16")
    large = measured(manifest(int8=0.99830, ov_int8=(0.99810, 0.99816)), ov_int8=1024 * 1024, int8=1024 * 1024)
    choice = pc.choose(large, cpu_kind=AMX, have_openvino=True, have_bf16=True, largest=pc.Largest(2048 * 2048))
    assert choice.path == Path("openvino", "fp32", "bf16") and "ov-int8 measured on images up to 1,048,576" in choice.why


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
    from dataclasses import astuple

    import numpy as np

    from vlm_vision_onnx.runtime.__main__ import main
    from vlm_vision_onnx.runtime.sample_photos import write

    tiny_package = every_variant_packages["qwen3-vl"]
    photos = write(tmp_path / "photos")
    out = tmp_path / "auto.npz"
    assert main(["embed", str(photos[0]), "--package", str(tiny_package), "--out", str(out)]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "path:" in line]
    assert len(lines) == 1, lines
    paths = {*(path for ranked in pc.RANKING.values() for path in ranked), pc.LAST}
    ran = [path for path in paths if f"path: {path.describe()} (" in lines[0]]
    assert len(ran) == 1, lines[0]
    engine, variant, precision = astuple(ran[0])
    explicit = tmp_path / "explicit.npz"
    assert main(["embed", str(photos[0]), "--package", str(tiny_package), "--out", str(explicit),
                 "--engine", engine, "--variant", variant, *(["--precision", precision] if precision else [])]) == 0
    with np.load(out) as a, np.load(explicit) as b:
        np.testing.assert_array_equal(a["image_0.image_features"], b["image_0.image_features"])


def measured(variant_manifest: dict, **pixels) -> dict:
    """`variant_manifest` with each named variant's `largest_image_pixels` set (name=pixels)."""
    for record in variant_manifest["variants"]:
        if record["name"].replace("-", "_") in pixels:
            record["accuracy_vs_fp32"]["largest_image_pixels"] = pixels[record["name"].replace("-", "_")]
    return variant_manifest


def test_a_quantized_variant_runs_only_on_images_its_gates_measured():
    """Qwen3-VL-2B's ov-int8 meets the floor up to 1024^2 and gives 0.99780 at 2048^2
    (bench/results/cpu-race-avx512-bf16-2048.md): at 2048^2 the next path whose variant measured that size runs."""
    one_k = 1024 * 1024
    package = measured(manifest(int8=0.99830, ov_int8=(0.99810, 0.99816)), int8=one_k, ov_int8=one_k)
    package["variants"][2]["file"] = "openvino/vision_encoder_int8.xml"
    ask = {"cpu_kind": AVX512_BF16, "have_openvino": True, "have_bf16": True}
    assert pc.choose(package, largest=pc.Largest(one_k), **ask).path == Path("openvino", "ov-int8", "bf16")
    assert pc.choose(package, **ask).path == Path("openvino", "ov-int8", "bf16")  # no size given: no bound
    large = pc.choose(package, largest=pc.Largest(4 * one_k), **ask)
    assert large.path == Path("openvino", "fp32", "bf16")  # bf16 on the fp32 file has no size bound
    assert "ov-int8 measured on images up to 1,048,576 pixels, this call's largest image has 4,194,304" in large.line()
    assert "int8 measured on images up to 1,048,576 pixels" in large.line()
    # a collection says what bounds it
    said = pc.choose(package, largest=pc.Largest(4 * one_k, "images within --max-image-pixels may have"), **ask)
    assert "images within --max-image-pixels may have 4,194,304" in said.line()
    # without OpenVINO: the last path, fp32 on ONNX Runtime
    assert pc.choose(package, largest=pc.Largest(4 * one_k), cpu_kind=AVX2, have_openvino=False).path == \
        Path("onnxruntime", "fp32")
    # an explicit variant still runs at any size
    assert pc.choose(package, "auto", "int8", largest=pc.Largest(4 * one_k), cpu_kind=AVX2, have_openvino=False).path == \
        Path("onnxruntime", "int8")


def test_a_small_call_takes_onnxruntime_first_where_openvino_would_not_pay_off():
    """AMX, cache off (bench/results/cpu-race-amx-processes.md): 4 photos at 448^2 ORT INT8 7.47 s against ov-int8
    10.72 s, at 1024^2 ov-int8 41.84 s against 58.54 s. A call known in full whose OpenVINO saving is under the class's
    setup takes ORT INT8 and says why; a larger call, a collection (no images) and an explicit engine do not."""
    one_k, small = 1024 * 1024, 448 * 448
    package = measured(manifest(int8=0.99830, ov_int8=(0.99810, 0.99816)), int8=one_k, ov_int8=one_k)
    package["variants"][2]["file"] = "openvino/vision_encoder_int8.xml"
    for kind in (AMX, AVX512_BF16):
        ask = {"cpu_kind": kind, "have_openvino": True, "have_bf16": True}
        choice = pc.choose(package, largest=pc.Largest.of((small,) * 4), **ask)
        assert choice.path == Path("onnxruntime", "int8"), kind
        assert (f"for 4 image(s) of 802,816 pixels, too few for OpenVINO's compile "
                f"(~{pc.OPENVINO_SETUP_S[kind]:.1f} s) to pay off") in choice.line()
        assert pc.choose(package, largest=pc.Largest.of((one_k,) * 4), **ask).path == \
            Path("openvino", "ov-int8", "bf16")
        assert pc.choose(package, largest=pc.Largest(small), **ask).path == Path("openvino", "ov-int8", "bf16")
        assert pc.choose(package, "openvino", "ov-int8", "bf16", largest=pc.Largest.of((small,)),
                         **ask).path == Path("openvino", "ov-int8", "bf16")
    # one 1024^2 photo: 4.1 s saved, over AMX's 3.6 s setup, under Zen 4's 6.7 s
    assert pc.openvino_pays_off(AMX, (one_k,)) and not pc.openvino_pays_off(AVX512_BF16, (one_k,))
    assert pc.openvino_pays_off(AVX512_BF16, (one_k, one_k))
    # where ORT INT8 may not run, OpenVINO still does
    under = measured(manifest(int8=0.99700, ov_int8=(0.99810, 0.99816)), int8=one_k, ov_int8=one_k)
    under["variants"][2]["file"] = "openvino/vision_encoder_int8.xml"
    fallback = pc.choose(under, largest=pc.Largest.of((small,)), cpu_kind=AMX, have_openvino=True,
                         have_bf16=True)
    assert fallback.path == Path("openvino", "ov-int8", "bf16") and "too few" not in fallback.line()
    # classes without OpenVINO in their ranking are unchanged
    assert pc.choose(package, largest=pc.Largest.of((small,)), cpu_kind=VNNI, have_openvino=True,
                     have_bf16=False).path == Path("onnxruntime", "int8")


def test_a_size_bound_not_recorded_keeps_the_variant_out_of_sized_calls():
    """A package made before `largest_image_pixels` was recorded: no quantized variant when the call has a size."""
    choice = pc.choose(manifest(int8=0.9990), largest=pc.Largest(448 * 448), cpu_kind=AVX2, have_openvino=False)
    assert choice.path == Path("onnxruntime", "fp32")
    assert "int8: the image sizes its gates measured are not recorded (package it again)" in choice.line()


def test_measured_pixels_reads_the_layouts_and_the_photos():
    from vlm_vision_onnx.families import family

    qwen = family("qwen3-vl")
    metadata = {"patch_dim": "1536"}  # 3 x 2 x 16 x 16: patch 16
    validation = {"cases": [{"case": "image 1024x1024", "grid_thw": [[1, 64, 64]]},
                            {"case": "video", "grid_thw": [[4, 28, 28], [1, 20, 20]]}, {"case": "no layout"}],
                  "photos": {"sizes": [[768, 1024]]}}
    assert pc.measured_pixels(qwen, metadata, validation) == 1024 * 1024
    assert pc.measured_pixels(qwen, metadata, {"photos": {"sizes": [[448, 448], [1200, 1000]]}}) == 1_200_000
    assert pc.measured_pixels(qwen, metadata, {}) is None
    phi = family("phi-4-mm")  # valid patches of 14 pixels: 27 x 64 patches of the HD grid
    assert pc.measured_pixels(phi, {"patch_size": "14"}, {"cases": [{"layouts": [[1, 2, 27, 64], [1, 1, 32, 32]]}]}) \
        == 27 * 64 * 14 * 14


def test_the_model_card_says_up_to_which_size_a_variant_runs():
    one_k = 1024 * 1024
    package = measured(manifest(int8=0.99830), int8=one_k)
    text = pc.describe_per_cpu(package)
    assert "vnni: onnxruntime, variant int8 on images up to 1,048,576 pixels (onnxruntime, variant fp32 on larger " \
           "ones)" in text
    assert "amx: openvino bf16, variant fp32;" in text  # no ov-int8 in this package: bf16 on the fp32 file
    with_ov = pc.describe_per_cpu(measured(manifest(int8=0.99830, ov_int8=(0.99810, 0.99816)), int8=one_k,
                                           ov_int8=one_k))
    assert "amx: openvino bf16, variant ov-int8 on images up to 1,048,576 pixels (openvino bf16, variant fp32 on " \
           "larger ones)" in with_ov


def test_embed_chooses_for_its_largest_photo(every_variant_packages, tmp_path, capsys, monkeypatch):
    """`runtime embed` on a copy of the tiny package whose int8 claims a floor-meeting accuracy measured up to a
    bound between the two photos' sizes: the small photo runs int8, the pair (one above the bound) fp32, and the
    line says why. The CPU class is pinned to one whose ranking is ONNX Runtime INT8 alone."""
    import json
    import shutil

    from PIL import Image

    from vlm_vision_onnx.runtime.__main__ import main

    package = tmp_path / "package"
    shutil.copytree(every_variant_packages["qwen3-vl"], package)
    data = json.loads((package / "manifest.json").read_text())
    for record in data["variants"]:
        if record["name"] == "int8":
            record["accuracy_vs_fp32"].update(min_token_cosine=0.9990, largest_image_pixels=300 * 300)
            record["accuracy_vs_fp32"]["photos"]["min_token_cosine"] = 0.9990
    (package / "manifest.json").write_text(json.dumps(data))
    small, large = tmp_path / "small.png", tmp_path / "large.png"
    Image.new("RGB", (256, 256), (120, 30, 200)).save(small)
    Image.new("RGB", (320, 320), (20, 130, 90)).save(large)
    monkeypatch.setattr(pc, "cpu_class", lambda: AVX2)
    for photos, expected in (([small], "onnxruntime, variant int8"), ([small, large], "onnxruntime, variant fp32")):
        assert main(["embed", *map(str, photos), "--package", str(package), "--out",
                     str(tmp_path / f"{len(photos)}.npz")]) == 0
        lines = [line for line in capsys.readouterr().err.splitlines() if "path:" in line]
        assert len(lines) == 1 and f"path: {expected} (" in lines[0], lines
    assert "int8 measured on images up to 90,000 pixels, this call's largest image has 102,400" in lines[0]


def test_openvino_is_asked_only_when_a_path_needs_it(monkeypatch):
    """A call too small for OpenVINO's compile to pay off takes ONNX Runtime's INT8 without importing openvino
    (0.1-0.2 s of the process); a large one asks, once."""
    asked = []
    monkeypatch.setattr(pc.openvino_session, "available", lambda: asked.append("available") or True)
    monkeypatch.setattr(pc.openvino_session, "bf16_supported", lambda: asked.append("bf16") or True)
    one_k = 1024 * 1024
    package = measured(manifest(int8=0.99830, ov_int8=(0.99810, 0.99816)), int8=one_k, ov_int8=one_k)
    package["variants"][2]["file"] = "openvino/vision_encoder_int8.xml"
    small = pc.Largest.of((448 * 448,) * 4)
    assert pc.choose(package, cpu_kind=AVX512_BF16, largest=small).path == Path("onnxruntime", "int8")
    assert asked == []
    large = pc.Largest.of((one_k,) * 4)
    assert pc.choose(package, cpu_kind=AVX512_BF16, largest=large).path == Path("openvino", "ov-int8", "bf16")
    assert asked == ["available", "bf16"]
