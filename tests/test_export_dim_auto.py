"""`python -m builders.vision --dynamo --dynamic-shapes auto`: Dim.AUTO on every input dim, checked against the
named-Dim mode (graphs and parity), the dims torch specialised reported, refusals naming the dim and the guard."""

import json
from collections import Counter

import numpy as np
import onnx
import pytest
import torch

from builders import onnx_export, vision
from builders.config import load_config
from builders.phi4_mm import family as phi4
from tests import builds
from tests.conftest import single_error
from vlm_vision_onnx.core import session
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families.phi4_mm import FAMILY as PHI4


def op_counts(model: onnx.ModelProto) -> Counter:
    """{op: count}, Loop bodies included."""
    counts = Counter()

    def walk(graph):
        for node in graph.node:
            counts[node.op_type] += 1
            for attr in node.attribute:
                for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                    walk(sub)

    walk(model.graph)
    return counts


def io_dims(model: onnx.ModelProto) -> dict:
    return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
            for v in list(model.graph.input) + list(model.graph.output)}


@pytest.fixture(scope="module")
def auto_export():
    """`builders.vision --dynamo --dynamic-shapes auto` of the tiny config (tests.builds). Read-only."""
    return builds.path(builds.export("qwen3-vl-tiny", "--dynamo", "--dynamic-shapes", "auto"))


def test_qwen3_vl_auto_equals_named(auto_export, tiny_exports):
    """Same ops (count by type, and node for node), same I/O contract, same parity at every validation layout."""
    auto, named = (onnx.load(str(f / "model.onnx")) for f in (auto_export, tiny_exports["dynamo"]))
    assert op_counts(auto) == op_counts(named)
    assert [n.op_type for n in auto.graph.node] == [n.op_type for n in named.graph.node]
    weights = [sorted((t.data_type, tuple(t.dims), onnx.numpy_helper.to_array(t).tobytes()) for t in m.graph.initializer)
               for m in (auto, named)]
    assert weights[0] == weights[1]  # the same values (the exporter numbers its constants' names differently)
    assert io_dims(auto) == io_dims(named) == {
        "pixel_values": ["num_patches", 1536], "grid_thw": ["num_images", 3], "image_features": ["num_tokens", 96],
        "deepstack_embeds_0": ["num_tokens", 96], "deepstack_embeds_1": ["num_tokens", 96]}
    reports = [json.loads((f / "report.json").read_text()) for f in (auto_export, tiny_exports["dynamo"])]
    assert reports[0]["validation"]["passed"] and reports[1]["validation"]["passed"]
    for a, b in zip(*(r["validation"]["cases"] for r in reports)):
        assert a["case"] == b["case"] and a["ok"]
        assert {k: o["max_abs"] for k, o in a["outputs"].items()} == {k: o["max_abs"] for k, o in b["outputs"].items()}
    assert reports[1]["dynamic_shapes"]["mode"] == onnx_export.DEFAULT_DYNAMIC_SHAPES == "named"


def test_qwen3_vl_auto_reports_each_dim(auto_export):
    shapes = json.loads((auto_export / "report.json").read_text())["dynamic_shapes"]
    assert shapes["mode"] == "auto" and shapes["specialised"] == [] and shapes["pinned"] == []
    dims = {(d["input"], d["axis"]): d for d in shapes["dims"]}
    assert dims[("pixel_values", 0)]["contract"] == "num_patches" and dims[("grid_thw", 0)]["contract"] == "num_images"
    assert all(d["torch"].startswith("symbolic") for d in dims.values())  # 1536 and 3 too: pinned in the ONNX only
    assert dims[("pixel_values", 1)]["contract"] == "static" and shapes["guards"] and shapes["unreadable_guards"] == []


def test_phi4_auto_keeps_static_dims_symbolic_and_adds_ops():
    """Why `named` stays the default: on Phi-4-multimodal Dim.AUTO leaves the contract's static dims (3, 448, 448,
    32, 32, 2) symbolic, and the graph computes with them (more shape ops) though its outputs are the same."""
    config = load_config("phi-4-mm-tiny")
    embed = phi4.build(config, None, seed=0)[0]
    spec = phi4.io_spec(embed)
    example = phi4.example_inputs(embed, phi4.EXAMPLE_IMAGES, seed=0)
    args = tuple(example[n] for n in spec.input_names)
    models, facts = {}, {}
    for mode in onnx_export.DYNAMIC_SHAPES:
        facts[mode] = {}
        models[mode] = onnx_export.export_dynamo(phi4.export_module(embed), args, spec, config.opset, mode, facts[mode])
        onnx_export.name_io_dims(models[mode], spec)
    assert io_dims(models["auto"]) == io_dims(models["named"])
    assert sum(op_counts(models["auto"]).values()) > sum(op_counts(models["named"]).values())
    assert facts["auto"]["specialised"] == [] and {d["torch"].split()[0] for d in facts["auto"]["dims"]} == {"symbolic"}
    sessions = {mode: session.open_session(m) for mode, m in models.items()}
    rng = np.random.default_rng(0)
    for _, layout in PHI4.default_layouts({}):
        feed = PHI4.layout_inputs(layout, {}, rng)
        auto, named = (sessions[m].run(None, feed)[0] for m in ("auto", "named"))
        np.testing.assert_array_equal(auto, named)


def test_refuses_a_specialised_dim(tmp_path, capsys):
    """A one-image example: torch.export specialises num_images to 1 under Dim.AUTO (0/1 specialisation)."""
    out = tmp_path / "export"
    capsys.readouterr()
    code = vision.main(["--model", "qwen3-vl-tiny", "--dynamo", "--dynamic-shapes", "auto", "--example-grid", "1,16,16",
                        "--out", str(out)])
    line = single_error(capsys.readouterr().err)
    assert code == 2 and not out.exists()
    assert "grid_thw axis 0 (num_images, 1 in the example) specialised to 1" in line
    assert "torch.export specialises every dim that is 0 or 1 in the example" in line


class Pinned(torch.nn.Module):
    """x [n, 8] read as [2, 248, 8]: torch keeps n symbolic under Dim.AUTO but guards n * 8 == 3968."""

    def forward(self, x):
        return x.reshape(2, 248, 8).sum(1)


def test_refuses_a_dim_pinned_by_a_guard():
    spec = onnx_export.IOSpec(["x"], ["y"], {"x": {0: "n"}, "y": {}})
    with pytest.raises(UsageError) as err:
        onnx_export.export_dynamo(Pinned(), (torch.randn(496, 8),), spec, 18, "auto")
    message = str(err.value)
    assert "x axis 0 (n, 496 in the example) symbolic" in message and "pinned to 496 by a guard" in message
    assert "guard (L['x'].size()[1]*L['x'].size()[0]) == 3968" in message


def test_dynamic_shapes_needs_dynamo(tmp_path, capsys):
    capsys.readouterr()
    assert vision.main(["--model", "qwen3-vl-tiny", "--dynamic-shapes", "auto", "--out", str(tmp_path / "x")]) == 2
    assert single_error(capsys.readouterr().err) == "error: --dynamic-shapes applies to the torch.export path: add --dynamo"
