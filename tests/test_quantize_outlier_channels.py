"""Outlier input channels split off into fp32 MatMuls (quantize/outlier_channels.py) on the tiny encoder."""

import json
import shutil
from functools import partial

import numpy as np
import pytest

from quantize import __main__ as cli
from quantize import outlier_channels, outlier_check, quantizers
from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core import parity as metrics
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.families import QWEN3_VL
from vlm_vision_onnx.families import validation as layouts_mod

PROBES = ("export example", "pack image + video t=2 + image")


@pytest.fixture(scope="module")
def models(tiny_optimized, tmp_path_factory):
    """The optimized tiny encoder, its every-writer outlier-stress copy (4 residual channels 20-100x, written
    by every MatMul that adds into the stream, so the finder must see both input and output columns), and inputs."""
    root = tmp_path_factory.mktemp("outlier-channels")
    shutil.copytree(tiny_optimized, root / "optimized")  # the stressed copy is written beside it
    fp32 = root / "optimized" / "model.onnx"
    stressed = root / "optimized" / "stressed.onnx"  # beside it: the stage folder's report and metadata hold
    record = outlier_check.make_stressed(fp32, stressed, outlier_check.WORST_WRITERS)
    metadata = onnx_io.metadata(fp32)
    layouts = layouts_mod.layouts_for(fp32, metadata, QWEN3_VL)
    inputs = layouts_mod.layout_inputs(QWEN3_VL, layouts, metadata)
    probes = [x for lay, x in zip(layouts, inputs) if lay["case"] in PROBES]
    return {"fp32": fp32, "stressed": stressed, "channels": record["channels"], "hidden": record["hidden"],
            "writers": record["writers"],
            "inputs": inputs, "probes": probes}


def test_finds_exactly_the_stressed_channels_and_none_in_random_weights(models):
    assert outlier_channels.find(models["fp32"], models["probes"], 1, outlier_channels.DEFAULT_RATIO) == \
        {"inputs": {}, "outputs": {}}
    both = outlier_channels.find(models["stressed"], models["probes"], 1, outlier_channels.DEFAULT_RATIO)
    found = both["inputs"]
    hidden, channels = models["hidden"], sorted(models["channels"])
    width = {n.name: n.inputs[1].const_value.shape[0]
             for n, _ in quantizers.quantizable(onnx_io.load(models["stressed"]))}
    # the MatMuls reading the residual stream through a LayerNorm (qkv, fc1) see exactly those channels;
    # the mergers read 4 merged tokens side by side (4 x hidden), so the channels repeat at each offset
    reading = {n: c for n, c in found.items() if width[n] == hidden}
    assert reading and all(c == channels for c in reading.values())
    merged = {n: c for n, c in found.items() if width[n] == 4 * hidden}
    assert merged and all(c == sorted(k + i * hidden for i in range(4) for k in channels) for c in merged.values())
    assert set(found) == set(reading) | set(merged)
    # output columns: exactly the stressed channels, at exactly the MatMuls that write the residual stream
    # (the patch embedding's MatMul writes the stream too, but reads pixels: the quantizers keep it fp32, unsplit)
    readers = set(quantizers.input_readers(onnx_io.load(models["stressed"])))
    writers = {w["node"] for w in models["writers"] if w["op"] == "MatMul"} - readers
    assert readers and both["outputs"] and all(c == channels for c in both["outputs"].values())
    assert set(both["outputs"]) == writers


def test_split_model_computes_the_same_in_fp32(models, tmp_path):
    channels = outlier_channels.find(models["stressed"], models["probes"], 1, outlier_channels.DEFAULT_RATIO)
    model = onnx_io.load(models["stressed"])
    added = outlier_channels.split(model, channels)
    assert sorted(added) == sorted(outlier_channels.fp32_reasons(channels))
    assert {n + outlier_channels.SUFFIX for n in channels["inputs"]} | \
        {n + outlier_channels.COLUMNS_SUFFIX for n in channels["outputs"]} <= set(added)
    onnx_io.save(model, tmp_path / "split.onnx")
    before, after = open_session(models["stressed"], 1), open_session(tmp_path / "split.onnx", 1)
    for feed in models["inputs"]:
        for ref, got in zip(before.run(None, feed), after.run(None, feed)):
            assert np.abs(got - ref).max() <= 1e-5 * max(1.0, float(np.abs(ref).max()))


@pytest.mark.parametrize("quantize", [partial(quantizers.dynamic, per_channel=False, reduce_range=False),
                                      partial(quantizers.matmul_nbits, bits=4, block_size=128, symmetric=True,
                                              accuracy_level=4)], ids=["int8-dynamic-per-tensor", "int4-b128"])
def test_with_the_split_outliers_cost_no_more_than_the_quantization_itself(models, quantize, tmp_path):
    """Quantized with the split, the outlier-stress copy is about as close to its fp32 outputs as the model
    without outliers is to its own (error 1 - min per-token cosine within 25%), and closer than without it."""

    def error(quantizer, model_file) -> float:
        out = tmp_path / "q.onnx"
        quantizer(model_file, out, [])
        reference = metrics.run_all(open_session(model_file, 1), models["inputs"])
        got = metrics.run_all(open_session(out, 1), models["inputs"])
        return 1 - min(metrics.min_token_cosine(g, r) for gs, rs in zip(got, reference) for g, r in zip(gs, rs))

    record: dict = {}
    # as the stages quantize: the patch embedding's MatMul (it reads pixels) stays fp32
    quantize = quantizers.keeping_fp32(quantize, quantizers.input_readers(onnx_io.load(models["fp32"])))
    split_quantize = outlier_channels.keeping_outliers_fp32(quantize, models["probes"], 1,
                                                            outlier_channels.DEFAULT_RATIO, record)
    plain, split = error(quantize, models["stressed"]), error(split_quantize, models["stressed"])
    assert record["stressed.onnx"]  # channels were found and split off
    no_outliers = error(quantize, models["fp32"])
    assert split < plain and split <= 1.25 * no_outliers, (plain, split, no_outliers)


def test_stage_report_names_the_split_and_its_fp32_matmuls(models, tmp_path):
    """The stressed copy itself as a stage input: its outlier channels go to fp32 MatMuls, said in the report."""
    out = tmp_path / "int8"
    assert cli.main(["int8", str(models["stressed"]), str(out), "--threads", "1", "--outliers", "off"]) == 0
    report = json.loads((out / "report.json").read_text())
    split = report["outlier_channels"]
    assert split["ratio"] == outlier_channels.DEFAULT_RATIO and sorted(split["calibration_cases"]) == sorted(PROBES)
    sides = {n["node"]: n["reason"] for n in report["fp32_weight_nodes"] if n["reason"].startswith("outlier")}
    assert sides == outlier_channels.fp32_reasons(split["model"]) and sides
    assert {"outlier input channels (fp32)", "outlier output columns (fp32)"} == set(sides.values())
    off = tmp_path / "int8-off"
    assert cli.main(["int8", str(models["stressed"]), str(off), "--threads", "1", "--outliers", "off",
                     "--outlier-ratio", "0"]) == 0
    plain = json.loads((off / "report.json").read_text())
    assert plain["outlier_channels"] is None
    assert 1 - report["validation"]["min_token_cosine"] < 1 - plain["validation"]["min_token_cosine"]


def test_bad_ratio_is_refused(models, tmp_path, capsys):
    assert cli.main(["int8", str(models["fp32"]), str(tmp_path / "x"), "--outlier-ratio", "0.5"]) == 2
    assert "--outlier-ratio must be 0 (off) or greater than 1, got 0.5" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()
