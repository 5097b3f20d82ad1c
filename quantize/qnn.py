"""The qnn stage: `python -m quantize qnn IN OUT`: the QDQ form Qualcomm's HTP runs best, A16W8.

IN is a static export (`python -m builders.vision --static WIDTHxHEIGHT`, only pixel_values as input: the NPU
compiles static graphs only). OUT/model.onnx (+ report.json) is its QDQ form made by ONNX Runtime's QNN helpers
(`onnxruntime.quantization.execution_providers.qnn`): `qnn_preprocess_model` (Erf sequences fused into Gelu,
LayerNorm), then `get_qnn_qdq_config` with uint16 activations and int8 symmetric weights, per channel where
QNN takes it (the helper keeps MatMul weights per tensor: QNN has no per-channel MatMul), and `quantize`.
Activations are calibrated (MinMax) on real photos (scikit-image's, `quantize.calibration.photo`) resized to
the model's size (the family's `static.feeds`): `CALIBRATION`. The check, on the CPU EP against IN's fp32:
the photos `python -m runtime npu-check` runs (`runtime.npu.PHOTOS`, none of them calibration photos), whose
min per-token cosine must reach `--min-cosine` (default 0.98, npu-check's QDQ floor; else exit 2, nothing
written), and IN's validation layouts (random pixels, outside any photo's range: a figure, not a gate).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

from quantize import calibration, stage
from quantize.options import StageRun, check_floor
from quantize.passes import decompose_layer_norm, unshare_initializers
from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core import parity as metrics
from vlm_vision_onnx.core import report as reports
from vlm_vision_onnx.core.errors import CheckFailed, UsageError
from vlm_vision_onnx.core.progress import say, step
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.core.staging import WorkFolder, check_folder_output, staged_folder
from vlm_vision_onnx.families import of_model
from vlm_vision_onnx.runtime import npu

STAGE = "qnn"
DEFAULT_MIN_COSINE = npu.FLOORS["qdq"]
#: Calibration photos: calibration.PHOTOS less the ones npu-check and this stage's check run.
CALIBRATION = tuple(p for p in calibration.PHOTOS if p not in npu.PHOTOS)
#: The opset ORT's quantizer writes 16-bit QuantizeLinear / DequantizeLinear in (it converts a model below it).
QDQ_OPSET = 21
#: The QDQ types: uint16 activations, int8 weights (A16W8).
ACTIVATIONS, WEIGHTS = "QUInt16", "QInt8"


def photo_feeds(names: tuple[str, ...], metadata: dict) -> list[dict[str, np.ndarray]]:
    """{pixel_values} of each photo resized to the static model's size (its family's `static.feeds`)."""
    feeds = of_model(metadata, "IN").static.feeds
    return [feeds(calibration.photo(name), metadata) for name in names]


def at_opset(src: Path, opset: int) -> onnx.ModelProto:
    """The model `src` at (at least) `opset`: ONNX's version converter run on the graph alone, the weights loaded
    after. ORT's quantizer converts a model below opset 21 itself for 16-bit QDQ, with the weights in memory: at
    Qwen3-VL-2B dims that conversion alone peaks at 11.6 GiB (bench/results/qnn-memory.md)."""
    model = onnx.load(str(src), load_external_data=False)
    current = max((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), default=opset)
    if current < opset:
        model = onnx.version_converter.convert_version(model, opset)
    onnx.external_data_helper.load_external_data_for_model(model, str(src.parent))
    return model


def calibration_options(priority: bool = True) -> ort.SessionOptions:
    """The session options of ONNX Runtime's calibration session (`CalibraterBase.create_inference_session`: no graph
    optimization), in PRIORITY_BASED execution order unless `priority` is False (its own default order)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    if priority:
        options.execution_order = ort.ExecutionOrder.PRIORITY_BASED
    return options


