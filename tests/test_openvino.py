"""Right beyond ONNX Runtime: OpenVINO (pinned, the openvino extra) and the ONNX reference evaluator.

- OpenVINO runs the tiny exports of both families through both exporters, and the `--ops standard` exports, at
  every validation layout of their reports (mixed-size packs, image + video packs, same patch count other
  shape, a large image), against the eager model at the export's tolerance.
- The reference evaluator (`onnx.reference`) runs the standard exports at two layouts (a mixed pack with a video
  among them) against the eager model.
- `bench/openvino_loop_bug.py` still reproduces OpenVINO's Loop bug (a canary: when it stops, the docs' known
  limit can go) while ONNX Runtime and the reference evaluator are right on it.
"""

import json
import os

import numpy as np
import pytest

from builders import family as family_builder
from builders.config import load_config
from tests import builds
from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.parity import compare
from vlm_vision_onnx.families import of_model
from vlm_vision_onnx.families import validation as layouts_mod

pytest.importorskip("openvino", reason="the openvino extra is not installed (make install installs it)")

from vlm_vision_onnx.core.openvino_session import OpenVINOSession

#: (config, extra export flags) of the exports read here; the Qwen3-VL TorchScript/dynamo ones come from conftest.
EXPORTS = {
    "qwen2.5-vl torchscript": ("qwen2.5-vl-tiny", []),
    "phi-4-mm torchscript": ("phi-4-mm-tiny", []),
    "phi-4-mm dynamo": ("phi-4-mm-tiny", ["--dynamo"]),
    "qwen3-vl standard": ("qwen3-vl-tiny", ["--ops", "standard"]),
    "qwen2.5-vl standard dynamo": ("qwen2.5-vl-tiny", ["--ops", "standard", "--dynamo"]),
}
STANDARD = [name for name in EXPORTS if "standard" in name]


@pytest.fixture(scope="module")
def exports(tiny_exports) -> dict:
    """{name: export folder}: the conftest Qwen3-VL exports and those of EXPORTS (tests.builds). Read-only."""
    folders = {"qwen3-vl torchscript": tiny_exports["torchscript"], "qwen3-vl dynamo": tiny_exports["dynamo"]}
    return folders | {name: builds.path(builds.export(config, *extra)) for name, (config, extra) in EXPORTS.items()}


_EAGER: dict = {}


def eager(report: dict):
    """inputs -> the eager outputs of the model the export was made from (random weights, its seed)."""
    key = (report["model"], report["seed"])
    if key not in _EAGER:
        config = load_config(report["model"])
        builder = family_builder.of_config(config)
        _EAGER[key] = builder.reference(builder.build(config, None, report["seed"])[0])
    return _EAGER[key]


def layout_cases(folder) -> tuple[dict, list[dict], list[dict]]:
    """(report, layouts, inputs) of every validation layout the export's report lists."""
    model_file = folder / "model.onnx"
    metadata = onnx_io.metadata(model_file)
    family = of_model(metadata, model_file)
    layouts = layouts_mod.layouts_for(model_file, metadata, family)
    return json.loads((folder / "report.json").read_text()), layouts, layouts_mod.layout_inputs(family, layouts,
                                                                                                 metadata)


def check_against_eager(run, folder, indices=None) -> int:
    """Run `run(feeds) -> outputs` at the export's layouts (`indices`: a subset); assert each output within the
    export's tolerance of the eager model. Returns the layouts checked."""
    report, layouts, inputs = layout_cases(folder)
    reference = eager(report)
    chosen = range(len(layouts)) if indices is None else indices
    for i in chosen:
        got, expected = run(inputs[i]), reference(inputs[i])
        for name, ours, ref in zip(report["outputs"], got, expected):
            metrics = compare(ours, ref, report["tolerance"])
            assert metrics["ok"], f"{layouts[i]['case']}: {name} {metrics}"
    return len(chosen)


@pytest.mark.parametrize("name", ["qwen3-vl torchscript", "qwen3-vl dynamo", *EXPORTS])
def test_openvino_runs_the_export_at_every_layout(exports, name):
    session = OpenVINOSession(exports[name] / "model.onnx", threads=1, precision="f32")
    _, layouts, _ = layout_cases(exports[name])
    cases = " ".join(layout["case"] for layout in layouts)
    if name.startswith("qwen"):  # the layouts where OpenVINO's Loop went wrong are among them
        assert "pack" in cases and "video" in cases and "same" in cases, cases
        assert session.specializes  # each attention If replaced by its branch per pack (core.openvino_branches)
    assert check_against_eager(lambda feeds: session.run(None, feeds), exports[name]) == len(layouts)


