"""transformers.js 4.3.1 in a real browser: headless Chromium loads tools/browser/index.html from 127.0.0.1 (no
bundler: an import map points transformers.js's bare imports at node_modules), preprocesses a real photo with
transformers.js's own image processor and runs the package's encoder on onnxruntime-web's WebGPU EP. Without a GPU
Chromium's only adapter is SwiftShader (fp32, no `shader-f16`). The features must agree with
`python -m runtime embed` on the same photo and package (bench/transformers_js.run_browser)."""

import numpy as np
import pytest
from PIL import Image

from tools import transformers_js
from vlm_vision_onnx.core import parity
from vlm_vision_onnx.core.errors import UsageError

_missing = transformers_js.node_missing() or transformers_js.chromium_missing()
pytestmark = pytest.mark.skipif(_missing is not None, reason=f"transformers.js in a browser needs: {_missing}")

#: A crop of astronaut at a multiple of 32 pixels (grid 1x14x20): neither processor resizes it, so both see the same
#: pixels. EXTRA's astronaut_300x220 is resized to 320x224 by both, and in a browser transformers.js resizes with
#: canvas drawImage (RawImage.resize ignores `resample` there), not sharp's bicubic as in Node.
CROP = (96, 0, 96 + 320, 224)


@pytest.fixture(scope="module")
def package(every_variant_packages):
    """The session's tiny Qwen3-VL package with every variant (conftest): its fp32 is the optimized stage (ORT's
    MultiHeadAttention, RotaryEmbedding, FastGelu contrib ops), and it has an fp16 encoder."""
    return every_variant_packages["qwen3-vl"]


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    """{name: PNG}: the sample photos, astronaut_300x220 (resized) and astronaut_320x224 (cropped, not resized)."""
    folder = tmp_path_factory.mktemp("browser-photos")
    found = transformers_js.write_photos(folder)
    found["astronaut_320x224"] = folder / "astronaut_320x224.png"
    Image.open(found["astronaut"]).convert("RGB").crop(CROP).save(found["astronaut_320x224"])
    return found


@pytest.fixture(scope="module")
def runs(package, photos, transformers_js_node, tmp_path_factory):
    """{photo: (browser result, `python -m runtime embed` result)} of the fp32 encoder."""
    import time

    found = {}
    for name in ("astronaut_320x224", "astronaut_300x220"):
        start = time.monotonic()
        browser = transformers_js.run_browser(transformers_js_node, package, "vision_encoder.onnx", photos[name])
        python = transformers_js.run_python(package, "fp32", [photos[name]], tmp_path_factory.mktemp("browser-py"))
        print(f"\n{name}: browser run {time.monotonic() - start:.1f} s with python, page {browser['timings_ms']}")
        found[name] = browser, python
    return found


@pytest.fixture(scope="module")
def canary(package, photos, transformers_js_node, tmp_path_factory):
    """tools.transformers_js.attention_canary: whether this Chromium's WebGPU runs a lone MultiHeadAttention right."""
    return transformers_js.attention_canary(transformers_js_node, package, photos["astronaut_320x224"],
                                            tmp_path_factory.mktemp("browser-canary"))


def _needs_right_attention(canary: dict):
    """Feature parity says something only where the browser computes attention itself right: Debian's Chromium
    150 (SwiftShader) returns a lone 64-row MultiHeadAttention at about 0.74x ONNX Runtime's (16 rows: right),
    where Chromium 156 matched (docs/webgpu.md). Skips, with the figures, when the canary fails."""
    if not canary["ok"]:
        pytest.skip(f"{canary['chromium']}: its WebGPU gets onnxruntime-web's MultiHeadAttention wrong on its own "
                    f"({canary['rows']} rows, {canary['heads']} heads: max abs diff {canary['max_abs']:.3g}, "
                    f"{canary['ratio']:.3f}x ONNX Runtime's CPU EP), so features cannot match here")


def test_the_attention_canary_runs(canary):
    print("\nattention canary:", canary)
    assert canary["chromium"].startswith("Chromium") and np.isfinite(canary["max_abs"])


