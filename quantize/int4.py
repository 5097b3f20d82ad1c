"""The int4 stage: weight-only INT4 of every MatMul with a constant weight, through `MatMulNBits`.

MatMul(x [N, K], W [K, M]) -> com.microsoft.MatMulNBits(x, packed W, scales[, zero points]), W
quantized in blocks of `block_size` along K (symmetric: no zero points). accuracy_level 4 lets ORT
quantize activations to int8 in the kernel (fastest on CPU); 0 computes in fp32.
The report gives, per validation layout and per output, cosine and max abs diff against the fp32
input, the file sizes, and which weight-bearing nodes stayed fp32.
"""

import re
from pathlib import Path

import onnx
import onnx_ir as ir
from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

from core import onnx_io, report as reports
from core.staging import check_folder_output, staged_folder
from quantize import parity, stage
from core.progress import say, step
from core.errors import UsageError

BLOCK_SIZES = (16, 32, 64, 128, 256)
ACCURACY_LEVELS = (0, 1, 2, 3, 4)
WEIGHT_OPS = ("MatMul", "Gemm", "Conv")


def weight_nodes(model: ir.Model) -> list[tuple[ir.Node, str]]:
    """(node, weight name) of every MatMul / Gemm / Conv whose input 1 is a constant of rank >= 2."""
    found = []
    for node in model.graph:
        if node.op_type in WEIGHT_OPS and node.domain == "" and node.inputs[1] is not None:
            weight = node.inputs[1]
            if weight.const_value is not None and len(weight.const_value.shape) >= 2:
                found.append((node, weight.name))
    return found


def quantizable(model: ir.Model) -> list[tuple[ir.Node, str]]:
    """The MatMul nodes with a constant 2-D weight (what MatMulNBitsQuantizer quantizes)."""
    return [(n, w) for n, w in weight_nodes(model)
            if n.op_type == "MatMul" and n.domain == "" and len(n.inputs[1].const_value.shape) == 2]


def excluded(nodes: list[tuple[ir.Node, str]], patterns: list[str]) -> list[str]:
    """Names of the nodes whose name or weight name matches (re.search) one of `patterns`."""
    compiled = []
    for p in patterns:
        try:
            compiled.append(re.compile(p))
        except re.error as err:
            raise UsageError(f"--exclude {p!r} is not a valid regular expression: {err}") from None
    return [n.name for n, w in nodes if any(c.search(n.name) or c.search(w) for c in compiled)]


def quantize(model: ir.Model, block_size: int, symmetric: bool, accuracy_level: int,
             exclude: list[str]) -> tuple[onnx.ModelProto, list[str]]:
    """Return (INT4 model, names of the excluded MatMul nodes). UsageError when there is nothing to quantize."""
    stage.name_nodes(model)
    nodes = quantizable(model)
    if not nodes:
        gemms = sum(1 for n in model.graph if n.op_type == "Gemm")
        hint = (f"it has {gemms} Gemm node(s), which MatMulNBits does not take: run `python -m quantize "
                f"optimize` first" if gemms else "nothing to quantize")
        raise UsageError(f"the model has no MatMul with a constant 2-D weight ({hint})")
    skip = excluded(nodes, exclude)
    if len(skip) == len(nodes):
        raise UsageError(f"--exclude {' '.join(exclude)} matches all {len(nodes)} MatMul(s): nothing would be "
                         "quantized; narrow the pattern")
    proto = onnx_io.to_proto(model)
    quantizer = MatMulNBitsQuantizer(proto, block_size=block_size, is_symmetric=symmetric,
                                     accuracy_level=accuracy_level, nodes_to_exclude=skip,
                                     op_types_to_quantize=("MatMul",))
    quantizer.process()
    result = quantizer.model.model
    result.ir_version = min(result.ir_version, onnx_io.MAX_IR_VERSION)
    return result, skip


def run(path: str | Path, out: Path, block_size: int, symmetric: bool, accuracy_level: int,
        exclude: list[str], threads: int, force: bool = False) -> dict:
    """`python -m quantize int4`: IN -> OUT/model.onnx + OUT/report.json; returns the report."""
    if block_size not in BLOCK_SIZES:
        raise UsageError(f"--block-size must be one of {', '.join(map(str, BLOCK_SIZES))}, got {block_size}")
    if accuracy_level not in ACCURACY_LEVELS:
        raise UsageError(f"--accuracy-level must be one of 0..4 (0: fp32 compute, 4: int8), got {accuracy_level}")
    check_folder_output(out, "int4", [path], force)  # before any work
    timings: dict[str, float] = {}
    with step("load the input and run it at the validation layouts", timings):
        source = stage.read_input(path, threads)
    with step(f"quantize to INT4 (block {block_size}, {'symmetric' if symmetric else 'asymmetric'}, "
              f"accuracy level {accuracy_level})", timings):
        proto, skipped = quantize(source.model, block_size, symmetric, accuracy_level, exclude)
    model = ir.serde.deserialize_model(proto)
    del proto
    model.producer_name, model.producer_version = "vlm-vision-onnx.quantize", "int4"
    fp32 = [{"node": n.name, "op": n.op_type, "weight": w, "shape": list(n.inputs[1].const_value.shape),
             "reason": "excluded" if n.name in skipped else "not a MatMul" if n.op_type != "MatMul"
             else "left by the quantizer"} for n, w in weight_nodes(model)]
    with staged_folder(out, "int4", [path], force) as tmp:
        with step("save", timings):
            files = onnx_io.save(model, tmp / "model.onnx")
        with step("compare with fp32 at the validation layouts", timings):
            cases = parity.check(parity.open_session(tmp / "model.onnx", threads), source.layouts,
                                 source.inputs, source.reference, tolerance=None)
        max_abs, cosine = parity.worst(cases)
        input_files = onnx_io.file_sizes(source.path)
        report = {
            **stage.report_header("int4", source),
            "config": {"block_size": block_size, "symmetric": symmetric, "accuracy_level": accuracy_level,
                       "exclude": exclude},
            "quantized_nodes": sum(1 for n in model.graph if n.op_type == "MatMulNBits"),
            "fp32_weight_nodes": fp32,
            "op_counts": stage.op_counts(model),
            "validation": {"reference": "fp32 input model in ONNX Runtime", "max_abs": max_abs,
                           "min_cosine": cosine, "cases": cases},
            "files": files,
            "input_files": input_files,
            "size_ratio": sum(files.values()) / sum(input_files.values()),
            **stage.report_footer(timings),
        }
        reports.write(tmp, report)
    say(f"wrote {out}/model.onnx: {report['quantized_nodes']} MatMulNBits, {len(fp32)} weight node(s) fp32, "
        f"{sum(files.values()) / 2**20:.1f} MiB ({100 * report['size_ratio']:.1f}% of fp32); "
        f"vs fp32: min cosine {cosine:.5f}, max abs diff {max_abs:.3g}")
    return report
