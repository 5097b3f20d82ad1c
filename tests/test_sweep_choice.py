"""bench.sweep's choice of the INT8 and INT4 points that `make export` ships (torch-free, no model)."""

from bench import sweep


def row(label, stage, flags, s, cos, stress):
    return {"label": label, "stage": stage, "flags": flags, "median_s": s, "token_cosine": cos,
            "stress_token_cosine": stress}


def test_int8_choice_is_exact_on_every_cpu_and_checked_for_outliers():
    rows = [
        # fastest and meets both targets, but 8-bit dynamic weights saturate on CPUs without VNNI
        row("full", "int8", ["--method", "dynamic", "--full-range", "--outliers", "exclude"], 1.0, 0.9999, 0.999),
        # not checked for outliers (measured only)
        row("report", "int8", ["--method", "dynamic", "--reduce-range", "--outliers", "report"], 1.1, 0.9999, 0.999),
        row("seven", "int8", ["--method", "dynamic", "--reduce-range", "--outliers", "exclude"], 1.5, 0.9995, 0.995),
        row("nbits", "int8", ["--method", "nbits", "--outliers", "exclude"], 3.0, 0.9999, 0.999),
        row("int4 fast", "int4", ["--block-size", "128"], 2.0, 0.95, 0.4),
        row("int4 near", "int4", ["--block-size", "128"], 2.05, 0.96, 0.4),
        row("int4 slow", "int4", ["--block-size", "32"], 3.0, 0.97, 0.4),
    ]
    best = sweep.choose(rows)
    assert best["int8"] == "seven"
    assert best["int4"] == "int4 near"  # within 5% of the fastest, more accurate
    assert not sweep.shippable(rows[0]["flags"]) and not sweep.shippable(rows[1]["flags"])


def test_int8_choice_prefers_meeting_more_targets_over_speed():
    rows = [row("fast", "int8", ["--outliers", "exclude"], 1.0, 0.9995, 0.9),
            row("slow", "int8", ["--outliers", "exclude"], 3.0, 0.9995, 0.995)]
    assert sweep.choose(rows)["int8"] == "slow"


def test_every_dynamic_point_says_its_weight_range():
    dynamic = [flags for _, stage, flags in sweep.POINTS if "dynamic" in flags]
    assert dynamic and all(("--full-range" in f) != ("--reduce-range" in f) for f in dynamic)


def test_int8_ties_within_5_percent_go_to_the_higher_stress_cosine():
    rows = [row("a", "int8", ["--outliers", "exclude"], 2.19, 0.9995, 0.973),
            row("b", "int8", ["--outliers", "exclude"], 2.29, 0.9998, 0.975),
            row("c", "int8", ["--outliers", "exclude"], 2.40, 0.9999, 0.987)]  # 9.6% slower than a: no tie
    assert sweep.choose(rows)["int8"] == "b"
