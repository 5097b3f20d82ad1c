"""`python -m builders.vision --static WIDTHxHEIGHT`: static by the NPU rule, equal to eager and to the dynamic export.

The exports are conftest's `tiny_static` (every Qwen generation at a square and a non-square size, built once).
"""

import json

import numpy as np
import onnx
import pytest

from tests.builds import TINY_STATIC
from tests.conftest import single_error
from vlm_vision_onnx.core import static_graph
from vlm_vision_onnx.core.parity import compare
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.families.static_size import StaticSize

CASES = [(model, size) for model, sizes in TINY_STATIC.items() for size in sizes]


def _eager_and_onnx(folder, model: str, seed: int):
    """(eager outputs, ONNX outputs) on random pixels of the static grid, weights of the export (seed 0)."""
    from builders.config import load_config
    from builders.qwen_vl.model import build_random, reference_outputs

    proto = onnx.load(str(folder / "model.onnx"))
    metadata = {p.key: p.value for p in proto.metadata_props}
    grid = np.array(json.loads(metadata["static_grid_thw"]), dtype=np.int64)
    pixels = np.random.default_rng(seed).standard_normal(
        (int(grid.prod()), int(metadata["patch_dim"]))).astype(np.float32)
    eager = reference_outputs(build_random(load_config(model), 0), pixels, grid)
    return eager, open_session(folder / "model.onnx").run(None, {"pixel_values": pixels}), pixels, grid


@pytest.mark.parametrize("model,size", CASES)
def test_static_by_the_rule_and_equal_to_eager(tiny_static, model, size):
    folder = tiny_static[model, size]
    proto = onnx.load(str(folder / "model.onnx"))
    assert static_graph.problems(proto) == []
    assert [i.name for i in proto.graph.input] == ["pixel_values"]  # the grid is the model's, not an input
    assert not {n.op_type for n in proto.graph.node} & static_graph.DYNAMIC_OPS
    assert {n.domain for n in proto.graph.node} <= {"", "ai.onnx"}  # attention is MatMul + Softmax, no contrib op
    report = json.loads((folder / "report.json").read_text())
    assert report["validation"]["passed"] and len(report["validation"]["cases"]) == 2
    eager, onnx_out, _, _ = _eager_and_onnx(folder, model, seed=7)  # pixels the export never saw
    for got, want in zip(onnx_out, eager):
        assert compare(got, want, report["tolerance"])["ok"]


def test_dynamo_static_export(tiny_static):
    folder = tiny_static["qwen2.5-vl-tiny", "196x140", "dynamo"]
    report = json.loads((folder / "report.json").read_text())
    assert report["exporter"] == "dynamo" and report["validation"]["passed"]
    assert static_graph.problems(onnx.load(str(folder / "model.onnx"))) == []
    eager, onnx_out, _, _ = _eager_and_onnx(folder, "qwen2.5-vl-tiny", seed=7)
    assert compare(onnx_out[0], eager[0], report["tolerance"])["ok"]


def test_qwen2_5_partial_windows_are_batched_by_size(tiny_static):
    """10 x 14 patches, windows of 8: 8x8, 8x6, 2x8 and 2x6 windows, one batched attention each in the two window
    blocks; the full-attention blocks attend the frame in one."""
    from builders.config import load_config

    config = load_config("qwen2.5-vl-tiny").vision
    proto = onnx.load(str(tiny_static["qwen2.5-vl-tiny", "196x140"] / "model.onnx"))
    full = len(config["fullatt_block_indexes"])
    softmaxes = sum(n.op_type == "Softmax" for n in proto.graph.node)
    assert softmaxes == full * 1 + (config["depth"] - full) * 4


def test_equal_to_the_dynamic_export(tiny_static, tiny_exports):
    """The same weights (seed 0) and pixels: the static 96x64 Qwen3-VL against the dynamic export at grid [1, 4, 6]."""
    _, static_out, pixels, grid = _eager_and_onnx(tiny_static["qwen3-vl-tiny", "96x64"], "qwen3-vl-tiny", seed=3)
    assert grid.tolist() == [[1, 4, 6]]
    dynamic = open_session(tiny_exports["torchscript"] / "model.onnx").run(None, {"pixel_values": pixels,
                                                                                   "grid_thw": grid})
    assert len(dynamic) == len(static_out) == 3  # image features and two DeepStack outputs
    for got, want in zip(static_out, dynamic):
        assert compare(got, want, 1e-4)["ok"]


def test_plan_puts_rows_back_in_order():
    import torch

    from builders.qwen_vl.static_attention import Plan, batched_attention

    sizes = [4, 2, 4, 1, 2]
    plan = Plan.from_sizes(sizes)
    assert [(g.size, g.count) for g in plan.groups] == [(4, 2), (2, 2), (1, 1)]
    q, k, v = (torch.randn(sum(sizes), 2, 3) for _ in range(3))
    want, start = [], 0
    for size in sizes:  # segment by segment, as the eager model does
        s = slice(start, start + size)
        probs = torch.softmax(torch.einsum("qhd,khd->hqk", q[s], k[s]) * 0.5, dim=-1)
        want.append(torch.einsum("hqk,khd->qhd", probs, v[s]).reshape(size, 6))
        start += size
    assert torch.allclose(batched_attention(q, k, v, plan, 0.5), torch.cat(want), atol=1e-6)


def test_off_grid_size_refused_before_any_work(tmp_path, capsys):
    from builders import vision

    out = tmp_path / "out"
    assert vision.main(["--model", "qwen2-vl-tiny", "--static", "100x57", "--out", str(out)]) == 2
    line = single_error(capsys.readouterr().err)
    assert "off the patch grid" in line and "28 pixels" in line and "112x56, 84x56" in line
    assert not out.exists()


@pytest.mark.parametrize("args,words", [
    (["--model", "qwen3-vl-tiny", "--static", "64x64", "--example-grid", "1,4,4"], "exclude each other"),
    (["--model", "qwen3-vl-tiny", "--static", "3x64x64"], "multiple of the temporal patch 2"),
    (["--model", "qwen3-vl-tiny", "--static", "64x64", "--dynamo", "--dynamic-shapes", "auto"], "exclude each other"),
    (["--model", "qwen3-vl-tiny", "--static", "64"], "takes WIDTHxHEIGHT"),
])
def test_static_bad_input(tmp_path, capsys, args, words):
    from builders import vision

    out = tmp_path / "out"
    assert vision.main([*args, "--out", str(out)]) == 2
    assert words in single_error(capsys.readouterr().err)
    assert not out.exists()


def test_static_size_grid_and_nearest():
    assert StaticSize.parse("448x336").grid(14, 2, 2) == [1, 24, 32]
    assert StaticSize.parse("4x64x32").grid(16, 2, 2) == [2, 2, 4]
    assert StaticSize.parse("4x64x32").name == "4x64x32"
    with pytest.raises(Exception, match="nearest valid sizes: 448x448, 448x480"):
        StaticSize.parse("450x450").grid(16, 2, 2)
