"""`python -m bench.skip_layer_norm`: every form gives the same outputs and are timed; bad options are one line."""

import json

from bench import skip_layer_norm
from tests.conftest import single_error


def test_times_both_forms_at_both_shapes(tmp_path):
    assert skip_layer_norm.main(["--reps", "1", "--threads", "1", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "skip-layer-norm.json").read_text())
    assert [r["model"] for r in result["rows"]] == list(skip_layer_norm.SHAPES)
    for row in result["rows"]:
        assert row["max_abs_diff"] < 1e-4 and row["ratio"] > 0
        assert set(row["times"]) == set(skip_layer_norm.FORMS[row["kind"]])
    assert "| phi-4-mm [2, 1025, 1152] | 1 |" in (tmp_path / "skip-layer-norm.md").read_text()


def test_bad_threads_is_one_error_line(tmp_path, capsys):
    assert skip_layer_norm.main(["--threads", "two", "--out", str(tmp_path)]) == 2
    assert "--threads" in single_error(capsys.readouterr().err)
    assert not list(tmp_path.iterdir())