@pytest.mark.parametrize("name", ["qwen3-vl torchscript", "qwen2.5-vl torchscript", "phi-4-mm torchscript"])
def test_run_each_runs_every_layout_at_once_within_tolerance(exports, name):
    """`run_each` (several inputs at the same time on OpenVINO's streams, the largest first): every validation
    layout, all given at once, each output in its input's place and within the export's tolerance of eager,
    including each first inference at a new shape (Qwen2.5-VL's If, `openvino_session.compile_cpu`)."""
    report, layouts, inputs = layout_cases(exports[name])
    session = OpenVINOSession(exports[name] / "model.onnx", threads=2, precision="f32", at_once=len(inputs))
    found = session.run_each(None, inputs)
    reference = eager(report)
    assert len(found) == len(layouts)
    for layout, feeds, got in zip(layouts, inputs, found):
        for output, ours, ref in zip(report["outputs"], got, reference(feeds)):
            metrics = compare(ours, ref, report["tolerance"])
            assert metrics["ok"], f"{layout['case']}: {output} {metrics}"
    assert session.most_at_once == min(len(inputs), 2) or (os.cpu_count() or 1) < 2, session.most_at_once


def test_prepare_compiles_the_pattern_a_later_run_uses(exports):
    """`prepare` on inputs of one image (zeros, its grid) compiles the model for their pattern of the Ifs; a run of
    another single image then compiles nothing more, and its outputs stay within the export's tolerance."""
    _, _, inputs = layout_cases(exports["qwen3-vl torchscript"])
    session = OpenVINOSession(exports["qwen3-vl torchscript"] / "model.onnx", threads=1, precision="f32")
    single = [i for i, feeds in enumerate(inputs) if len(feeds["grid_thw"]) == 1 and feeds["grid_thw"][0][0] == 1]
    first, other = single[0], single[-1]
    assert inputs[first]["grid_thw"].tolist() != inputs[other]["grid_thw"].tolist()
    warm = {"pixel_values": np.zeros_like(inputs[first]["pixel_values"]),
            "grid_thw": inputs[first]["grid_thw"].tolist()}  # a list: prepare casts to the input's type
    compiles = []
    real = session._branches._compile
    session._branches._compile = lambda model: compiles.append(1) or real(model)
    session.prepare(warm)
    assert compiles == [1]
    assert check_against_eager(lambda feeds: session.run(None, feeds), exports["qwen3-vl torchscript"], [other]) == 1
    assert compiles == [1], "the run compiled again"


@pytest.mark.parametrize("name", STANDARD)
def test_standard_export_has_only_onnx_ops(exports, name):
    import onnx_ir as ir

    model = ir.load(exports[name] / "model.onnx")
    domains = {node.domain for node in ir.traversal.RecursiveGraphIterator(model.graph)}
    assert domains <= {"", "ai.onnx"}, domains
    assert json.loads((exports[name] / "report.json").read_text())["ops"] == "standard"


@pytest.mark.parametrize("name", STANDARD)
def test_reference_evaluator_runs_the_standard_export(exports, name):
    import onnx
    from onnx.reference import ReferenceEvaluator

    evaluator = ReferenceEvaluator(onnx.load(exports[name] / "model.onnx"))
    _, layouts, _ = layout_cases(exports[name])
    mixed = next(i for i, layout in enumerate(layouts) if "pack" in layout["case"])
    assert check_against_eager(lambda feeds: evaluator.run(None, feeds), exports[name], [0, mixed]) == 2


def test_the_loop_bug_reproducer():
    """ONNX Runtime and the reference evaluator are right on the six-op Loop; OpenVINO is not (yet)."""
    import tempfile
    from pathlib import Path

    import onnx

    from bench import openvino_loop_bug

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "loop.onnx"
        onnx.save(openvino_loop_bug.model(), path)
        assert openvino_loop_bug.run("onnxruntime", path) == "right"
        assert openvino_loop_bug.run("reference", path) == "right"
        outcome = openvino_loop_bug.run("openvino", path)
    assert outcome != "right", ("OpenVINO now sizes a Loop output of varying size right: the bug is fixed "
                                "upstream; update docs/runtime-openvino.md's known limits")



def test_a_string_input_is_refused_before_openvino_reads_it(tmp_path):
    """Found by tools/fuzz: OpenVINO 2026.4's ONNX reader ends the process (segmentation fault) on a model whose
    grid_thw is declared a string; the session refuses it first, in one line."""
    import onnx

    model = onnx.load(str(builds.path(builds.QWEN3_VL) / "model.onnx"))
    next(v for v in model.graph.input if v.name == "grid_thw").type.tensor_type.elem_type = onnx.TensorProto.STRING
    onnx.save(model, str(tmp_path / "model.onnx"))
    with pytest.raises(UsageError, match="'grid_thw' has element type string, which OpenVINO cannot read"):
        OpenVINOSession(tmp_path / "model.onnx", threads=1)
