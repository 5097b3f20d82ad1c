"""Segment attention: the torch op equals the model's per-frame attention, its ONNX lowering equals the
torch op, and the exported and optimized graphs run one fused attention per block with no tensor of
N x N size (checked on the shapes ONNX Runtime records at run time, inside the Loop too)."""

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper
from transformers import vision_utils

from builders.config import load_config
from builders.onnx_export import inline_functions
from builders.qwen_vl import grid as grid_math
from builders.qwen_vl import layouts, patcher
from builders.qwen_vl import segment_attention as seg
from builders.qwen_vl import window_attention as win
from builders.qwen_vl.generations import TORCH_GENERATIONS
from builders.qwen_vl.model import build_random, reference_outputs
from quantize import optimize
from tests.support import PATCH_DIM, quadratic_tensors, runtime_shapes

PACKS = [[[1, 4, 6]], [[1, 18, 46], [3, 4, 8], [1, 2, 64]], [[2, 10, 6], [1, 6, 10], [1, 2, 2]], [[4, 2, 2]]] + \
    layouts.random_grids(np.random.default_rng(5), 2, count=6)
# (single images, a video of equal frames, a mixed pack with a video): patch counts where N x N > N x 1536, the widest row.
#: Windows of Qwen2.5-VL's tiny tower (8 patches): every window full, cut at the right, at the bottom and both, a
#: video, and packs mixing full and cut grids.
WINDOW_PACKS = [[[1, 16, 16]], [[1, 16, 20]], [[1, 22, 16]], [[2, 18, 30]], [[2, 16, 16], [1, 8, 8]],
                [[1, 16, 16], [1, 10, 12]]]
SHAPE_CHECKS = [[[1, 48, 48]], [[1, 64, 64]], [[3, 32, 32]], [[1, 48, 48], [2, 16, 16]]]


TINY = {"qwen2-vl": "qwen2-vl-tiny", "qwen2.5-vl": "qwen2.5-vl-tiny", "qwen3-vl": "qwen3-vl-tiny",
        "qwen3.5": "qwen3.5-tiny"}
#: Qwen2.5-VL's tiny windows: 112 pixels of patch 14 = 8 patches a side.
WINDOW = 8


@pytest.fixture(scope="module")
def tiny_model():
    return build_random(load_config("qwen3-vl-tiny"), seed=0)


@pytest.fixture(scope="module")
def tiny_models():
    return {family: build_random(load_config(name), seed=0) for family, name in TINY.items()}


@pytest.mark.parametrize("family", TINY)
@pytest.mark.parametrize("pack", PACKS, ids=str)
def test_patched_attention_equals_the_models_own(tiny_models, family, pack):
    """Every generation's own attention on frames, and Qwen2.5-VL's on the window-ordered sequence with the
    windows of transformers' `get_vision_window_index`."""
    model, generation = tiny_models[family], TORCH_GENERATIONS[family]
    attention = model.blocks[0].attn
    grid_thw = torch.tensor(pack)
    n = int(grid_thw.prod(-1).sum())
    hidden = torch.randn(n, attention.dim, generator=torch.Generator().manual_seed(n))
    position_embeddings = model.rotary_pos_emb(hidden, vision_utils.get_vision_position_ids(grid_thw, 2))
    windows = [0]
    if generation.facts.windows:
        windows.append(WINDOW)
        _, cu_windows = vision_utils.get_vision_window_index(grid_thw, 2, model.config.window_size, 14)
    for window in windows:
        cu_seqlens = cu_windows if window else vision_utils.get_vision_cu_seqlens(grid_thw)
        setattr(attention, patcher.WINDOW_ATTR, window)
        forward = patcher.segment_attention_forward(generation)
        with torch.no_grad():
            expected = attention(hidden, cu_seqlens=cu_seqlens, position_embeddings=position_embeddings)
            got = forward(attention, hidden, None, position_embeddings, **{patcher.GRID_KWARG: grid_thw})
        delattr(attention, patcher.WINDOW_ATTR)
        torch.testing.assert_close(got, expected, rtol=0, atol=1e-5, msg=f"window {window}")


