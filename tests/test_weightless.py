"""tools.weightless (variants shipped as a seed, rebuilt bit for bit) and bench.gpu_webgpu's CPU-side steps."""

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from tests import builds
from tools import weightless
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.parity import min_token_cosine


def _matmul_model(weight: np.ndarray, path: Path, dtype=np.float32) -> Path:
    """x [N, K] -> MatMul(x, W [K, M]) (+ a small bias) -> y; in float16 with Casts around when dtype is."""
    k, m = weight.shape
    bias = numpy_helper.from_array(np.linspace(-1, 1, m, dtype=np.float32), "bias")
    if dtype == np.float16:
        nodes = [helper.make_node("Cast", ["x"], ["x16"], to=TensorProto.FLOAT16),
                 helper.make_node("MatMul", ["x16", "w"], ["y16"]),
                 helper.make_node("Cast", ["y16"], ["y32"], to=TensorProto.FLOAT),
                 helper.make_node("Add", ["y32", "bias"], ["y"])]
    else:
        nodes = [helper.make_node("MatMul", ["x", "w"], ["y32"]), helper.make_node("Add", ["y32", "bias"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", m])],
                              [numpy_helper.from_array(weight.astype(dtype), "w"), bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 10
    onnx.save(model, str(path))
    return path


def _q4(fp32: Path, path: Path, symmetric: bool) -> Path:
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    quantizer = MatMulNBitsQuantizer(onnx.load(str(fp32)), bits=4, block_size=32, is_symmetric=symmetric)
    quantizer.process()
    onnx.save(quantizer.model.model, str(path))
    return path


@pytest.fixture(scope="module")
def variants(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("weightless")
    weight = np.random.default_rng(0).normal(0.01, 0.05, (256, 128)).astype(np.float32)
    fp32 = _matmul_model(weight, root / "fp32.onnx")
    return {"root": root, "weight": weight, "fp32": fp32, "fp16": _matmul_model(weight, root / "fp16.onnx",
                                                                                np.float16),
            "q4": _q4(fp32, root / "q4.onnx", symmetric=False), "q4sym": _q4(fp32, root / "q4sym.onnx", True)}


def test_pseudo_normal_is_standard_and_independent_of_chunking(monkeypatch):
    z = weightless.pseudo_normal("0:w", 100_003)
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02 and 3.5 < np.abs(z).max() < 4.9
    monkeypatch.setattr(weightless, "_CHUNK", 1000)
    assert np.array_equal(weightless.pseudo_normal("0:w", 100_003), z)
    assert not np.array_equal(weightless.pseudo_normal("1:w", 100_003), z)


def test_strip_then_rebuild_gives_reseeded_variants_of_the_same_graphs(variants, tmp_path):
    files = {name: variants[name] for name in ("fp32", "fp16", "q4", "q4sym")}
    recipe = weightless.strip(variants["fp32"], tmp_path / "strip", files, seed=3, min_elements=1024)
    assert recipe["sources"]["w"]["shape"] == [256, 128]
    ops = {name: sorted((e["op"], e.get("part")) for e in v["initializers"]) for name, v in recipe["variants"].items()}
    assert ops["fp32"] == [("copy", None)] and ops["fp16"] == [("float16", None)]
    assert ops["q4"] == [("nbits", "B"), ("nbits", "scales"), ("nbits", "zero_points")]
    assert ops["q4sym"] == [("nbits", "B"), ("nbits", "scales")]
    # the stripped files hold the graph and the small bias, not the weight
    assert {i.name for i in onnx.load(str(tmp_path / "strip" / "fp32.onnx")).graph.initializer} == {"bias"}

    built = weightless.rebuild(tmp_path / "strip", tmp_path / "built")
    weight = numpy_helper.to_array(next(i for i in onnx.load(str(built["fp32"])).graph.initializer if i.name == "w"))
    original = variants["weight"]
    assert not np.array_equal(weight, original)
    assert abs(weight.mean() - original.mean()) < 0.002 and abs(weight.std() / original.std() - 1) < 0.01
    x = {"x": np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)}
    outputs = {n: ort.InferenceSession(str(p), providers=["CPUExecutionProvider"]).run(None, x)[0]
               for n, p in built.items()}
    assert np.allclose(outputs["fp32"], x["x"] @ weight + np.linspace(-1, 1, 128, dtype=np.float32), atol=1e-4)
    assert min_token_cosine(outputs["fp16"], outputs["fp32"]) > 0.9999
    assert 0.98 < min_token_cosine(outputs["q4"], outputs["fp32"]) < 0.99999
    assert 0.98 < min_token_cosine(outputs["q4sym"], outputs["fp32"]) < 0.99999


def test_rebuild_refuses_bits_other_than_the_stripped_ones(variants, tmp_path):
    weightless.strip(variants["fp32"], tmp_path / "strip", {"q4": variants["q4"]}, min_elements=1024)
    recipe_file = tmp_path / "strip" / "recipe.json"
    recipe = json.loads(recipe_file.read_text())
    recipe["sources"]["w"]["std"] *= 1.001
    recipe_file.write_text(json.dumps(recipe))
    with pytest.raises(UsageError, match="differs from the stripped one"):
        weightless.rebuild(tmp_path / "strip", tmp_path / "built")
    assert not (tmp_path / "built").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["strip"]


def test_strip_and_rebuild_never_replace_a_folder_they_did_not_write(variants, tmp_path):
    """core.staging's rules: a user's folder is refused, nothing is written; an earlier output is replaced."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(UsageError, match="not an output of this tool"):
        weightless.strip(variants["fp32"], mine, {"fp32": variants["fp32"]}, min_elements=1024)
    weightless.strip(variants["fp32"], tmp_path / "strip", {"fp32": variants["fp32"]}, min_elements=1024)
    with pytest.raises(UsageError, match="not an output of this tool"):
        weightless.rebuild(tmp_path / "strip", mine)
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]
    weightless.rebuild(tmp_path / "strip", tmp_path / "built")
    again = weightless.rebuild(tmp_path / "strip", tmp_path / "built")  # its own earlier output: replaced
    assert again["fp32"].is_file()
    assert weightless.main(["strip", str(variants["fp32"]), str(mine), "--variant", "fp32"]) == 2


def test_strip_refuses_a_variant_its_rules_do_not_rebuild(variants, tmp_path):
    models = tmp_path / "models"  # an OUT may not sit in an input's folder (core.staging)
    models.mkdir()
    other = _matmul_model(variants["weight"] * 2, models / "scaled.onnx")
    with pytest.raises(UsageError, match="is not what its derivation"):
        weightless.strip(variants["fp32"], tmp_path / "a", {"scaled": other}, min_elements=1024)
    renamed = onnx.load(str(variants["fp32"]))
    renamed.graph.initializer[0].name = "w2"
    renamed.graph.node[0].input[1] = "w2"
    onnx.save(renamed, str(models / "renamed.onnx"))
    with pytest.raises(UsageError, match="derives from no source"):
        weightless.strip(variants["fp32"], tmp_path / "b", {"renamed": models / "renamed.onnx"}, min_elements=1024)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["models"]  # nothing half-written


def test_gpu_bench_prepares_the_tiny_build_and_loads_its_weights_into_pytorch(tmp_path):
    """bench.gpu_webgpu's CPU side on the tiny Qwen3-VL build: prepare, rebuild, PyTorch's tower with the rebuilt
    fp32's weights equal to ONNX Runtime's fp32 (the race's reference), the rebuilt q4f16 near it."""
    from bench import gpu_webgpu
    from vlm_vision_onnx.families import family

    build = builds.assemble(builds.every_variant(builds.QWEN3_VL), tmp_path / "build" / "qwen3-vl-tiny")
    gpu_webgpu.prepare(build, tmp_path / "prep")
    prepared = json.loads((tmp_path / "prep" / "prepared.json").read_text())
    assert prepared["config"] == "qwen3-vl-tiny"
    assert (tmp_path / "prep" / "processor" / "preprocessor_config.json").is_file()
    models = weightless.rebuild(tmp_path / "prep", tmp_path / "models")
    from vlm_vision_onnx.core import onnx_io

    metadata = onnx_io.metadata(models["fp32"])
    fam = family("qwen3-vl")
    feeds = fam.layout_inputs(dict(fam.default_layouts(metadata))["pack 448x448 + 336x336"], metadata,
                              np.random.default_rng(0))
    reference = gpu_webgpu.OrtPath(models["fp32"], ["CPUExecutionProvider"]).run(feeds)
    import torch

    tower = gpu_webgpu.TorchPath(gpu_webgpu.torch_tower(prepared["config"], prepared["seed"], models["fp32"]),
                                 torch.float32, "cpu")
    assert min(min_token_cosine(o, r) for o, r in zip(tower.run(feeds), reference)) > 0.99999
    q4f16 = gpu_webgpu.OrtPath(models["q4f16"], ["CPUExecutionProvider"]).run(feeds)
    assert min(min_token_cosine(o, r) for o, r in zip(q4f16, reference)) > 0.98