@contextlib.contextmanager
def reductions_run_early():
    """ONNX Runtime's calibrator opens its session (`CalibraterBase.create_inference_session`) with
    `calibration_options()` inside this block, otherwise as it does (its providers).

    Its MinMax model adds a ReduceMin and a ReduceMax per tensor; in ONNX Runtime's default execution order they run
    late and every activation stays alive until then. One photo at Qwen3-VL-2B's 448 x 448 static export
    (bench/qnn_memory.py, retired at commit c9ada23; bench/results/qnn-memory.md): 10.43 GiB peak resident in the
    default order, 1.89 GiB in PRIORITY_BASED, about the model's without the reductions (1.85 GiB). The ranges are the same whatever the
    order (tests/test_quantize_qnn.py compares the QDQ models byte for byte)."""
    from onnxruntime.quantization import calibrate

    original = calibrate.CalibraterBase.create_inference_session

    def create_inference_session(self):
        self.infer_session = ort.InferenceSession(self.augmented_model_path, sess_options=calibration_options(),
                                                  providers=self.execution_providers)

    calibrate.CalibraterBase.create_inference_session = create_inference_session
    try:
        yield
    finally:
        calibrate.CalibraterBase.create_inference_session = original


def prepare_fp32(src: Path, work: Path) -> tuple[Path, dict[str, str]]:
    """(the fp32 model as the quantizer takes it, in `work`; `src`'s metadata, set aside).

    qnn_preprocess_model fails on a model with metadata_props (ORT 1.32 updates a dict with the proto's repeated
    field): they are set aside and put back on the result by `quantize_qdq`. LayerNormalization is written out and
    shared initializers are copied (the passes say why), ORT's QNN preprocessing runs (Erf -> Gelu, ...), then the
    model goes to opset 21 for 16-bit QDQ: after the preprocessing (its Erf -> Gelu fusion does not run at opset 20
    and up, and the HTP refuses Erf), on the graph alone (`at_opset`: ORT's quantizer would convert with every
    weight in memory)."""
    from onnxruntime.quantization.execution_providers.qnn import qnn_preprocess_model

    model = onnx.load(str(src))
    metadata = {p.key: p.value for p in model.metadata_props}
    del model.metadata_props[:]
    decompose_layer_norm.apply(model)  # the HTP refuses quantized LayerNormalization
    unshare_initializers.apply(model)  # a shared weight's DequantizeLinear would stand alone
    plain, prepared = work / "plain.onnx", work / "prepared.onnx"
    onnx_io.save_proto(model, plain)
    del model
    # weights as external data: a 3B-class tower is over protobuf's 2 GiB (get_qnn_qdq_config then quantizes with
    # external data too)
    if not qnn_preprocess_model(str(plain), str(prepared), save_as_external_data=True, all_tensors_to_one_file=True,
                                external_data_location=prepared.name + ".data"):
        prepared = plain
    converted = work / "opset21.onnx"
    onnx_io.save_proto(at_opset(prepared, QDQ_OPSET), converted)
    return converted, metadata


def quantize_qdq(src: Path, dst: Path, feeds: list[dict[str, np.ndarray]], work: Path) -> None:
    """`src` (fp32) -> `dst` (A16W8 QDQ for the QNN EP), calibrated on `feeds`."""
    from onnxruntime.quantization import QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    prepared, metadata = prepare_fp32(src, work)
    config = get_qnn_qdq_config(str(prepared), calibration.reader(feeds),
                                activation_type=getattr(QuantType, ACTIVATIONS),
                                weight_type=getattr(QuantType, WEIGHTS), per_channel=True)
    with reductions_run_early():
        quantize(str(prepared), str(work / "qdq.onnx"), config)
    result = onnx.load(str(work / "qdq.onnx"))
    onnx.helper.set_model_props(result, {**{p.key: p.value for p in result.metadata_props}, **metadata})
    onnx_io.save_proto(result, dst)


def _checked(model_file: Path, names: list[str], feeds: list[dict], reference: list, threads: int) -> dict:
    cases = metrics.check(open_session(model_file, threads), [{"case": n} for n in names], feeds, reference,
                          tolerance=None)
    finite = all(not o.get("nonfinite") for c in cases for o in c["outputs"].values())
    return {"finite": finite, **metrics.worst(cases), "cases": cases}


