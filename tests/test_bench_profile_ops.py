"""`python -m bench.profile_ops`: a synthetic ORT trace aggregated into categories (Loop bodies, warm-up and
median run), and the command end to end on a tiny int8 model (a missing variant skipped, none: exit 2)."""

import json

import numpy as np
import pytest

from bench import profile_ops
from quantize import __main__ as cli
from quantize import optimize as optimize_stage
from quantize.options import StageRun
from tests.conftest import single_error


def kernel(op: str, ts: float, dur: float, name: str | None = None) -> dict:
    """A kernel event as ORT writes it (the args trimmed to what the trace always has)."""
    return {"cat": "Node", "pid": 1, "tid": 1, "ph": "X", "ts": ts, "dur": dur,
            "name": f"{name or op.lower()}_kernel_time", "args": {"op_name": op, "provider": "CPUExecutionProvider"}}


def session_event(name: str, ts: float, dur: float) -> dict:
    return {"cat": "Session", "pid": 1, "tid": 1, "ph": "X", "ts": ts, "dur": dur, "name": name, "args": {}}


def one_run(start: float, f: float) -> list[dict]:
    """One model run at `start`, every duration scaled by `f` (us): 415 * f of node time in all.

    Top level: DynamicQuantizeLinear 10, MatMulInteger 40, a Loop spanning 300 (MultiHeadAttention 150, an If
    spanning 100 around a Softmax 60, a Reshape 20: the Loop's own time 30, the If's 40), SkipLayerNormalization
    30, FastGelu 5, RotaryEmbedding 7, Add 3, DynamicQuantizeMatMul 20."""
    t = start
    events = [session_event("model_run", t, 1000 * f), session_event("SequentialExecutor::Execute", t + 1, 990 * f),
              kernel("DynamicQuantizeLinear", t + 10 * f, 10 * f),
              kernel("MatMulInteger", t + 25 * f, 40 * f),
              kernel("Loop", t + 100 * f, 300 * f),
              session_event("SequentialExecutor::Execute", t + 101 * f, 298 * f),  # the body's executor
              kernel("MultiHeadAttention", t + 105 * f, 150 * f),
              kernel("If", t + 260 * f, 100 * f),
              kernel("Softmax", t + 270 * f, 60 * f),
              kernel("Reshape", t + 365 * f, 20 * f),
              kernel("SkipLayerNormalization", t + 410 * f, 30 * f),
              kernel("FastGelu", t + 450 * f, 5 * f),
              kernel("RotaryEmbedding", t + 460 * f, 7 * f),
              kernel("Add", t + 470 * f, 3 * f),
              kernel("DynamicQuantizeMatMul", t + 480 * f, 20 * f)]
    # fence events of older ORTs: not kernel time
    events.append({**kernel("Add", t + 469 * f, 1, "add"), "name": "add_fence_before"})
    return events


def test_aggregate_a_synthetic_trace():
    trace = [session_event("model_loading_uri", 0, 50), session_event("session_initialization", 60, 100)]
    trace += one_run(1_000, 5)  # warm-up: left out
    trace += one_run(10_000, 3) + one_run(20_000, 1) + one_run(30_000, 2)  # the median run is f = 2
    result = profile_ops.aggregate(trace, warmup=1)
    assert result["runs"] == 3
    assert result["node_ms_per_run"] == [1.245, 0.415, 0.83]
    assert result["node_ms"] == 0.83
    ms = {name: c["ms"] for name, c in result["categories"].items()}
    assert ms == {"quantize/dequantize": 0.02, "integer MatMul": 0.12, "fp32 MatMul/Gemm": 0.0,
                  "attention": 0.56,  # MultiHeadAttention 150 + Softmax 60 + the Loop's own 30 + the If's own 40, x2
                  "LayerNorm": 0.06, "activation": 0.01, "RoPE": 0.014,
                  "other": 0.046}  # Reshape 20 + Add 3, x2
    assert sum(ms.values()) == pytest.approx(result["node_ms"])
    assert sum(c["share"] for c in result["categories"].values()) == pytest.approx(1, abs=1e-3)
    assert result["categories"]["attention"]["share"] == round(280 / 415, 4)
    ops = result["ops"]
    assert list(ops)[:3] == ["MultiHeadAttention", "Softmax", "MatMulInteger"]
    assert ops["Loop"] == {"category": "attention", "calls": 1, "ms": 0.06, "share": round(30 / 415, 4)}
    assert ops["If"]["category"] == "attention" and ops["If"]["ms"] == 0.08
    assert ops["Add"]["calls"] == 1  # the fence event is not a kernel
    loop = result["subgraphs"]["Loop"]
    assert loop["span_ms"] == 0.6 and loop["self_ms"] == 0.06 and loop["calls"] == 1
    assert loop["body_ms"] == {"MultiHeadAttention": 0.3, "Softmax": 0.12, "If": 0.08, "Reshape": 0.04}
    assert loop["self_ms"] + sum(loop["body_ms"].values()) == pytest.approx(loop["span_ms"])
    assert result["subgraphs"]["If"]["body_ms"] == {"Softmax": 0.12}