def _cosines(browser: dict, reference: dict) -> dict[str, float]:
    return {name: parity.min_token_cosine(browser["outputs"][name], ref) for name, ref in reference.items()}


def test_the_adapter_is_swiftshader_and_the_encoder_runs_on_webgpu(runs):
    browser, _ = runs["astronaut_320x224"]
    adapter = browser["adapter"]
    print("\nadapter:", {k: v for k, v in adapter.items() if k != "features"})
    assert (adapter["vendor"], adapter["architecture"]) == ("google", "swiftshader"), adapter
    assert browser["ep"]["requested"] == ["webgpu"] and browser["ep"]["webgpu_device"], browser["ep"]
    on_webgpu = browser["placements"]["WebGpuExecutionProvider"]
    print("on WebGPU:", on_webgpu, "\non the CPU:", browser["placements"].get("CPUExecutionProvider"))
    # the encoder's compute runs on WebGPU; ORT keeps shape arithmetic and the Loop nodes on its CPU EP
    for op in ("MatMul", "MultiHeadAttention", "RotaryEmbedding", "LayerNormalization", "FastGelu"):
        assert on_webgpu.get(op), (op, browser["placements"])
    assert browser["transformers_js"] == "4.3.1"


def test_fp32_features_match_python_on_a_photo_neither_side_resizes(runs, canary):
    _needs_right_attention(canary)
    browser, python = runs["astronaut_320x224"]
    assert browser["grid_thw"] == python["grid_thw"] == [[1, 14, 20]]
    assert abs(browser["pixels"] - python["pixels"]).max() == 0  # the same decode, no resize: the same pixels
    cosines = _cosines(browser, python["outputs"])
    print("\nmin per-token cosine, browser WebGPU against python -m runtime embed:", cosines)
    assert set(cosines) == {"image_features", "deepstack_embeds_0", "deepstack_embeds_1"}
    assert min(cosines.values()) >= 0.999, cosines


def test_a_resized_photo_differs_only_by_the_browser_resize(runs, package, canary):
    """astronaut_300x220: the grids agree; the browser's canvas resize differs from PIL's bicubic more than sharp's
    does in Node (pixel_values up to 0.27, 35 grey levels at std 0.5, against 0.063), which alone moves the features
    (end-to-end min per-token cosine 0.996); the encoder on WebGPU matches ONNX Runtime's CPU on the browser's own
    pixels."""
    import onnxruntime as ort

    _needs_right_attention(canary)
    browser, python = runs["astronaut_300x220"]
    assert browser["grid_thw"] == python["grid_thw"] == [[1, 14, 20]]
    pixels = abs(browser["pixels"] - python["pixels"])
    end_to_end = _cosines(browser, python["outputs"])
    session = ort.InferenceSession(str(package / "onnx" / "vision_encoder.onnx"), providers=["CPUExecutionProvider"])
    cpu = dict(zip([o.name for o in session.get_outputs()],
                   session.run(None, {"pixel_values": browser["pixels"],
                                      "grid_thw": np.array(browser["grid_thw"], np.int64)})))
    same_pixels = _cosines(browser, cpu)
    print(f"\npixels max {pixels.max():.4f} mean {pixels.mean():.5f}; end to end {end_to_end}; "
          f"WebGPU against the CPU on the browser's pixels {same_pixels}")
    assert min(same_pixels.values()) >= 0.999, same_pixels
    assert 0 < pixels.max() < 0.5 and pixels.mean() < 0.02  # a resize difference, not a different image
    assert min(end_to_end.values()) >= 0.99, end_to_end


def test_fp16_cannot_run_on_swiftshader(runs, package, photos, transformers_js_node):
    """SwiftShader has no `shader-f16`: the fp16 variant's session opens, and its first float16 kernel refuses."""
    browser, _ = runs["astronaut_320x224"]
    assert browser["adapter"]["shader_f16"] is False
    assert "shader-f16" not in browser["adapter"]["features"]
    with pytest.raises(UsageError, match="requires f16 but the device does not support it"):
        transformers_js.run_browser(transformers_js_node, package, "vision_encoder_fp16.onnx",
                                    photos["astronaut_320x224"])
