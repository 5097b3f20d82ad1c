"""bench.suite_durations: a pytest log with --durations=0 read into the suite's time table."""

import json

from bench import suite_durations

LOG = """....                                                      [100%]
============================== slowest durations ===============================
12.50s setup    tests/test_a.py::test_one[x-y]
3.00s call     tests/test_a.py::test_one[x-y]
0.25s teardown tests/test_a.py::test_one[x-y]
7.00s call     tests/test_b.py::test_two
=========================== short test summary info ============================
SKIPPED [1] tests/test_c.py:3: no reason
1476 passed, 13 skipped, 5 warnings in 1315.32s (0:21:55)
"""


def test_parse_sums_each_file_and_keeps_the_slowest_first():
    run = suite_durations.parse(LOG)
    assert run["wall_s"] == 1315.32 and run["outcome"] == "1476 passed, 13 skipped, 5 warnings"
    assert run["per_file"] == {"tests/test_a.py": 15.75, "tests/test_b.py": 7.0}
    assert run["slowest"][0] == [12.5, "setup", "tests/test_a.py", "test_one[x-y]"]
    assert run["phases_total_s"] == 22.8


def test_each_label_is_kept_and_the_page_lists_them_all(tmp_path):
    log = tmp_path / "log"
    log.write_text(LOG)
    assert suite_durations.main([str(log), "--label", "before", "--results", str(tmp_path)]) == 0
    assert suite_durations.main([str(log), "--label", "after", "--note", "2 workers", "--results", str(tmp_path)]) == 0
    assert list(json.loads((tmp_path / "test-durations.json").read_text())["runs"]) == ["before", "after"]
    page = (tmp_path / "test-durations.md").read_text()
    assert "## before" in page and "## after" in page and "| 2 workers |" in page


def test_a_log_without_durations_is_one_error_line(tmp_path, capsys):
    log = tmp_path / "log"
    log.write_text("1 passed in 1.00s\n")
    assert suite_durations.main([str(log), "--label", "x", "--results", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().startswith("error: the log holds no pytest summary line")


def test_builds_file_is_summed_per_label(tmp_path, capsys):
    log, made = tmp_path / "log", tmp_path / "made.tsv"
    log.write_text(LOG)
    made.write_text("export\texport-aa\t30.0\t11\nint8\tint8-bb\t5.5\t12\nexport\texport-cc\t12.5\t12\n")
    assert suite_durations.builds(made.read_text()) == {"export": [2, 42.5], "int8": [1, 5.5]}
    assert suite_durations.main([str(log), "--label", "x", "--builds", str(made), "--results", str(tmp_path)]) == 0
    page = (tmp_path / "test-durations.md").read_text()
    assert "### Builds made (48 s in all" in page and "| export | 2 | 42.5 |" in page
    made.write_text("export only\n")
    assert suite_durations.main([str(log), "--label", "x", "--builds", str(made), "--results", str(tmp_path)]) == 2
    assert "line 1 of the builds file" in capsys.readouterr().err