def test_aggregate_needs_a_run_after_the_warm_up():
    with pytest.raises(ValueError, match="no model run"):
        profile_ops.aggregate(one_run(0, 1), warmup=1)


@pytest.fixture(scope="module")
def tiny_build(tiny_exports, tmp_path_factory):
    """BUILD/tiny/int8/model.onnx: the tiny export optimized (no per-pass checks) and quantized dynamic int8."""
    build = tmp_path_factory.mktemp("profile-build")
    optimized = build / "optimized-input"
    optimize_stage.run(tiny_exports["torchscript"], optimized, set(), StageRun(threads=1))
    assert cli.main(["int8", str(optimized), str(build / "tiny" / "int8"), "--threads", "1",
                     "--outliers", "off"]) == 0
    return build


def test_profiles_a_tiny_int8_model_end_to_end(tiny_build, tmp_path, capsys):
    out = tmp_path / "results"
    argv = ["--model", "tiny", "--build", str(tiny_build), "--variants", "int8,int4", "--size", "64x96",
            "--reps", "1", "--out", str(out)]
    assert profile_ops.main(argv) == 0
    assert "int4:" in capsys.readouterr().err  # the missing variant: one line, then the others
    result = json.loads((out / "profile-tiny.json").read_text())
    assert result["command"] == "python -m bench.profile_ops " + " ".join(argv)
    assert set(result["layout"]) == {"grid_thw"} and set(result["missing"]) == {"int4"}
    assert result["pixel_values_shape"][0] == np.prod(result["layout"]["grid_thw"], 1).sum()
    record = result["variants"]["int8"]
    assert record["runs"] == 1 and record["wall"]["median_s"] > 0 and record["node_ms"] > 0
    cats = record["categories"]
    assert cats["integer MatMul"]["ms"] > 0 and cats["attention"]["ms"] > 0 and cats["LayerNorm"]["ms"] > 0
    # ORT fuses DynamicQuantizeLinear + MatMulInteger into DynamicQuantizeMatMul when it loads the model
    assert "DynamicQuantizeMatMul" in record["ops"]
    # one photo: each block's segment attention takes the If's batched branch (one MHA), not the Loop
    assert record["ops"]["If"]["calls"] == 4 and "MultiHeadAttention" in record["subgraphs"]["If"]["body_ms"]
    assert "Loop" not in record["ops"]
    assert sum(c["ms"] for c in cats.values()) == pytest.approx(record["node_ms"], abs=0.01)
    text = (out / "profile-tiny.md").read_text()
    assert "## int8" in text and "Largest non-MatMul costs" in text and "DynamicQuantizeMatMul" in text
    assert "Missing (not profiled): int4" in text


def test_no_variant_present_is_one_error_line(tmp_path, capsys):
    code = profile_ops.main(["--model", "tiny", "--build", str(tmp_path), "--out", str(tmp_path / "out")])
    assert code == 2
    assert "make export MODEL=tiny" in single_error(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()