@pytest.mark.parametrize("pack", PACKS + [[[1, 10, 14]], [[1, 6, 10], [2, 10, 6], [1, 2, 18]]], ids=str)
def test_window_order_equals_transformers(pack):
    """The vectorised window permutation equals transformers' loop (windows of 8 patches, partial at edges)."""
    grid_thw = torch.tensor(pack)
    n = int(grid_thw.prod(-1).sum())
    expected, cu_windows = vision_utils.get_vision_window_index(grid_thw, 2, 112, 14)
    got = grid_math.window_order(grid_math.patch_layout(grid_thw, n, 2), 2, WINDOW)
    torch.testing.assert_close(got, expected.to(got.dtype))
    assert seg.segment_sizes(pack, WINDOW) == torch.diff(cu_windows).tolist()


def _lowering_model(width: int, heads: int, scale: float, window: int = 0, chunk: int = seg.CHUNK_ROWS["contrib"]
                    ) -> onnx.ModelProto:
    """One call of the ONNX function (the frames', or with `window` the windows'), inlined: query, key, value
    [1, N, width], grid_thw [I, 3] -> [1, N, width]."""
    function, attrs = (win.WINDOW_ATTENTION, {"window": window}) if window else (seg.SEGMENT_ATTENTION, {"chunk": chunk})
    proto = function.to_function_proto()
    names = ["query", "key", "value"]
    inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, "N", width]) for x in names]
    inputs.append(helper.make_tensor_value_info("grid_thw", TensorProto.INT64, ["I", 3]))
    node = helper.make_node(proto.name, [*names, "grid_thw"], ["out"], domain=proto.domain,
                            num_heads=heads, scale=scale, **attrs)
    graph = helper.make_graph([node], "lowering", inputs,
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)])
    imports = [helper.make_opsetid("", 18), helper.make_opsetid("com.microsoft", 1),
               helper.make_opsetid(seg.DOMAIN, 1)]
    return inline_functions(helper.make_model(graph, opset_imports=imports, functions=[proto], ir_version=10))


def _expected(q, k, v, grid, heads, scale, window, chunk):
    args = [torch.from_numpy(x) for x in (q, k, v, grid)]
    if window:
        return win.window_attention(*args, heads, scale, window).numpy()
    return seg.segment_attention(*args, heads, scale, chunk).numpy()


def _check_packs(run, width, heads, scale, window, chunk, atol):
    rng = np.random.default_rng(0)
    for pack in PACKS + WINDOW_PACKS:
        n = int(np.prod(pack, 1).sum())
        q, k, v = (rng.standard_normal((1, n, width), dtype=np.float32) for _ in range(3))
        grid = np.asarray(pack, dtype=np.int64)
        got = run({"query": q, "key": k, "value": v, "grid_thw": grid})
        np.testing.assert_allclose(got, _expected(q, k, v, grid, heads, scale, window, chunk), rtol=0, atol=atol,
                                   err_msg=str(pack))


