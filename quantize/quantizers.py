"""The weight quantizers the int4 and int8 stages call: model file in, quantized model file out.

Both take the MatMul nodes with a constant 2-D weight W [K, M] (`quantizable`) and leave the nodes
named in `skip` fp32.
- `matmul_nbits`: MatMul(x, W) -> com.microsoft.MatMulNBits(x, packed W, scales[, zero points]), W in
  `bits` (4 or 8) per weight, quantized in blocks of `block_size` along K (symmetric: no zero points).
  accuracy_level 4: ORT quantizes the activations to int8 per block of K inside the kernel; 0: fp32.
- `dynamic`: ONNX Runtime's `quantize_dynamic` (MatMul only): W int8 per output column (per_channel)
  or per tensor; at run time DynamicQuantizeLinear quantizes each activation tensor to uint8 with ONE
  scale and zero point, MatMulInteger multiplies, ORT fuses the chain into DynamicQuantizeMatMul.
- `static`: ONNX Runtime's `quantize_static` (QDQ, MatMul only): the same int8 weights, but each activation's
  uint8 scale and zero point are fixed from calibration runs (min/max over `quantize.calibration`'s photos).
Files, not in-memory protos, so the 8B tower (2.3 GB, past protobuf's 2 GiB) goes through as well.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import onnx
import onnx_ir as ir
from onnxruntime.quantization import (
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)
from onnxruntime.quantization.matmul_nbits_quantizer import HQQWeightOnlyQuantConfig, MatMulNBitsQuantizer

from quantize import gptq
from vlm_vision_onnx.core import cpu, onnx_io
from vlm_vision_onnx.core.errors import UsageError

WEIGHT_OPS = ("MatMul", "Gemm", "Conv")
#: The op each quantizer leaves in place of a quantized MatMul (what the reports count).
QUANTIZED_OPS = ("MatMulNBits", "MatMulInteger", "DynamicQuantizeMatMul")


def quantized_count(model: ir.Model) -> int:
    """Quantized MatMuls in `model`: the ops of QUANTIZED_OPS, and (QDQ) MatMuls whose weight is dequantized."""
    return sum(1 for n in model.graph if n.op_type in QUANTIZED_OPS or (
        n.op_type == "MatMul" and len(n.inputs) > 1 and n.inputs[1] is not None
        and n.inputs[1].producer() is not None and n.inputs[1].producer().op_type == "DequantizeLinear"))


def weight_nodes(model: ir.Model) -> list[tuple[ir.Node, str]]:
    """(node, weight name) of every MatMul / Gemm / Conv whose input 1 is a constant of rank >= 2."""
    found = []
    for node in model.graph:
        if node.op_type in WEIGHT_OPS and node.domain == "" and len(node.inputs) > 1 and node.inputs[1] is not None:
            weight = node.inputs[1]
            if weight.const_value is not None and len(weight.const_value.shape) >= 2:
                found.append((node, weight.name))
    return found


def quantizable(model: ir.Model) -> list[tuple[ir.Node, str]]:
    """The MatMul nodes with a constant 2-D weight (what both quantizers quantize), less `input_readers`."""
    readers = set(input_readers(model))
    return [(n, w) for n, w in weight_nodes(model)
            if n.op_type == "MatMul" and len(n.inputs[1].const_value.shape) == 2 and n.name not in readers]


#: Why `input_readers` stay fp32 (the stages' reports give it per node).
INPUT_READER_REASON = "reads the model's input (the patch embedding): kept fp32"


def input_readers(model: ir.Model) -> list[str]:
    """Names of the weight MatMuls that read a model input directly: the patch embedding as a MatMul
    (quantize/passes/patch_matmul.py). The quantizers leave them fp32, as they left the Conv it replaced."""
    return [n.name for n, _ in weight_nodes(model)
            if n.op_type == "MatMul" and n.inputs[0] is not None and n.inputs[0].is_graph_input()]


BLOCK_SIZES = (16, 32, 64, 128, 256)
ACCURACY_LEVELS = (0, 1, 2, 3, 4)


#: How MatMulNBits weights are rounded: "rtn" (round to nearest, per block; ORT's default quantizer), "hqq"
#: (Half-Quadratic Quantization: scales and float zero points fitted per block by a proximal solver, no
#: calibration data; ORT's implementation runs on torch, so it needs torch installed, as `make export` has) or
#: "gptq" (rounding errors pushed where the calibration inputs have little energy, `quantize.gptq`; needs
#: calibration feeds).
ALGORITHMS = ("rtn", "hqq", "gptq")


def nbits(bits: int, block_size: int, symmetric: bool, accuracy_level: int, algorithm: str = "rtn",
          feeds: Callable[[], list[dict]] | None = None, threads: int = 0):
    """(file -> file MatMulNBits quantizer, its settings) after checking them (UsageError naming the option).
    `feeds()`: the calibration set of "gptq" (made on first use); `threads`: for its calibration runs."""
    if block_size not in BLOCK_SIZES:
        raise UsageError(f"--block-size must be one of {', '.join(map(str, BLOCK_SIZES))}, got {block_size}")
    if accuracy_level not in ACCURACY_LEVELS:
        raise UsageError(f"--accuracy-level must be one of 0..4 (0: fp32 compute, 4: int8), got {accuracy_level}")
    if algorithm not in ALGORITHMS:
        raise UsageError(f"--algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
    if algorithm == "hqq" and symmetric:
        raise UsageError("--algorithm hqq fits a zero point per block: give --asymmetric")
    settings = {"bits": bits, "block_size": block_size, "symmetric": symmetric, "accuracy_level": accuracy_level}
    if algorithm != "rtn":
        settings["algorithm"] = algorithm
    if algorithm == "gptq":
        if feeds is None:
            raise ValueError("algorithm 'gptq' needs feeds (the calibration set)")
        return partial(gptq_nbits, bits=bits, block_size=block_size, symmetric=symmetric,
                       accuracy_level=accuracy_level, feeds=feeds, threads=threads), settings
    return partial(matmul_nbits, **settings), settings


def gptq_nbits(src: Path, dst: Path, skip: list[str], bits: int, block_size: int, symmetric: bool,
               accuracy_level: int, feeds: Callable[[], list[dict]], threads: int) -> None:
    """`src` -> `dst` with GPTQ-rounded MatMulNBits (`quantize.gptq`), calibrated on `src` itself at `feeds()`.
    A model whose inputs the feeds do not feed (the outlier check's one-MatMul models) is rounded to nearest
    instead: its sensitivity ranking is RTN's (a documented approximation, as for static int8)."""
    items = feeds()
    if not items or set(items[0]) != set(onnx_io.input_names(onnx.load(str(src), load_external_data=False))):
        return matmul_nbits(src, dst, skip, bits, block_size, symmetric, accuracy_level)
    gptq.quantize(src, dst, skip, bits, block_size, symmetric, accuracy_level, items, threads)


def matmul_nbits(src: Path, dst: Path, skip: list[str], bits: int, block_size: int, symmetric: bool,
                 accuracy_level: int, algorithm: str = "rtn") -> None:
    """`src` -> `dst` with MatMulNBits (`bits` 4 or 8) in place of the MatMuls not in `skip`."""
    proto = onnx.load(str(src))
    config = (HQQWeightOnlyQuantConfig(block_size=block_size, bits=bits, op_types_to_quantize=("MatMul",))
              if algorithm == "hqq" else None)
    quantizer = MatMulNBitsQuantizer(proto, bits=bits, block_size=block_size, is_symmetric=symmetric,
                                     accuracy_level=accuracy_level, nodes_to_exclude=list(skip),
                                     op_types_to_quantize=("MatMul",), algo_config=config)
    del proto
    quantizer.process()
    if algorithm == "hqq":  # ORT's HQQ writes no accuracy_level (level 0, fp32 compute): give it the one asked for
        for node in quantizer.model.model.graph.node:
            if node.op_type == "MatMulNBits" and accuracy_level:
                node.attribute.append(onnx.helper.make_attribute("accuracy_level", accuracy_level))
    onnx_io.save_proto(quantizer.model.model, dst)


def nbits_by_bits(model: ir.Model) -> dict[int, int]:
    """{bits: how many MatMulNBits nodes have them} (a mixed-precision model has two keys)."""
    counts: dict[int, int] = {}
    for node in model.graph:
        if node.op_type == "MatMulNBits":
            bits = node.attributes["bits"].as_int()
            counts[bits] = counts.get(bits, 0) + 1
    return dict(sorted(counts.items()))


def keeping_fp32(quantize, names: list[str]):
    """A file -> file quantizer: `quantize` with `names` always left fp32 besides the caller's `skip` (the stages'
    `input_readers`: names are the same in a model and in its outlier-stress copies)."""
    if not names:
        return quantize
    return lambda src, dst, skip: quantize(src, dst, list(skip) + [n for n in names if n not in skip])


def mixed(low, high, promoted: list[str]):
    """A file -> file quantizer: `high` for the MatMuls named in `promoted`, `low` for the others.

    `low` runs first with `promoted` left as MatMul; `high` then takes what is still a MatMul (the caller's
    `skip` stays fp32 in both passes). Used by int4 for mixed precision: the most sensitive MatMuls in 8 bits."""

    def quantize(src: Path, dst: Path, skip: list[str]) -> None:
        with tempfile.TemporaryDirectory(prefix="mixed-", dir=dst.parent) as tmp:
            first = Path(tmp) / "low.onnx"
            low(src, first, list(skip) + list(promoted))
            high(first, dst, list(skip))

    return quantize


@contextlib.contextmanager
def _quiet():
    """Silence quantize_dynamic's root-logger warning ("consider pre-processing") for one call."""
    before = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(before)


def _save_int8(out: Path, dst: Path, reduce_range: bool) -> None:
    """ORT's quantized `out` -> `dst` with our producer name (ORT writes its own) and, for 8-bit weights, the
    metadata with which open_session warns where this model's int8 kernel would saturate."""
    proto = onnx.load(str(out))
    proto.producer_name = "vlm-vision-onnx.quantize"
    if not reduce_range:
        onnx.helper.set_model_props(proto, {**{p.key: p.value for p in proto.metadata_props},
                                            cpu.METADATA_KEY: cpu.NEEDS_EXACT_INT8})
    onnx_io.save_proto(proto, dst)


def dynamic(src: Path, dst: Path, skip: list[str], per_channel: bool, reduce_range: bool) -> None:
    """`src` -> `dst` through `quantize_dynamic` (MatMul only, int8 weights), nodes in `skip` left fp32.

    `reduce_range`: weights in 7 bits (|w| <= 63), so that the u8 x s8 pair sums of x86 CPUs without VNNI
    cannot saturate (`core.cpu`); full 8-bit range otherwise."""
    with tempfile.TemporaryDirectory(prefix="int8-dynamic-", dir=dst.parent) as tmp, _quiet():
        out = Path(tmp) / "model.onnx"
        quantize_dynamic(src, out, op_types_to_quantize=["MatMul"], per_channel=per_channel, reduce_range=reduce_range,
                         weight_type=QuantType.QInt8, nodes_to_exclude=list(skip),
                         use_external_data_format=onnx_io.has_external_data(src),
                         # float32 where shape inference cannot tell (outputs of com.microsoft ops: BiasGelu, ...)
                         extra_options={"MatMulConstBOnly": True, "DefaultTensorType": onnx.TensorProto.FLOAT})
        _save_int8(out, dst, reduce_range)


def static(src: Path, dst: Path, skip: list[str], per_channel: bool, reduce_range: bool, reader) -> None:
    """`src` -> `dst` through `quantize_static` (QDQ, MatMul only, int8 weights, uint8 activations whose scales
    come from min/max over `reader()`, a fresh `CalibrationDataReader` of the model's inputs), nodes in `skip`
    left fp32. A model whose inputs the reader does not feed (the outlier check's one-MatMul models) has no
    calibration: it goes through `dynamic` with the same weights (documented approximation for a ranking)."""
    calibration = reader()
    first = calibration.get_next()
    calibration.rewind()
    if first is None or set(first) != set(onnx_io.input_names(onnx.load(str(src), load_external_data=False))):
        return dynamic(src, dst, skip, per_channel, reduce_range)
    with tempfile.TemporaryDirectory(prefix="int8-static-", dir=dst.parent) as tmp, _quiet():
        out = Path(tmp) / "model.onnx"
        quantize_static(src, out, calibration, quant_format=QuantFormat.QDQ, op_types_to_quantize=["MatMul"],
                        per_channel=per_channel, reduce_range=reduce_range, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, nodes_to_exclude=list(skip),
                        calibrate_method=CalibrationMethod.MinMax,
                        use_external_data_format=onnx_io.has_external_data(src),
                        # every item's MatMul inputs are held until the end (ORT 1.31's CalibMaxIntermediateOutputs
                        # drops them instead of folding them): the int8 stage keeps its calibration set small
                        extra_options={"MatMulConstBOnly": True, "DefaultTensorType": onnx.TensorProto.FLOAT})
        _save_int8(out, dst, reduce_range)
