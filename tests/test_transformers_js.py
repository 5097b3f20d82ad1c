"""transformers.js 4.3.1 (Node, installed from the registry by its lockfile) runs the package's fp32 and INT8
encoders on real photos of several sizes and a two-image call, with the library's own image processor; the
grids and features must agree with `python -m runtime embed` on the same files (bench/transformers_js.py)."""

import json

import pytest

from bench import transformers_js as bench_transformers_js
from tests import builds
from tools import transformers_js

pytestmark = pytest.mark.skipif(transformers_js.node_missing() is not None,
                                reason=f"transformers.js needs Node: {transformers_js.node_missing()}")

NAME = "qwen3-vl-tiny"
#: Python's processor breaks a rounding tie (a side of 64k + 16 pixels: 400 / 32 = 12.5 merged patches) to even,
#: transformers.js's `smart_resize` (Math.round) up: that side's grid then differs by one merged row, 2 patches.
TIE = 64


def _tie_side(height_or_width: int) -> bool:
    return height_or_width % TIE == 16


@pytest.fixture(scope="module")
def package():
    """dist/qwen3-vl-tiny with fp32 and int8 encoders, made by the commands of `make export` / `make package` (the
    int8 stage without the outlier check: it has its own tests). Read-only."""
    stages = {"export": builds.QWEN3_VL, "optimized": builds.QWEN3_VL_OPTIMIZED,
              "int8": builds.stage(builds.QWEN3_VL_OPTIMIZED, "int8", "--outliers", "off")}
    return builds.path(builds.package(NAME, stages)) / NAME


@pytest.fixture(scope="module")
def records(package, tmp_path_factory, transformers_js_node):
    work = tmp_path_factory.mktemp("tjs-work")
    node = transformers_js_node
    photos = transformers_js.write_photos(work)
    manifest = json.loads((package / "manifest.json").read_text())
    files = {v["name"]: v["file"].split("/")[-1] for v in manifest["variants"]}
    assert set(files) == {"fp32", "int8"}
    found = transformers_js.compare(package, files, transformers_js.default_calls(photos), work, node)
    print("\n" + bench_transformers_js.markdown({"package": str(package), "created": "test", "transformers_js": "4.3.1",
                                                 "machine": {"cpu": "this machine"}, "records": found}))
    return found, photos, node


def test_the_docs_example_runs(records, package):
    """tools/node/example.mjs, the 15-line example of docs/transformers-js.md, embeds a photo with the INT8 encoder."""
    import subprocess

    _, photos, node = records
    done = subprocess.run(["node", "example.mjs", str(package), str(photos["astronaut_300x220"])], cwd=node,
                          capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[", "[", "1,", "14,", "20", "]", "]", "[", "70,", "96", "]"]


def test_grids_agree_except_at_a_rounding_tie(records):
    found, photos, _ = records
    from PIL import Image

    for record in found:
        if record["same_grid"]:
            continue
        sizes = [Image.open(photos[name.removesuffix(".png")]).size for name in record["images"]]
        for (width, height), js, py in zip(sizes, record["grid_thw"], record["python_grid_thw"]):
            assert js[1] - py[1] == (2 if _tie_side(height) else 0), (record["call"], js, py)
            assert js[2] - py[2] == (2 if _tie_side(width) else 0), (record["call"], js, py)
    assert sum(r["same_grid"] for r in found) >= len(found) - 2  # only coffee (400 px tall) ties, per variant


def test_fp32_features_match_python(records):
    found, _, _ = records
    fp32 = [r for r in found if r["variant"] == "fp32" and r["same_grid"]]
    assert len(fp32) >= 6 and any(len(r["images"]) == 2 for r in fp32)
    for record in fp32:
        assert record["min_token_cosine"] >= 0.999, record
        assert record["pixel_max_abs"] < 0.1  # the two resize implementations differ by a few grey levels
    assert any(r["pixel_max_abs"] > 0 for r in fp32)  # they do differ: the cosine above is not a tautology


def test_int8_features_match_python_int8(records):
    found, _, _ = records
    int8 = [r for r in found if r["variant"] == "int8" and r["same_grid"]]
    assert len(int8) >= 6
    for record in int8:
        assert record["min_token_cosine"] >= 0.999, record