@pytest.mark.parametrize("window, chunk", [(0, seg.CHUNK_ROWS["contrib"]), (0, 16), (0, 5), (4, 0), (WINDOW, 0)])
def test_onnx_lowering_equals_the_torch_op(window, chunk):
    """Frames at the shipped step and at steps that split them into query chunks; windows of 4 and 8 patches
    (every window full, windows cut at the edges, packs of both)."""
    heads, width, scale = 4, 32, 0.125
    session = ort.InferenceSession(_lowering_model(width, heads, scale, window, chunk).SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    _check_packs(lambda feed: session.run(None, feed)[0], width, heads, scale, window, chunk, 1e-5)


@pytest.mark.parametrize("window", [4, WINDOW])
def test_window_lowering_in_standard_ops(window):
    """`--ops standard`: the masked attention lowered too, and a batch of no full windows (frames smaller than a
    window) reshapes."""
    from quantize.passes import standard_attention

    heads, width, scale = 4, 32, 0.125
    model = ir.serde.deserialize_model(_lowering_model(width, heads, scale, window))
    assert standard_attention.apply(model) == 3
    lowered = ir.serde.serialize_model(model)
    assert not [n for n in _all_nodes(ir.serde.deserialize_model(lowered).graph) if n.domain == "com.microsoft"]
    session = ort.InferenceSession(lowered.SerializeToString(), providers=["CPUExecutionProvider"])
    _check_packs(lambda feed: session.run(None, feed)[0], width, heads, scale, window, 0, 1e-5)


@pytest.mark.parametrize("window", [4, WINDOW])
def test_window_lowering_runs_in_openvino(window, tmp_path):
    """OpenVINO (f32) on the windows batched, cut windows and packs alike: its CPU plugin refuses an If whose
    output has no static rank, which ops inside the branch easily give it."""
    from vlm_vision_onnx.core.openvino_session import OpenVINOSession

    heads, width, scale = 4, 32, 0.125
    path = tmp_path / "window.onnx"
    onnx.save(_lowering_model(width, heads, scale, window), path)
    session = OpenVINOSession(path, threads=1, precision="f32")
    _check_packs(lambda feed: session.run(["out"], feed)[0], width, heads, scale, window, 0, 1e-5)


def test_windows_batched_run_without_a_loop():
    """The window function has no Loop; a pack with cut windows runs two attentions (full windows unmasked, the
    cut ones with a key mask), one with every window full runs one, unmasked."""
    model = _lowering_model(32, 4, 0.125, WINDOW)
    nodes = list(_all_nodes(ir.serde.deserialize_model(model).graph))
    assert not [n for n in nodes if n.op_type == "Loop"]
    attention = [n for n in nodes if n.op_type == "MultiHeadAttention"]
    masked = [n for n in attention if len(n.inputs) == 5 and n.inputs[4] is not None]
    assert len(attention) == 3 and len(masked) == 1


# ---------------------------------------------------------------- graph structure and run-time shapes
def test_quadratic_check_catches_packed_scores(tmp_path):
    """Control: an explicit q k^T attention ([1, H, N, N] scores) is flagged by the same check."""
    n, heads, d = 2304, 2, 4
    q = helper.make_tensor_value_info("q", TensorProto.FLOAT, [1, heads, "N", d])
    k_t = helper.make_tensor_value_info("kT", TensorProto.FLOAT, [1, heads, d, "N"])
    graph = helper.make_graph([helper.make_node("MatMul", ["q", "kT"], ["s"]),
                               helper.make_node("Softmax", ["s"], ["p"], axis=-1)], "scores", [q, k_t],
                              [helper.make_tensor_value_info("p", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    feed = {"q": np.ones((1, heads, n, d), np.float32), "kT": np.ones((1, heads, d, n), np.float32)}
    found = quadratic_tensors(runtime_shapes(model, feed, tmp_path), n)
    assert {op for op, _ in found} == {"MatMul", "Softmax"}


def _all_nodes(graph: ir.Graph):
    for node in graph:
        yield node
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                yield from _all_nodes(attr.value)


@pytest.fixture(scope="module", params=["torchscript", "dynamo"])
def graphs(request, tiny_exports) -> dict[str, str]:
    """{'export': path, 'optimized': path} for one exporter (the optimize passes, unchecked: the
    per-pass parity lives in test_quantize_passes)."""
    folder = tiny_exports[request.param]
    model = ir.load(str(folder / "model.onnx"))
    for _, run in optimize.PASSES.values():
        model, _ = run(model)
    optimized = folder.parent / f"{request.param}-optimized.onnx"
    ir.save(model, str(optimized))
    return {"export": str(folder / "model.onnx"), "optimized": str(optimized)}


@pytest.mark.parametrize("stage", ["export", "optimized"])
def test_one_unmasked_fused_attention_per_block(graphs, stage):
    depth = load_config("qwen3-vl-tiny").vision["depth"]
    nodes = list(_all_nodes(ir.load(graphs[stage]).graph))
    attention = [n for n in nodes if n.op_type == "MultiHeadAttention"]
    assert len(attention) == 2 * depth  # per block: the batched branch (segments of one size) and the Loop's step
    assert all(len([i for i in n.inputs if i is not None]) == 3 for n in attention)  # no mask, no bias
    assert not [n for n in nodes if n.op_type in ("Softmax", "Attention")]


@pytest.mark.parametrize("stage", ["export", "optimized"])
def test_no_tensor_of_n_by_n_size(graphs, stage, tmp_path):
    depth = load_config("qwen3-vl-tiny").vision["depth"]
    rng = np.random.default_rng(0)
    for pack in SHAPE_CHECKS:
        pixels, grid = layouts.random_pixels(pack, PATCH_DIM, rng)
        n = pixels.shape[0]
        shapes = runtime_shapes(graphs[stage], {"pixel_values": pixels, "grid_thw": grid}, tmp_path)
        frames = [h * w for t, h, w in pack for _ in range(t)]
        attention = [shape for op, shape in shapes if op == "MultiHeadAttention"]
        if len(set(frames)) == 1:  # one size: each block's one call on all frames as a batch, no Loop
            assert [s[:2] for s in attention] == [[len(frames), frames[0]]] * depth
        else:  # the profile saw inside the Loop: one call per frame
            assert len(attention) == depth * len(frames)
            assert sorted(s[1] for s in attention) == sorted(f for f in frames for _ in range(depth))
        assert not quadratic_tensors(shapes, n), f"{pack}: N = {n}"


@pytest.mark.parametrize("opset", [17, 20])
def test_torchscript_lowering_at_other_opsets(tiny_model, opset):
    """The function body follows the export's opset, so it inlines and runs at every allowed opset."""
    from builders import onnx_export
    from builders.qwen_vl.family import BUILDERS

    family = BUILDERS["qwen3-vl"]
    grid = np.array([[1, 16, 16], [1, 12, 20]])
    spec = family.io_spec(tiny_model)
    model = onnx_export.export_torchscript(family.export_module(tiny_model),
                                           family.example_inputs(tiny_model, grid, 0), spec, opset)
    assert not model.functions and {o.domain: o.version for o in model.opset_import}[""] == opset
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    pixels, pack = layouts.random_pixels([[2, 8, 12], [1, 6, 4]], PATCH_DIM, np.random.default_rng(1))
    got = session.run(None, {"pixel_values": pixels, "grid_thw": pack})
    for ours, eager in zip(got, reference_outputs(tiny_model, pixels, pack)):
        np.testing.assert_allclose(ours, eager, rtol=0, atol=1e-4 * max(1.0, float(np.abs(eager).max())))


@pytest.mark.parametrize("window", [0, WINDOW])
def test_segment_loop_bench_forms_compute_the_same(window):
    """bench.segment_loop's forms (the former sequence Loop, the shipped fixed-size Loop at several chunks, short
    chunks splitting a frame) give the same outputs on a pack whose segments differ in size."""
    from bench import segment_loop

    grid, heads, head_dim = [[1, 12, 10], [2, 6, 4], [1, 2, 18]], 2, 8
    outs = {}
    for form in (segment_loop.SEQUENCE, "fixed loop, Q=16384", "fixed loop, Q=16", "fixed loop, Q=7"):
        feed = segment_loop.feeds(form, grid, window, heads * head_dim)
        session = ort.InferenceSession(segment_loop.build(form, heads, head_dim).SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        outs[form] = session.run(None, feed)[0]
    for form, out in outs.items():
        np.testing.assert_allclose(out, outs[segment_loop.SEQUENCE], rtol=0, atol=1e-5, err_msg=form)
