"""Each optimize pass on the tiny encoder of both exporters: what it fuses, and parity at every layout."""

import onnx_ir as ir
import pytest

from quantize import optimize
from tests import support


@pytest.fixture(scope="module", params=["torchscript", "dynamo"])
def stages(request, tiny_exports):
    """{pass key: (model after that pass, its rewrite count)} and the parity checker, per exporter."""
    model_file = tiny_exports[request.param] / "model.onnx"
    checker = support.Checker(model_file)
    model = ir.load(str(model_file))
    after = {}
    for key, (_, run) in optimize.PASSES.items():
        model, made = run(model)
        after[key] = (ir.from_proto(ir.to_proto(model)), made)  # a snapshot: later passes edit in place
    return after, checker


def test_fold_makes_rotate_half_split_static(stages):
    after, checker = stages
    model, _ = after["fold"]
    slices = support.ops(model, "Slice")
    assert slices and all(s.inputs[2].const_value is not None for s in slices if len(s.inputs) > 2)
    checker.max_abs(model)


def test_gemm_to_matmul_leaves_no_gemm(stages):
    after, checker = stages
    model, made = after["gemm"]
    assert made == 4 * support.DEPTH + 2 * 3  # 4 linears per block; 2 per merger (main + 2 deepstack)
    assert not support.ops(model, "Gemm")
    checker.max_abs(model)


def test_ort_optimizer_fuses_gelu_only(stages):
    after, checker = stages
    model, stats = after["ort"]
    assert stats.get("FastGelu") == support.DEPTH  # gelu tanh approximation of the block MLPs
    assert not support.ops(model, "Attention") and not support.ops(model, "SkipLayerNormalization")
    checker.max_abs(model)


def test_rotary_fuses_q_and_k_of_every_block(stages):
    after, checker = stages
    model, made = after["rotary"]
    assert made == 2 * support.DEPTH
    assert not support.ops(model, "Neg")  # rotate_half is gone
    checker.max_abs(model)


def test_no_pass_leaves_skip_layer_norm(stages):
    """ORT's CPU SkipLayerNormalization is ~4x slower than Add + LayerNormalization: every residual norm stays
    the standard pair (this encoder's ORT pass makes none; unskipln splits any it would)."""
    after, checker = stages
    model, made = after["unskipln"]
    assert made == 0 and not support.ops(model, "SkipLayerNormalization")
    # block i: norm1 and norm2, then the mergers' norms (main + 2 deepstack)
    assert len(support.ops(model, "LayerNormalization")) >= 2 * support.DEPTH
    checker.max_abs(model)
