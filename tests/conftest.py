"""Shared fixtures: the tiny builds the tests read (from tests.builds: made once, cached across runs), and the
fixtures more than one test module uses (their helpers are tests.support's)."""

import importlib
import json
import os
from pathlib import Path

import pytest

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Each xdist worker is one of two processes on two cores: torch's OpenMP and MKL pools take one thread each (set
    # before any test module imports torch; subprocesses inherit it), so that two workers' threads do not spin
    # against each other. A command given --threads keeps its own.
    for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(_name, "1")

pytest.register_assert_rewrite("tests.support")  # before its import: its asserts report as the test modules' do

from tests import builds
from tests.support import QWEN, install_torchvision_stub, stubbed_video_processor

#: The suite's measured seconds per test file (bench.suite_durations), read to start the longest files first.
DURATIONS = Path(__file__).resolve().parents[1] / "bench" / "results" / "test-durations.json"


def pytest_collection_modifyitems(config, items):
    """Test files longest first, by their seconds per file in DURATIONS (a later run's figure over an earlier one's;
    a file no run has, new since, first of all); the order within a file kept. `make test` runs pytest-xdist with
    --dist loadfile and --no-loadscope-reorder: each worker takes the next file in this order when it is free, so
    the longest files start first and no long one starts last while the other worker idles."""
    if not DURATIONS.is_file():
        return
    seconds = {}
    for run in json.loads(DURATIONS.read_text())["runs"].values():
        seconds.update(run["per_file"])
    rank = {file: i for i, file in enumerate(sorted(seconds, key=lambda f: -seconds[f]))}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::")[0], -1))


def export_phi4_tiny(layers: int | None = None):
    """The tiny Phi-4 config (with `layers` encoder layers instead of its 2: with 3, two run, features from the
    second-last, and ORT fuses the second layer's attention; with 2, none), random weights (seed 0), exported
    through TorchScript with named dims (no validation: builds.phi4_graph): (config, embed module,
    onnx.ModelProto)."""
    import dataclasses

    import onnx

    from builders.config import load_config
    from builders.phi4_mm import family

    config = load_config("phi-4-mm-tiny")
    if layers is not None:
        config = dataclasses.replace(config, vision={**config.vision, "num_hidden_layers": layers})
    embed = family.build(config, None, seed=0)[0]
    return config, embed, onnx.load(str(builds.path(builds.phi4_graph(layers)) / "model.onnx"))


@pytest.fixture(scope="session")
def tiny_exports() -> dict:
    """{'torchscript': folder, 'dynamo': folder} of tiny exports (model.onnx + report.json). Read-only."""
    return {"torchscript": builds.path(builds.QWEN3_VL), "dynamo": builds.path(builds.QWEN3_VL_DYNAMO)}


@pytest.fixture(scope="session")
def tiny_optimized():
    """The optimize stage folder of the tiny TorchScript export (`python -m quantize optimize` on it), shared by
    every test that reads it. Read-only: a test that writes beside it copies it."""
    return builds.path(builds.QWEN3_VL_OPTIMIZED)


@pytest.fixture(scope="session")
def transformers_js_node():
    """tools/node installed once (`npm ci --ignore-scripts`, pinned by its lockfile; builds.transformers_js_node):
    transformers.js 4.3.1 and onnxruntime-node, shared by every transformers.js test; skips with the reason where
    Node is missing. Read-only."""
    from tools import transformers_js

    missing = transformers_js.node_missing()
    if missing is not None:
        pytest.skip(f"transformers.js needs Node: {missing}")
    return builds.path(builds.transformers_js_node())


def single_error(stderr: str) -> str:
    """The one `error:` line of a failed command (progress lines may precede it; no traceback)."""
    assert "Traceback" not in stderr
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def snapshot(root) -> dict:
    """{relative path: bytes} of every file under `root` (folders as None): to prove nothing changed."""
    from pathlib import Path

    root = Path(root)
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


