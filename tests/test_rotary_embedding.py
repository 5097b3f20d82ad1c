"""quantize/passes/rotary_embedding.py on small parsed graphs: q * cos + rotate_half(q) * sin (Slice / Neg / Concat,
cos and sin Unsqueeze(Concat(t, t)) tables, rows optionally permuted into window order), reshaped to the packed
[1, -1, H*D], becomes one com.microsoft RotaryEmbedding per rotated tensor with the same outputs in ONNX Runtime;
a rotation the other way, another split, full-width tables or another reshape stay as they are."""

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from quantize.passes import rotary_embedding

H, D, N = 2, 8, 12  # heads, head dim, patches fed at run time (the graph's N is symbolic)
HALF = D // 2
GROUP = 4  # window-order permutation: rows permuted in groups of GROUP (Qwen2.5-VL's spatial merge unit)


def i64(name: str, values) -> onnx.TensorProto:
    return onnx.numpy_helper.from_array(np.array(values, np.int64), name)


def rotary_model(other_way: bool = False, split: int = HALF, full_tables: bool = False,
                 packed: tuple = (1, -1, H * D), permuted: bool = False, commuted: bool = False) -> onnx.ModelProto:
    """q, k [N, H, D] -> Reshape(x * cos + rotate_half(x) * sin, packed) for x in (q, k), cos and sin
    Unsqueeze(Concat(t, t, axis=-1), [-2]) of c, s [N, D/2] (`full_tables`: of inputs cos_full, sin_full [N, D]
    instead; `permuted`: the Concat's rows permuted in groups of GROUP by the input `window`), as TorchScript exports
    them; `other_way`: Concat(x2, -x1) (-rotate_half), `split`: the slices' split point, `commuted`: the Mul and Add
    operands swapped (sin * rotated + cos * x)."""
    inits = [i64("zero", [0]), i64("split", [split]), i64("end", [np.iinfo(np.int64).max]), i64("last", [-1]),
             i64("one", [1]), i64("mid", [-2]), i64("packed", list(packed))]
    inputs = [h.make_tensor_value_info(name, T.FLOAT, ["N", H, D]) for name in ("q", "k")]
    nodes = []
    for t in ("cos", "sin"):
        if full_tables:
            inputs.append(h.make_tensor_value_info(f"{t}_full", T.FLOAT, ["N", D]))
        else:
            inputs.append(h.make_tensor_value_info(f"{t}_half", T.FLOAT, ["N", HALF]))
            nodes.append(h.make_node("Concat", [f"{t}_half", f"{t}_half"], [f"{t}_full"], axis=-1))
        table = f"{t}_full"
        if permuted:
            nodes += [h.make_node("Reshape", [table, "groups"], [f"{t}_grouped"]),
                      h.make_node("Gather", [f"{t}_grouped", "window"], [f"{t}_windowed"], axis=0),
                      h.make_node("Reshape", [f"{t}_windowed", "rows"], [f"{t}_rows"])]
            table = f"{t}_rows"
        nodes.append(h.make_node("Unsqueeze", [table, "mid"], [t]))  # [N, 1, D]
    if permuted:
        inits += [i64("groups", [N // GROUP, GROUP, -1]), i64("rows", [N, -1])]
        inputs.append(h.make_tensor_value_info("window", T.INT64, [N // GROUP]))
    for x in ("q", "k"):
        nodes += [h.make_node("Slice", [x, "zero", "split", "last", "one"], [f"{x}1"]),  # x[..., :split]
                  h.make_node("Slice", [x, "split", "end", "last", "one"], [f"{x}2"]),  # x[..., split:]
                  h.make_node("Neg", [f"{x}2" if not other_way else f"{x}1"], [f"{x}_neg"]),
                  h.make_node("Concat", [f"{x}_neg", f"{x}1"] if not other_way else [f"{x}2", f"{x}_neg"],
                              [f"{x}_rotated"], axis=-1),
                  h.make_node("Mul", [x, "cos"][::-1 if commuted else 1], [f"{x}_cos"]),
                  h.make_node("Mul", [f"{x}_rotated", "sin"][::-1 if commuted else 1], [f"{x}_sin"]),
                  h.make_node("Add", [f"{x}_cos", f"{x}_sin"][::-1 if commuted else 1], [f"{x}_embedded"]),
                  h.make_node("Reshape", [f"{x}_embedded", "packed"], [f"{x}_out"])]
    outputs = [h.make_tensor_value_info(f"{x}_out", T.FLOAT, None) for x in ("q", "k")]
    graph = h.make_graph(nodes, "rotary", inputs, outputs, inits)
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 18)])


def feeds(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Random q, k; cos and sin of random angles; a window order that moves every group."""
    rng = np.random.default_rng(1)
    values = {}
    for value in proto.graph.input:
        name = value.name
        if name == "window":
            values[name] = np.roll(np.arange(N // GROUP, dtype=np.int64), 1)  # no group stays in place
        elif name in ("q", "k"):
            values[name] = rng.standard_normal((N, H, D)).astype(np.float32)
        else:
            width = HALF if name.endswith("_half") else D
            angles = rng.uniform(-np.pi, np.pi, (N, width))
            values[name] = (np.cos(angles) if name.startswith("cos") else np.sin(angles)).astype(np.float32)
    return values


def run(proto: onnx.ModelProto) -> list[np.ndarray]:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds(proto))


@pytest.mark.parametrize("form", [{}, {"permuted": True}, {"commuted": True}],
                         ids=["rows", "window_order", "commuted"])
def test_q_and_k_rotations_become_rotary_embedding_with_the_same_outputs(form):
    proto = rotary_model(**form)
    model = ir.from_proto(proto)
    assert rotary_embedding.apply(model) == 2
    ops = [n.op_type for n in model.graph]
    rotary = [n for n in model.graph if n.op_type == "RotaryEmbedding"]
    assert len(rotary) == 2 and all(n.domain == "com.microsoft" for n in rotary)
    assert all(n.attributes.get_int("num_heads") == H and n.attributes.get_int("interleaved") == 0 for n in rotary)
    # one position-ids value for every fused node (the same arange(N)): a GPU runtime uploads it once
    assert rotary[1].inputs[1] is rotary[0].inputs[1]
    assert sum(n.op_type == "Range" for n in model.graph) == 1
    for op in ("Neg", "Slice", "Mul", "Add", "Concat"):  # rotate_half and the full-width tables are gone
        assert op not in ops, op
    expected = run(proto)
    produced = run(ir.to_proto(model))
    assert [p.shape for p in produced] == [(1, N, H * D)] * 2
    for got, want in zip(produced, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("change", [{"other_way": True}, {"split": 3}, {"full_tables": True}, {"packed": (-1, H * D)},
                                    {"packed": (1, -1, H, D)}],
                         ids=["other_way", "split_3", "full_tables", "reshape_2d", "reshape_4d"])
def test_any_other_rotation_or_layout_is_left_alone(change):
    proto = rotary_model(**change)
    model = ir.from_proto(proto)
    before = [n.op_type for n in model.graph]
    assert rotary_embedding.apply(model) == 0
    assert [n.op_type for n in model.graph] == before and "RotaryEmbedding" not in before
    for got, want in zip(run(ir.to_proto(model)), run(proto), strict=True):
        np.testing.assert_array_equal(got, want)
