"""The fp16 stage (`python -m quantize fp16`): finite and within 0.999 of fp32 at every validation layout, on
random weights and on the outlier-stress copy, emulated and on the CPU EP; the pass, the emulation and the
plan each against a control that shows what they are for; refusals; the package's `_fp16` variant."""

import json
import shutil

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from quantize import __main__ as cli
from quantize import fp16, fp16_emulation, fp16_plan, outlier_check, outliers, quantizers, stage
from quantize.passes import elem_types, float16
from tests import builds
from tests.conftest import single_error
from vlm_vision_onnx.core import onnx_io, parity
from vlm_vision_onnx.core.errors import CheckFailed
from vlm_vision_onnx.core.session import open_session

RUNS = ("validation", "cpu_execution_provider")


@pytest.fixture(scope="module")
def fp16_stage():
    """The fp16 stage folder of the tiny optimized model, through the command line (builds.stage). Read-only."""
    return builds.path(builds.stage(builds.QWEN3_VL_OPTIMIZED, "fp16"))


def test_every_layout_finite_and_within_floor(fp16_stage, tiny_optimized):
    report = json.loads((fp16_stage / "report.json").read_text())
    layouts = [c["case"] for c in json.loads((tiny_optimized / "report.json").read_text())["validation"]["cases"]]
    stress = report["outlier_stress"]
    runs = [report[k] for k in RUNS] + [stress["validation"], stress["cpu_execution_provider"]]
    assert len(layouts) == 14 and report["finite"] and stress["mode"] == "exclude"
    for run in runs:
        assert [c["case"] for c in run["cases"]] == layouts
        for case in run["cases"]:
            for output in case["outputs"].values():
                assert "nonfinite" not in output and output["min_token_cosine"] >= fp16.DEFAULT_MIN_COSINE
        assert run["finite"] and run["min_token_cosine"] >= fp16.DEFAULT_MIN_COSINE
    assert report["min_token_cosine"] == min(r["min_token_cosine"] for r in runs)
    assert "emulated" in report["validation"]["run"] and "CPU EP" in report["cpu_execution_provider"]["run"]


def test_fp16_weights_fp32_contract_and_kept_nodes(fp16_stage, tiny_optimized):
    model = onnx.load(str(fp16_stage / "model.onnx"))
    source = onnx.load(str(tiny_optimized / "model.onnx"))
    io = [(v.name, v.type.tensor_type.elem_type) for v in list(model.graph.input) + list(model.graph.output)]
    assert io == [(v.name, v.type.tensor_type.elem_type) for v in list(source.graph.input) + list(source.graph.output)]
    weights = {t.name: t.data_type for t in model.graph.initializer}
    matmul_weights = [n.input[1] for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights]
    assert matmul_weights and all(weights[w] == TensorProto.FLOAT16 for w in matmul_weights)
    names = [n.name for n in model.graph.node]
    assert len(names) == len(set(names))
    precision = json.loads((fp16_stage / "report.json").read_text())["precision"]
    kept = {n["op"] for n in precision["fp32_nodes"]}
    assert kept == {"Add", "LayerNormalization"}  # the residual sums a LayerNormalization reads, and the norms
    assert all(("normalisation" if n["op"] == "LayerNormalization" else "residual") in n["reason"]
               for n in precision["fp32_nodes"])
    assert precision["fp16_nodes"] > 0 and precision["fp32_outside_data_path"] > 0
    # the rotary angles (grid math) stay float32: Cos and Sin read float32 tensors
    cos = next(n for n in model.graph.node if n.op_type == "Cos")
    typed = {v.name: v.type.tensor_type.elem_type for v in model.graph.value_info}
    assert typed.get(cos.output[0], TensorProto.FLOAT) == TensorProto.FLOAT


