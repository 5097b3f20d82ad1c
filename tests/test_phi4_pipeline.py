"""Phi-4-multimodal through every stage of `make export` (tiny config), through the same commands as
Qwen3-VL: export -> surgery stage (the family's checks) -> optimize (the family's passes) -> int8, int4, each
stage's report self-contained (int8 and int4 with the family's shipped options, `--shipped` as `make export` runs
them); then `runtime encode` on the result, with the family's input checks."""

import json

import numpy as np
import pytest

from tests import builds
from tests.conftest import single_error
from vlm_vision_onnx.families import PHI4_MM
from vlm_vision_onnx.runtime import __main__ as runtime_cli


@pytest.fixture(scope="module")
def stages(tmp_path_factory):
    """{stage: folder} after running the pipeline's commands on the tiny Phi-4 config (int8 and int4 with the
    options `make export` ships: the family's declared flags), laid out as build/MODEL/ (a copy)."""
    recipes = builds.chain(builds.PHI4_MM, ("surgery", "surgery"), ("optimized", "optimize"),
                           ("int8", "int8", "--shipped"), ("int4", "int4", "--shipped"))
    root = builds.assemble(recipes, tmp_path_factory.mktemp("phi4-pipeline") / "phi-4-mm-tiny")
    return {name: root / name for name in recipes}


def _report(folder) -> dict:
    return json.loads((folder / "report.json").read_text())


def test_every_stage_report_is_self_contained(stages):
    """Each report names the family and carries the tolerance and every validation case with its layout."""
    export_cases = [c["case"] for c in _report(stages["export"])["validation"]["cases"]]
    for name in ("surgery", "optimized", "int8", "int4"):
        report = _report(stages[name])
        assert report["family"] == "phi-4-mm" and report["tolerance"] == 1e-4
        assert report["io"]["inputs"] == list(PHI4_MM.input_names)
        cases = report["validation"]["cases"]
        assert [c["case"] for c in cases] == export_cases, name
        assert all("layouts" in c and c["ok"] for c in cases), name


def test_surgery_stage_checks_the_declared_dims(stages):
    checks = {c["check"]: c for c in _report(stages["surgery"])["checks"]}
    assert set(checks) == {"claims"} and checks["claims"]["holds"]
    assert checks["claims"]["declared"]["image_features"].startswith("[num_image_tokens,")


def test_optimize_runs_the_family_passes_only(stages):
    passes = {p["pass"]: p for p in _report(stages["optimized"])["passes"]}
    assert [k for k, p in passes.items() if p.get("applies", True)] == list(PHI4_MM.optimize_passes)
    assert all(passes[k]["ok"] for k in PHI4_MM.optimize_passes)


def test_encode_takes_the_family_inputs(stages, tmp_path, capsys):
    rng = np.random.default_rng(0)
    pack = PHI4_MM.layout_inputs({"layouts": [[1, 2, 27, 64], [1, 1, 32, 32]]}, {}, rng)
    np.savez(tmp_path / "in.npz", **pack)
    out = tmp_path / "out.npz"
    model = str(stages["int4"] / "model.onnx")
    assert runtime_cli.main(["encode", model, "--inputs", str(tmp_path / "in.npz"), "--out", str(out)]) == 0
    with np.load(out) as data:
        assert data["image_features"].shape[0] == 1280


@pytest.mark.parametrize("change, message", [
    ({"image_attention_mask": np.ones((2, 3, 16, 16), np.float32)}, "image_attention_mask must have shape [2, 3, 32, 32]"),
    ({"image_sizes": np.array([[448, 1344], [448, 448]])}, "needs 1 + 1x3 = 4 crops but pixel_values has max_num_crops = 3"),
])
def test_encode_refuses_a_pack_the_processor_cannot_make(stages, tmp_path, capsys, change, message):
    pack = PHI4_MM.layout_inputs({"layouts": [[1, 2, 27, 64], [1, 1, 32, 32]]}, {}, np.random.default_rng(0))
    np.savez(tmp_path / "in.npz", **{**pack, **change})
    out = tmp_path / "out.npz"
    code = runtime_cli.main(["encode", str(stages["export"] / "model.onnx"), "--inputs", str(tmp_path / "in.npz"), "--out", str(out)])
    assert code == 2 and message in single_error(capsys.readouterr().err)
    assert not out.exists()


def test_compare_reads_the_stage_folders(stages, tmp_path):
    """`make compare`'s writer on this build: every figure filled from the reports and a latency run."""
    from bench import compare

    root = stages["export"].parent
    out = tmp_path / "comparison.md"
    assert compare.main(["--models", root.name, "--build", str(root.parent), "--reps", "1", "--threads", "1",
                         "--out", str(out)]) == 0
    text = out.read_text()
    assert "| export path (opset) | torchscript (18) |" in text
    assert "max_num_crops, num_image_tokens, num_images" in text
    figures = json.loads(out.with_suffix(".json").read_text())
    latency = figures["latency"][root.name]
    assert set(latency) == {"fp32", "int8", "int4"} and set(latency["fp32"]) == {"448x448", "1024x1024"}
    assert latency["fp32"]["448x448"]["tokens"] == 545  # 1 + 1 crops: 16 * 17 + 1 + 16 * 17
    assert latency["fp32"]["1024x1024"]["tokens"] > 545  # more crops
    assert figures["summaries"][root.name]["int8_min_token_cosine"] > 0.99
    ops_after = figures["summaries"][root.name]["ops_after"]
    assert ops_after.get("LayerNormalization") and not ops_after.get("com.microsoft.SkipLayerNormalization")


def test_int4_mixed_precision_ranks_phi4_s_3d_matmuls(stages):
    """`--int8-matmuls` ranks every MatMul by its 4-bit error alone; Phi-4's MatMul inputs are [crops, patches, K]."""
    mixed = _report(stages["int4"])["mixed_precision"]
    assert mixed["promoted"], mixed
    assert all(-1 <= r["min_token_cosine"] <= 1 for r in mixed["sensitivity"])
    assert mixed["nbits_by_bits"].get("8"), mixed["nbits_by_bits"]
