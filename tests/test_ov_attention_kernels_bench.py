"""bench.ov_attention_kernels: every OpenVINO form it times computes the export's attention, and the table says
which kernels ran."""

import numpy as np
import pytest

openvino = pytest.importorskip("openvino")

from bench import ov_attention_kernels as bench


def reference(q, k, v, heads):
    """softmax(q k^T / sqrt(d)) v per head, q/k/v [1, N, C] -> [1, N, C] (numpy, float64)."""
    n, c = q.shape[1], q.shape[2]
    split = [x.reshape(n, heads, c // heads).transpose(1, 0, 2).astype(np.float64) for x in (q, k, v)]
    scores = split[0] @ split[1].transpose(0, 2, 1) / np.sqrt(c // heads)
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    return (weights @ split[2]).transpose(1, 0, 2).reshape(1, n, c)


def test_every_form_is_the_same_attention():
    rows, heads, width = 24, 4, 32
    feeds = {n: np.random.default_rng(i).standard_normal((1, rows, width), dtype=np.float32)
             for i, n in enumerate("qkv")}
    expected = reference(*feeds.values(), heads)
    forms = {"fused MHA": (bench.untransposed(bench.attention_model(1, rows, heads, width)), {}),
             "fused MHA, k^T apart": (bench.attention_model(1, rows, heads, width), {}),
             "snippets off": (bench.attention_model(1, rows, heads, width), {"SNIPPETS_MODE": "DISABLE"}),
             "SDPA op": (bench.sdpa_model(rows, heads, width), {}),
             "SDPA op, KV-cache form": (bench.sdpa_model(rows, heads, width, kv_cache=True), {})}
    for label, (model, extra) in forms.items():
        run = bench.runner(bench.compile_cpu(model, "f32", 1, extra).create_infer_request(), feeds)
        for _ in range(2):  # the KV-cache form's state is reset before each run, so the second equals the first
            out = run()
        np.testing.assert_allclose(next(iter(out.values())), expected, atol=1e-5, err_msg=label)


def test_only_the_kv_cache_form_keeps_the_sdpa_node():
    assert bench.sdpa_kept(bench.compile_cpu(bench.sdpa_model(24, 4, 32, kv_cache=True), "f32", 1, {}))
    assert not bench.sdpa_kept(bench.compile_cpu(bench.sdpa_model(24, 4, 32), "f32", 1, {}))


def test_the_table_names_kernels_and_whether_sdpa_was_kept():
    row = {"median_s": 0.2, "tflops": 0.34, "sdpa_kept": False,
           "profile": [{"type": "Subgraph", "exec": "jit_avx512_bf16", "seconds": 0.19}]}
    result = {"command": "c", "machine": {"cpu": "x", "cores": 2, "memory_gib": 24}, "cpu_flags": ["amx_bf16"],
              "started": "s", "finished": "f", "cases": {"N = 4096, bf16": {"OpenVINO SDPA op": row,
                                                                             "PyTorch sdpa": {**row, "sdpa_kept": None,
                                                                                              "profile": []}}}}
    text = bench.markdown(result)
    assert "| OpenVINO SDPA op | 0.2000 | 0.34 | no | Subgraph jit_avx512_bf16 0.1900 |" in text
    assert "| PyTorch sdpa | 0.2000 | 0.34 |  |  |" in text


def mha_row(subgraph_s: float, median_s: float) -> dict:
    return {"median_s": median_s, "profile": [{"type": "Subgraph", "exec": "jit_avx512_bf16", "seconds": subgraph_s},
                                              {"type": "Transpose", "exec": "unknown_bf16", "seconds": 0.01}]}


def test_the_amx_verdict_comes_from_the_mha_node_time():
    on_amx = bench.amx_verdict(mha_row(0.15, 0.18), mha_row(0.48, 0.52))
    assert "takes 3.20x as long" in on_amx and "run on AMX tiles" in on_amx
    # the node barely slower without AMX: no claim, even when the whole run's time moved more
    not_amx = bench.amx_verdict(mha_row(0.15, 0.18), mha_row(0.16, 0.30))
    assert "too little to say" in not_amx and "AMX tiles" not in not_amx


def test_the_amx_off_rows_come_from_a_capped_child_process():
    rows = bench.without_amx(24, 1, 1)
    assert set(rows) == {"OpenVINO fused MHA (what runs), AMX off", "OpenVINO snippets off, AMX off"}
    for r in rows.values():
        assert r["median_s"] > 0 and r["profile"]