def cpu_ep_precision(model_file, folder) -> dict[str, set[str]]:
    """{op: {"float16", "float32"}}: the element types of the float inputs each compute node of `model_file`
    reads as ONNX Runtime's CPU EP runs it (graph optimizations off: only its fallback Casts are added)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.optimized_model_filepath = str(folder / "as-run.onnx")
    ort.InferenceSession(str(model_file), options, providers=["CPUExecutionProvider"])
    found: dict[str, set[str]] = {}
    names = {TensorProto.FLOAT16: "float16", TensorProto.FLOAT: "float32"}

    def walk(graph, types):
        types = {**types, **{v.name: v.type.tensor_type.elem_type for v in [*graph.input, *graph.value_info]},
                 **{t.name: t.data_type for t in graph.initializer}}
        for node in graph.node:
            for attr in node.attribute:
                if attr.HasField("g"):
                    walk(attr.g, types)
            read = {names[types[i]] for i in node.input if types.get(i) in names}
            if node.op_type not in ("Cast", "Shape", "Size") and read:
                found.setdefault(node.op_type, set()).update(read)

    walk(onnx.shape_inference.infer_shapes(onnx.load(str(folder / "as-run.onnx"))).graph, {})
    return found


def test_cpu_ep_runs_most_fp16_ops_in_float32(fp16_stage, tmp_path):
    """Why the emulation exists (ORT 1.31, x86 CPU EP): MatMul and attention of the fp16 model read float32
    tensors there (fallback Casts around them); of the compute ops only RotaryEmbedding reads float16."""
    precision = cpu_ep_precision(fp16_stage / "model.onnx", tmp_path)
    for op in ("MatMul", "MultiHeadAttention"):
        assert precision[op] == {"float32"}, (op, precision[op])
    assert precision["RotaryEmbedding"] == {"float16"}


def _shared_gamma_model() -> onnx.ModelProto:
    """x [4, 8] -> MatMul -> LayerNorm(g, b) -> MatMul -> LayerNorm(g, b) -> y: two norms share gamma and beta,
    which the MatMuls' fp16 side and the norms' fp32 side both need."""
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.standard_normal((8, 8)).astype(np.float32), "w2"),
             numpy_helper.from_array(np.ones(8, np.float32), "g"), numpy_helper.from_array(np.zeros(8, np.float32), "b")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"], name="mm1"),
             helper.make_node("LayerNormalization", ["a", "g", "b"], ["n1"], name="ln1"),
             helper.make_node("Mul", ["n1", "g"], ["m"], name="scale"),
             helper.make_node("MatMul", ["m", "w2"], ["c"], name="mm2"),
             helper.make_node("LayerNormalization", ["c", "g", "b"], ["y"], name="ln2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def test_pass_writes_one_cast_per_value(tmp_path):
    """The pass writes one Cast per value and precision. Control: onnxruntime.transformers.float16 of ORT 1.31 wrote
    one same-named cast node per blocked consumer of a shared fp16 tensor, and ORT refused its model ("two nodes
    with same node name"); 1.32's (pinned) shares one cast per value and its model loads (this test shows it).
    The pass stays for what that converter still needs: ONNX shape inference, which stops at com.microsoft nodes,
    and the model in memory (no external weights)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    proto = _shared_gamma_model()
    theirs = convert_float_to_float16(_shared_gamma_model(), keep_io_types=True, op_block_list=["LayerNormalization"])
    names = [n.name for n in theirs.graph.node]
    assert len(names) == len(set(names)), "onnxruntime's converter duplicates cast names again (as in 1.31)"
    assert [n.input[1] for n in theirs.graph.node if n.op_type == "LayerNormalization"] == ["g_cast_to_fp32"] * 2
    open_session(theirs)
    model = onnx_io.load(_save(proto, tmp_path / "fp32.onnx"))
    elem_types.infer(model)
    half = {n for n in model.graph if n.op_type in ("MatMul", "Mul")}
    done = float16.convert(model, half)
    onnx_io.save(model, tmp_path / "fp16.onnx")
    ours = onnx.load(str(tmp_path / "fp16.onnx"))
    casts = [(n.input[0], n.attribute[0].i) for n in ours.graph.node if n.op_type == "Cast"]
    assert len(casts) == len(set(casts)) and len({n.name for n in ours.graph.node}) == len(ours.graph.node)
    assert done.half_nodes == 3 and done.shared_weights == ["g"]  # the norms keep gamma fp32, Mul reads an fp16 copy
    x = {"x": np.random.default_rng(1).standard_normal((4, 8)).astype(np.float32)}
    ref = open_session(proto).run(None, x)[0]
    got = open_session(tmp_path / "fp16.onnx").run(None, x)[0]
    assert parity.min_token_cosine(got, ref) > 0.999


def _save(proto: onnx.ModelProto, path):
    onnx.save(proto, str(path))
    return path


def _overflowing_matmuls(tmp_path):
    """x [1, 1] -> MatMul(300) -> a = 300 x (90,000 at x = 300: past float16's 65,504) -> MatMul(0.001) -> y,
    both MatMuls float16 (CPU EP has no float16 MatMul)."""
    nodes = [helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
             helper.make_node("MatMul", ["x16", "w1"], ["a"]), helper.make_node("MatMul", ["a", "w2"], ["b"]),
             helper.make_node("Cast", ["b"], ["y"], to=TensorProto.FLOAT)]
    inits = [numpy_helper.from_array(np.array([[300.0]], np.float16), "w1"),
             numpy_helper.from_array(np.array([[0.001]], np.float16), "w2")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 1])], inits)
    return _save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10),
                 tmp_path / "overflow.onnx")


