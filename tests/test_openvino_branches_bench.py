"""bench.openvino_branches on the tiny optimized file: both forms run in their own processes, their outputs
agree, and the result files are written."""

import json

import pytest

pytest.importorskip("openvino", reason="the openvino extra is not installed (make install installs it)")


def test_bench_compares_the_two_forms(tiny_optimized, tmp_path, monkeypatch):
    from bench import openvino_branches as bench

    build = tmp_path / "tiny-build"
    build.mkdir()
    (build / "optimized").symlink_to(tiny_optimized, target_is_directory=True)
    monkeypatch.setattr(bench, "RESULTS", tmp_path / "results")
    assert bench.main(["--build", str(build), "--sizes", "96", "--precision", "f32", "--threads", "1",
                       "--reps", "1", "--rounds", "1", "--suffix", "test"]) == 0
    result = json.loads((tmp_path / "results" / "openvino-branches-test.json").read_text())
    case = result["cases"]["96x96"]
    assert case["max_abs_diff"] < 1e-5
    for form in bench.FORMS:
        assert case[form]["median_s"] > 0 and case[form]["peak_rss_mib"] > 0
    assert "branches wired in" in (tmp_path / "results" / "openvino-branches-test.md").read_text()
