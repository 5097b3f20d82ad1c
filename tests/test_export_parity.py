"""Both export paths against the eager model: the export's own validation and random layouts."""

import json

import numpy as np
import onnx
import pytest
import torch

from builders import onnx_export, validate
from builders.config import load_config
from builders.qwen_vl import layouts
from builders.qwen_vl.family import BUILDERS
from builders.qwen_vl.model import build_random
from tests.support import RANDOM_PACKS, assert_cases_within_tolerance
from vlm_vision_onnx.core import onnx_io, session

PATHS = ["torchscript", "dynamo"]
family = BUILDERS["qwen3-vl"]


@pytest.fixture(scope="module")
def tiny_model():
    return build_random(load_config("qwen3-vl-tiny"), seed=0)


@pytest.mark.parametrize("path", PATHS)
def test_export_report_passes_every_case(tiny_exports, path):
    report = json.loads((tiny_exports[path] / "report.json").read_text())
    cases = report["validation"]["cases"]
    assert report["validation"]["passed"] and all(c["ok"] for c in cases)
    names = [c["case"] for c in cases]
    for required in ("image 224x224", "image 336x336", "image 448x448", "image 512x384", "video t=2 256x256"):
        assert required in names
    assert_cases_within_tolerance(cases)


@pytest.mark.parametrize("path", PATHS)
def test_io_contract(tiny_exports, path):
    model = onnx.load(str(tiny_exports[path] / "model.onnx"))

    def dims(values):
        return {v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim] for v in values}

    assert dims(model.graph.input) == {"pixel_values": ["num_patches", 1536], "grid_thw": ["num_images", 3]}
    assert dims(model.graph.output) == {
        "image_features": ["num_tokens", 96], "deepstack_embeds_0": ["num_tokens", 96],
        "deepstack_embeds_1": ["num_tokens", 96]}
    meta = {p.key: p.value for p in model.metadata_props}
    assert meta["weights"] == "random" and meta["exporter"] == path
    assert json.loads(meta["export_grid_thw"]) == [[1, 16, 16], [1, 12, 20]]


@pytest.mark.parametrize("path", PATHS)
def test_random_layouts_match_eager(tiny_exports, tiny_model, path):
    sess = session.open_session(tiny_exports[path] / "model.onnx")
    rng = np.random.default_rng(7)
    cases = [(str(p), dict(zip(("pixel_values", "grid_thw"), layouts.random_pixels(p, 1536, rng))))
             for p in RANDOM_PACKS]
    records = validate.validate(lambda feed: sess.run(None, feed), family.reference(tiny_model), cases,
                                [o.name for o in sess.get_outputs()], 1e-4)
    failed = [(r["case"], r.get("error") or {k: v["max_abs"] for k, v in r["outputs"].items()})
              for r in records if not r["ok"]]
    assert not failed


def test_unpatched_trace_is_caught_by_validation(tiny_model, tmp_path):
    """Control: the model's own code traced as is must fail the suite (same-N layouts lie silently)."""

    class Unpatched(torch.nn.Module):
        def __init__(self, visual):
            super().__init__()
            self.visual = visual

        def forward(self, pixel_values, grid_thw):
            out = self.visual(pixel_values, grid_thw=grid_thw, return_dict=True)
            return (out.pooler_output, *out.deepstack_features)

    spec = family.io_spec(tiny_model)
    grid = np.array([[1, 16, 16], [1, 12, 20]])
    example = family.example_inputs(tiny_model, grid, 0)
    onnx_io.save_proto(onnx_export.export_torchscript(Unpatched(tiny_model), tuple(example.values()), spec, 18),
                           tmp_path / "model.onnx")
    sess = session.open_session(tmp_path / "model.onnx")
    cases = family.validation_cases(tiny_model, grid, 0)
    records = validate.validate(lambda feed: sess.run(None, feed), family.reference(tiny_model), cases,
                                spec.output_names, 1e-4)
    by_name = {r["case"]: r for r in records}
    same_n = [r for name, r in by_name.items() if name.startswith("same patch count")]
    assert any("error" not in r and not r["ok"] for r in same_n), "a same-N layout should run and be wrong"
    assert not all(r["ok"] for r in records)