def test_emulation_overflows_where_float16_storage_does(tmp_path):
    """Control: ORT's CPU EP runs both float16 MatMuls in float32 and drops the rounding between them, so the
    90,000 intermediate never overflows there; the emulation rounds it to float16 (inf), as float16 storage does."""
    src = _overflowing_matmuls(tmp_path)
    x = {"x": np.array([[300.0]], np.float32)}
    on_cpu = open_session(src).run(None, x)[0]
    assert np.isfinite(on_cpu).all() and abs(float(on_cpu[0, 0]) - 90.0) < 0.2
    assert fp16_emulation.emulate(src, tmp_path / "emulated.onnx") == 3  # x16, a, b
    emulated = open_session(tmp_path / "emulated.onnx", optimize=False).run(None, x)[0]
    assert np.isposinf(emulated).all()
    small = {"x": np.array([[1.7]], np.float32)}  # finite: the emulation equals numpy's float16 rounding
    h = np.float16
    expected = np.float32(h(np.float32(h(np.float32(h(1.7)) * np.float32(h(300.0)))) * np.float32(h(0.001))))
    assert open_session(tmp_path / "emulated.onnx", optimize=False).run(None, small)[0][0, 0] == expected


def test_plan_keeps_what_would_overflow(tiny_optimized, tmp_path):
    """Control: outliers written once by the patch embedding at 1e3-1e5x (the residual stream past 2.6e5):
    every data-path node in float16 gives non-finite outputs; the plan (stream and norms float32, the patch
    embedding kept by its measured magnitude) is finite and within 0.999 at every layout."""
    source = stage.read_input(tiny_optimized, 1)
    model = source.model
    channels, _ = outliers.choose_channels(64)
    outliers.stress(model, channels, [1e3, 1e4, 3e4, 1e5], writers=outlier_check.GATE_WRITERS)
    stage.name_nodes(model)
    huge = tmp_path / "huge.onnx"
    onnx_io.save(model, huge)
    reference = parity.run_all(open_session(huge, 1), source.inputs)
    feeds = [source.inputs[i] for i in outlier_check.probe_indices(source.layouts)]
    results = {}
    for label in ("every candidate", "plan"):
        model = onnx_io.load(huge)
        elem_types.infer(model)
        nodes = fp16_plan.candidates(model, fp16_plan.data_path(model, "pixel_values"))
        if label == "plan":
            measured = {"model": fp16_plan.magnitudes(huge, fp16_plan.tap_names(model, nodes), feeds, 1)}
            plan = fp16_plan.decide(model, "pixel_values", measured)
            half = plan.half
            measured_keep = [k for k, v in plan.kept.items() if v["reason"].startswith("max |")]
            assert set(quantizers.input_readers(model)) & set(measured_keep)  # the patch embedding's MatMul
        else:
            half = set(nodes)
        float16.convert(model, half)
        onnx_io.save(model, tmp_path / f"{label}.onnx")
        fp16_emulation.emulate(tmp_path / f"{label}.onnx", tmp_path / f"{label}-emulated.onnx")
        session = open_session(tmp_path / f"{label}-emulated.onnx", 1, optimize=False)
        results[label] = parity.check(session, source.layouts, source.inputs, reference, tolerance=None)
    assert any(o.get("nonfinite") for c in results["every candidate"] for o in c["outputs"].values())
    for case in results["plan"]:
        for output in case["outputs"].values():
            assert "nonfinite" not in output and output["min_token_cosine"] >= 0.999


