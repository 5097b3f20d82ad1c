"""bench.export_bench: the ov-int8 stage runs as `make export` runs it, and its cost is put against the rest of
`make export` (issue 57's target: at most a third)."""

from pathlib import Path

from bench import export_bench


def test_the_ov_int8_stage_runs_as_make_export_runs_it():
    argv = export_bench.commands(["--model", "m"], Path("w"), "", "", "--smooth-alpha 0.5")["ov-int8"]
    assert argv == ["-m", "quantize", "ov-int8", "w/optimized", "w/ov-int8", "--smooth-alpha", "0.5", "--if-shipped"]


def test_its_share_of_the_rest_of_make_export():
    records = [{"stage": s, "wall_s": w, "exit": 0} for s, w in
               (("export-torchscript", 180), ("export-dynamo", 200), ("surgery", 70), ("optimize", 180),
                ("int8", 230), ("int4", 220), ("ov-int8", 260))]
    line = export_bench.ov_int8_share(records)
    assert "260 s against 880 s" in line and "**0.30**" in line and "met" in line and "missed" not in line
    assert "missed" in export_bench.ov_int8_share([*records[:-1], {"stage": "ov-int8", "wall_s": 300, "exit": 0}])
    assert export_bench.ov_int8_share(records[:-1]) == ""  # no ov-int8 run here
