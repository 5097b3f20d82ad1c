"""The suite's build cache (tests/builds.py): keyed by the code a build's command can run, made once under a lock,
never handed out half-made or changed."""

import json
import threading

import pytest

from tests import builds
from tests.source import ROOT, module_closure


def test_closure_follows_function_level_imports_and_module_strings():
    """The export's closure holds the torch side it imports inside functions and the builder named by a family's
    string (`builders.qwen_vl.family:...`, imported by importlib), and nothing of release/ or runtime/."""
    files = {str(p.relative_to(ROOT)) for p in module_closure("builders.vision")}
    assert {"builders/vision.py", "builders/qwen_vl/family.py", "vlm_vision_onnx/families/__init__.py",
            "vlm_vision_onnx/core/errors.py"} <= files
    assert not {f for f in files
                if f.startswith(("vlm_vision_onnx/release/", "vlm_vision_onnx/runtime/", "tests/", "bench/"))}


def _digest_with(changed: str):
    """builds' digest function, as if the checkout file `changed` (relative path) had other content."""
    def digest(path):
        return "changed" if str(path.relative_to(ROOT)) == changed else builds._digest(path)
    return digest


@pytest.mark.parametrize("changed, remade", [
    ("quantize/int8.py", {"int8"}),
    ("surgery/cli.py", {"surgery", "optimized", "int8"}),
    ("builders/vision.py", {"export", "surgery", "optimized", "int8"}),
    ("configs/qwen3-vl-tiny.yaml", {"export", "surgery", "optimized", "int8"}),
    ("configs/phi-4-mm-tiny.yaml", set()),
    ("vlm_vision_onnx/release/package.py", set()),
])
def test_a_change_remakes_exactly_what_it_touches(changed, remade):
    """A stage's key covers its own command's code and its parents' keys: a change to quantize/int8.py re-makes
    the int8 stage only; one to the export's code or config re-makes the chain; another family's config or the
    release code touches none of these stages."""
    chain = builds.chain(builds.QWEN3_VL, ("surgery", "surgery"), ("optimized", "optimize"), ("int8", "int8"))
    before = {name: builds.key(recipe) for name, recipe in chain.items()}
    after = {name: builds.key(recipe, digest=_digest_with(changed)) for name, recipe in chain.items()}
    assert {name for name in chain if before[name] != after[name]} == remade


@pytest.mark.parametrize("changed", ["vlm_vision_onnx/runtime/webgpu.py", "vlm_vision_onnx/runtime/webgpu_worker.py",
                                     "vlm_vision_onnx/runtime/__main__.py"])
def test_a_cached_webgpu_report_follows_the_runtime_and_the_install(changed, tmp_path):
    """A WebGPU report (a real client's run, cached as a build) is made again when the runtime code that produced
    it or the install it ran in changes; its package is not."""
    home = tmp_path / "webgpu"
    (home / "venv/lib/python3.11/site-packages/onnxruntime_webgpu-1.27.0.dist-info").mkdir(parents=True)
    (home / "env.sh").write_text("export LP_NATIVE_VECTOR_WIDTH=64\n")
    package = builds.package("qwen3-vl-tiny", {"export": builds.QWEN3_VL})
    report = builds.webgpu_check(package, "qwen3-vl-tiny", home)
    assert builds.key(report, digest=_digest_with(changed)) != builds.key(report)
    assert builds.key(package, digest=_digest_with(changed)) == builds.key(package)
    assert builds.key(builds.webgpu_check(package, "qwen3-vl-tiny", home),
                      digest=_digest_with("vlm_vision_onnx/runtime/embed.py")) == builds.key(report)
    (home / "venv/lib/python3.11/site-packages/onnxruntime_webgpu-1.27.0.dist-info").rename(
        home / "venv/lib/python3.11/site-packages/onnxruntime_webgpu-1.28.0.dist-info")
    assert builds.key(builds.webgpu_check(package, "qwen3-vl-tiny", home)) != builds.key(report)
    (home / "env.sh").write_text("export LP_NATIVE_VECTOR_WIDTH=256\n")
    assert builds.key(builds.webgpu_check(package, "qwen3-vl-tiny", home)) != builds.key(report)


def test_parameters_and_library_versions_are_in_the_key():
    assert builds.key(builds.export("qwen3-vl-tiny")) != builds.key(builds.export("qwen3-vl-tiny", "--dynamo"))
    versions = builds._versions()
    assert builds._compute_key(builds.QWEN3_VL, ROOT, builds._digest, versions) == builds.key(builds.QWEN3_VL)
    older = {**versions, "onnxruntime": "1.31.1"}
    assert builds._compute_key(builds.QWEN3_VL, ROOT, builds._digest, older) != builds.key(builds.QWEN3_VL)


def _counting_recipe(calls: list, label: str = "probe", fail: bool = False) -> builds.Recipe:
    def make(out, _parents):
        calls.append(out)
        out.mkdir()
        (out / "model.onnx").write_bytes(b"made")
        if fail:
            raise RuntimeError("the command failed")

    return builds.Recipe(label, ("vlm_vision_onnx.core.errors",), (label, fail), make)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("VLM_TEST_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(builds, "_CHECKED", set())
    return tmp_path / "cache"


def test_made_once_then_reused_and_remade_when_a_test_changed_it(cache, capsys):
    calls = []
    recipe = _counting_recipe(calls)
    folder = builds.path(recipe)
    assert (folder / "model.onnx").read_bytes() == b"made" and len(calls) == 1
    builds._CHECKED.clear()  # a later run: the folder is checked against its manifest, not re-made
    assert builds.path(recipe) == folder and len(calls) == 1
    assert json.loads((cache / f"{folder.name}.manifest.json").read_text()) == {"model.onnx": builds._sha(
        folder / "model.onnx")}
    (folder / "model.onnx").write_bytes(b"a test wrote here")
    builds._CHECKED.clear()
    assert (builds.path(recipe) / "model.onnx").read_bytes() == b"made" and len(calls) == 2
    assert "changed since it was made" in capsys.readouterr().err


def test_a_failed_build_leaves_nothing(cache):
    calls = []
    with pytest.raises(RuntimeError, match="the command failed"):
        builds.path(_counting_recipe(calls, fail=True))
    assert len(calls) == 1
    assert [p.name for p in cache.iterdir() if not p.name.endswith(".lock")] == []


def test_two_workers_wait_for_one_build(cache):
    """Two threads (as two pytest-xdist workers) ask for one build: it is made once, both get it."""
    calls, found = [], []
    recipe = _counting_recipe(calls)

    def worker():
        found.append(builds.path(recipe))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len(set(found)) == 1