def run(path: str | Path, out: str | Path, context: StageRun, min_cosine: float = DEFAULT_MIN_COSINE) -> dict:
    """IN -> OUT/model.onnx + OUT/report.json; returns the report."""
    check_floor(min_cosine)
    check_folder_output(out, STAGE, [path], context.force)
    threads, force = context.threads, context.force
    model_path = onnx_io.model_path(path)
    if "static_size" not in onnx_io.metadata(model_path):  # before any work
        raise UsageError(f"{model_path} is not a static export: the QNN EP compiles static graphs only; export one "
                         "with python -m builders.vision --static WIDTHxHEIGHT")
    timings = context.timings
    out = Path(out)
    with step("load the input and run it at the validation layouts", timings):
        source = stage.read_input(path, threads)
    with step(f"photos at {source.metadata['static_size']}: {len(CALIBRATION)} for calibration, "
              f"{len(npu.PHOTOS)} to check", timings):
        calibration_feeds = photo_feeds(CALIBRATION, source.metadata)
        check_feeds = photo_feeds(npu.PHOTOS, source.metadata)
        fp32 = open_session(source.path, threads)
        photo_reference = metrics.run_all(fp32, check_feeds)
        calibration_reference = metrics.run_all(fp32, calibration_feeds)
        del fp32
    with WorkFolder(out) as work:
        fp32_file = work / "fp32.onnx"
        stage.name_nodes(source.model)
        onnx_io.save(source.model, fp32_file)
        source.model = None
        with staged_folder(out, STAGE, [path], force, keep_log=True) as staged:
            model_file = staged / onnx_io.MODEL_FILE
            with step(f"A16W8 QDQ (activations {ACTIVATIONS}, weights {WEIGHTS} per channel), MinMax calibration",
                      timings):
                quantize_qdq(fp32_file, model_file, calibration_feeds, work)
            with step("check on the CPU EP against fp32: photos, calibration photos, validation layouts", timings):
                photos = _checked(model_file, list(npu.PHOTOS), check_feeds, photo_reference, threads)
                seen = _checked(model_file, list(CALIBRATION), calibration_feeds, calibration_reference, threads)
                layouts = _checked(model_file, [lay["case"] for lay in source.layouts], source.inputs,
                                   source.reference, threads)
            if not photos["finite"]:
                raise CheckFailed("the QDQ model gives non-finite outputs on photos; nothing written")
            if photos["min_token_cosine"] < min_cosine:
                raise UsageError(f"the QDQ model reaches min per-token cosine {photos['min_token_cosine']:.5f} "
                                 f"against fp32 on photos, below --min-cosine {min_cosine}; nothing written")
            files, input_files = onnx_io.file_sizes(model_file), onnx_io.file_sizes(source.path)
            report = {
                **stage.report_header(STAGE, source),
                "config": {"activations": ACTIVATIONS, "weights": WEIGHTS, "per_channel": True,
                           "calibration": "MinMax", "calibration_photos": list(CALIBRATION),
                           "min_cosine": min_cosine, "static_size": source.metadata["static_size"]},
                "validation": {"reference": "fp32 input model, ONNX Runtime CPU EP", "photos": photos,
                               "calibration_photos": seen, "random_layouts": layouts},
                "min_token_cosine": photos["min_token_cosine"],
                "op_counts": stage.op_counts(onnx_io.load(model_file)),
                **stage.size_record(files, input_files),
                **stage.report_footer(timings),
            }
            reports.write(staged, report)
    say(f"wrote {out}/model.onnx (A16W8 QDQ, {sum(files.values()) / 2**20:.1f} MiB); min per-token cosine vs fp32 on "
        f"the CPU EP: photos {photos['min_token_cosine']:.5f}, calibration photos {seen['min_token_cosine']:.5f}, "
        f"random-pixel layouts {layouts['min_token_cosine']:.5f}")
    return report
