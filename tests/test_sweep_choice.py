"""bench.sweep's choice of the INT8 and INT4 points that `make export` ships (torch-free, no model)."""

import json

from bench import sweep, sweep_report


def row(label, stage, flags, s, cos, stress, speedup=1.0, size=0.25):
    return {"label": label, "stage": stage, "flags": flags, "median_s": s, "token_cosine": cos,
            "stress_token_cosine": stress, "worst_token_cosine": 0.5, "speedup": speedup, "size_ratio": size,
            "mib": 100 * size, "fp32_matmuls_excluded": 0, "int8_matmuls": 0}


def test_int8_choice_is_exact_on_every_cpu_and_meets_the_floors():
    rows = [
        # fastest and meets every floor, but 8-bit dynamic weights saturate on CPUs without VNNI
        row("full", "int8", ["--method", "dynamic", "--full-range"], 1.0, 0.9995, 0.999, 3.0),
        row("seven", "int8", ["--method", "dynamic", "--reduce-range"], 1.1, 0.9985, 0.995, 2.7),
        row("nbits", "int8", ["--method", "nbits"], 3.0, 0.9999, 0.999, 1.1),
        row("int4 fast", "int4", ["--block-size", "128"], 2.0, 0.95, 0.9, 1.6),
        row("int4 mixed", "int4", ["--int8-matmuls", "48"], 2.4, 0.981, 0.97, 1.55),
        row("int4 big", "int4", ["--int8-matmuls", "96"], 2.5, 0.99, 0.98, 1.52, size=0.31),
    ]
    best = sweep.choose(rows)
    assert best["int8"] == "seven"
    assert best["int4"] == "int4 mixed"  # the fastest meeting every floor (big is over 30% of fp32)
    assert not sweep.shippable(rows[0])


def test_choice_prefers_meeting_more_floors_over_speed():
    rows = [row("fast", "int8", [], 1.0, 0.9985, 0.9, 3.0),
            row("slow", "int8", [], 3.0, 0.9985, 0.995, 1.2)]
    assert sweep.choose(rows)["int8"] == "fast"  # 2 floors each: speed and random cosine vs random and stress
    rows[1]["speedup"] = 2.6
    assert sweep.choose(rows)["int8"] == "slow"


def test_ties_within_5_percent_go_to_the_more_accurate():
    rows = [row("a", "int4", [], 2.19, 0.981, 0.96, 1.6),
            row("b", "int4", [], 2.29, 0.985, 0.96, 1.6),
            row("c", "int4", [], 2.40, 0.99, 0.99, 1.6)]  # 9.6% slower than a: no tie
    assert sweep.choose(rows)["int4"] == "b"


def test_int4_ties_within_5_percent_go_to_the_smaller_file():
    rows = [row("72 at 8 bits", "int4", [], 3.624, 0.985, 0.993, 1.72, size=0.226),
            row("96 at 8 bits", "int4", [], 3.627, 0.9985, 0.9996, 1.71, size=0.265),
            row("int8", "int8", [], 2.3, 0.9983, 0.998, 2.67, size=0.258)]
    assert sweep.choose(rows)["int4"] == "72 at 8 bits"
    rows[0]["token_cosine"] = 0.975  # misses a floor: no longer a candidate
    assert sweep.choose(rows)["int4"] == "96 at 8 bits"


def test_every_dynamic_point_says_its_weight_range():
    dynamic = [flags for _, stage, flags in sweep.POINTS if "dynamic" in flags]
    assert dynamic and all(("--full-range" in f) != ("--reduce-range" in f) for f in dynamic)


def test_report_and_plot_from_a_result(tmp_path):
    rows = [row(sweep.FP32, "fp32", [], 2.0, 1.0, 1.0, 1.0, 1.0)] + \
        [row("seven", "int8", ["--reduce-range"], 0.8, 0.9985, 0.995, 2.5), row("q4", "int4", [], 1.2, 0.97, 0.9, 1.67)]
    result = {"model": "m", "size": "448x448", "grid_thw": [[1, 28, 28]], "cases": ["image 448x448"], "reps": 1,
              "machine": {"cpu": "cpu", "cores": 2, "memory_gib": 1, "avx512": False, "amx": False, "vnni": False},
              "started": "s", "finished": "f", "load_average_start": 0, "load_average_end": 0, "rows": rows,
              "failed": [], "floors": sweep.FLOORS}
    result["best"] = sweep.choose(rows)
    text = sweep_report.markdown(result, "x.png")
    assert "**(shipped INT8)**" in text and "**(shipped INT4)**" in text
    assert "| min per-token cosine (random weights) ≥ 0.98000 | 0.97000 | **no** |" in text
    sweep_report.plot(json.loads(json.dumps(result)), tmp_path / "x.png")
    assert (tmp_path / "x.png").stat().st_size > 1000