#: {family: (config, export)} of the every-variant builds and packages.
EVERY_VARIANT = {"qwen3-vl": ("qwen3-vl-tiny", builds.QWEN3_VL), "phi-4-mm": ("phi-4-mm-tiny", builds.PHI4_MM)}


@pytest.fixture(scope="session")
def every_variant_builds() -> builds.Lazy:
    """{family: {stage: folder}} of the tiny Qwen3-VL and Phi-4-multimodal builds with every variant
    (builds.every_variant: export, surgery, optimized, int8, int4, fp16, q4f16; q4f16 given --int4), each family
    made when a test first reads it. Read-only."""
    def make(family: str) -> dict:
        return {stage: builds.path(recipe) for stage, recipe in builds.every_variant(EVERY_VARIANT[family][1]).items()}

    return builds.Lazy(EVERY_VARIANT, make)


@pytest.fixture(scope="session")
def every_variant_packages() -> builds.Lazy:
    """{family: dist/NAME/} of the tiny Qwen3-VL and Phi-4-multimodal packages with every variant (fp32, fp16,
    int8, q4, q4f16), built through the stage commands and `release package` (builds.every_variant), each family
    made when a test first reads it. Read-only."""
    return builds.Lazy(EVERY_VARIANT, lambda family: builds.path(every_variant_package(family)) / EVERY_VARIANT[family][0])


def every_variant_package(family: str) -> builds.Recipe:
    """The recipe of `every_variant_packages[family]` (dist/ holding NAME/ and NAME.tar.gz)."""
    name, export = EVERY_VARIANT[family]
    return builds.package(name, builds.every_variant(export))


@pytest.fixture(scope="session")
def tiny_static() -> dict:
    """{(config, size): folder} of `--static` exports (builds.TINY_STATIC; TorchScript, random weights seed 0),
    plus ("qwen2.5-vl-tiny", "196x140", "dynamo") through torch.export. Read-only."""
    found = {(model, size): builds.path(builds.export(model, "--static", size))
             for model, sizes in builds.TINY_STATIC.items() for size in sizes}
    found["qwen2.5-vl-tiny", "196x140", "dynamo"] = builds.path(
        builds.export("qwen2.5-vl-tiny", "--static", "196x140", "--dynamo"))
    return found


# ---------------------------------------------------------------- fixtures more than one test module uses
@pytest.fixture(scope="session")
def qwen_dist() -> Path:
    """dist/ with qwen3-vl-tiny/ and qwen3-vl-tiny.tar.gz, packaged from the tiny export alone. Read-only."""
    return builds.path(builds.package(QWEN, {"export": builds.QWEN3_VL}))


@pytest.fixture
def transformers_processor(monkeypatch):
    """transformers' Phi4MultimodalImageProcessor with its class defaults, on the torchvision stand-in."""
    install_torchvision_stub(monkeypatch)
    name = "transformers.models.phi4_multimodal.image_processing_phi4_multimodal"
    monkeypatch.delitem(importlib.sys.modules, name, raising=False)  # imported afresh, dropped afterwards
    module = importlib.import_module(name)
    return module.Phi4MultimodalImageProcessor()


@pytest.fixture
def transformers_video_processor(monkeypatch):
    """transformers' Qwen3VLVideoProcessor (class defaults) on the torchvision stand-in."""
    return stubbed_video_processor(monkeypatch, "transformers.models.qwen3_vl.video_processing_qwen3_vl",
                                   "Qwen3VLVideoProcessor")


@pytest.fixture
def transformers_qwen2_video_processor(monkeypatch):
    """transformers' Qwen2VLVideoProcessor (class defaults: Qwen2-VL's and Qwen2.5-VL's) on the stand-in."""
    return stubbed_video_processor(monkeypatch, "transformers.models.qwen2_vl.video_processing_qwen2_vl",
                                   "Qwen2VLVideoProcessor")
