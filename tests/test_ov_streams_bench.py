"""bench.ov_streams on the tiny Qwen3-VL build: both forms run, the at-once form on two streams where there are two
cores, the same outputs, and the files it writes."""

import json
import os

import pytest

pytest.importorskip("openvino", reason="the openvino extra is not installed (make install installs it)")

from bench import ov_streams


def test_both_forms_agree_and_the_table_says_so(every_variant_packages, tmp_path):
    build = every_variant_packages["qwen3-vl"].parent.parent / "build" / "qwen3-vl-tiny"
    assert ov_streams.main(["--build", str(build), "--path", "OV f32", "--size", "64", "--photos", "astronaut,coffee",
                            "--threads", "2", "--reps", "1", "--out", str(tmp_path)]) == 0
    result = json.loads((tmp_path / "ov-streams.json").read_text())
    race = result["race"]
    assert race["at_a_time"] == {"one at a time": 1, "at once": 2 if (os.cpu_count() or 1) >= 2 else 1}, race
    assert race["min_token_cosine"] >= 0.99999, race  # the same f32 computation, on other threads
    assert all(len(race[form]["times_s"]) == 1 for form in ov_streams.FORMS)
    table = (tmp_path / "ov-streams.md").read_text()
    assert "| at once | 2 |" in table or (os.cpu_count() or 1) < 2, table
    assert f"**{race['speedup']:.2f}x**" in table


def test_a_path_that_is_not_openvino_is_one_error(every_variant_packages, capsys):
    build = every_variant_packages["qwen3-vl"].parent.parent / "build" / "qwen3-vl-tiny"
    with pytest.raises(SystemExit) as exit_:
        ov_streams.main(["--build", str(build), "--path", "ORT INT8"])
    assert exit_.value.code == 2 and "is no OpenVINO path" in capsys.readouterr().err