def test_phi4_mask_bias_stays_fp32(tmp_path):
    """Phi-4-multimodal's unfused attention adds a float32-lowest key-padding bias (-3.4e38): float16 would make
    it -inf and a fully padded row NaN; the plan keeps that Add float32 by its measured magnitude."""
    export = builds.path(builds.PHI4_MM)
    out = tmp_path / "fp16"
    assert cli.main(["fp16", str(export), str(out), "--threads", "1"]) == 0
    report = json.loads((out / "report.json").read_text())
    kept = {n["node"]: n for n in report["precision"]["fp32_nodes"]}
    assert any(n["op"] == "Add" and "3.403e+38" in n["reason"] for n in kept.values())
    assert any(n["op"] == "Softmax" for n in kept.values())
    assert report["finite"] and report["min_token_cosine"] >= fp16.DEFAULT_MIN_COSINE


def test_refuses_below_min_cosine(tiny_optimized, tmp_path, capsys):
    out = tmp_path / "fp16"
    capsys.readouterr()
    assert cli.main(["fp16", str(tiny_optimized), str(out), "--threads", "1", "--min-cosine", "1", "--outliers",
                     "off"]) == 2
    line = single_error(capsys.readouterr().err)
    assert "below --min-cosine 1.0; nothing written" in line and not out.exists()


@pytest.mark.parametrize("args, message", [
    (["--headroom", "0.5"], "--headroom must be >= 1"),
    (["--min-cosine", "1.5"], "--min-cosine must be in [0, 1]"),
    (["--exclude", "(unclosed"], "is not a valid regular expression"),
])
def test_bad_options(tiny_optimized, tmp_path, capsys, args, message):
    capsys.readouterr()
    assert cli.main(["fp16", str(tiny_optimized), str(tmp_path / "out"), *args]) == 2
    assert message in single_error(capsys.readouterr().err) and not (tmp_path / "out").exists()


def test_bad_input(tmp_path, capsys):
    bad = tmp_path / "in" / "model.onnx"
    bad.parent.mkdir()
    bad.write_text("not a model")
    capsys.readouterr()
    assert cli.main(["fp16", str(bad), str(tmp_path / "out")]) == 2
    assert "is not an ONNX model" in single_error(capsys.readouterr().err)


def test_nonfinite_is_a_failed_check():
    runs = {"emulated float16": {"finite": False, "nonfinite_cases": ["image 224x224"], "min_token_cosine": 1.0,
                                 "cases": []}}
    with pytest.raises(CheckFailed, match="non-finite outputs \\(emulated float16\\) at 'image 224x224'"):
        fp16._refuse(runs, 0.999)


def test_package_ships_fp16_variant(fp16_stage, tiny_exports, tiny_optimized, tmp_path, capsys):
    """`python -m release package` ships the fp16 stage as onnx/vision_encoder_fp16.onnx, lists every variant in
    config.json, and `runtime verify` runs it."""
    from vlm_vision_onnx.release import __main__ as release_cli
    from vlm_vision_onnx.runtime import __main__ as runtime_cli

    build = tmp_path / "build" / "qwen3-vl-tiny"
    for name, folder in (("export", tiny_exports["torchscript"]), ("optimized", tiny_optimized), ("fp16", fp16_stage)):
        shutil.copytree(folder, build / name)
    assert release_cli.main(["package", str(build), "--dist", str(tmp_path / "dist"), "--threads", "1"]) == 0
    folder = tmp_path / "dist" / "qwen3-vl-tiny"
    manifest = json.loads((folder / "manifest.json").read_text())
    config = json.loads((folder / "config.json").read_text())
    files = {v["name"]: v["file"] for v in manifest["variants"]}
    assert files == {"fp32": "onnx/vision_encoder.onnx", "fp16": "onnx/vision_encoder_fp16.onnx"}
    assert config["onnx_variants"] == files
    fp16_record = manifest["variants"][1]
    report = json.loads((fp16_stage / "report.json").read_text())
    assert fp16_record["accuracy_vs_fp32"]["min_token_cosine"] == report["validation"]["min_token_cosine"]
    assert fp16_record["accuracy_vs_fp32_cpu_ep"]["min_token_cosine"] == \
        report["cpu_execution_provider"]["min_token_cosine"]
    assert (folder / "onnx/vision_encoder_fp16.onnx").read_bytes() == (fp16_stage / "model.onnx").read_bytes()
    capsys.readouterr()
    assert runtime_cli.main(["verify", str(folder), "--threads", "1"]) == 0
    assert "onnx/vision_encoder_fp16.onnx: runs at 224x224" in capsys.readouterr().err
