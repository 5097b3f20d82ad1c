"""`python -m bench.stress_ceiling --model qwen3-vl`: what any weight quantization can reach on the outlier-stress copy.

The outlier-stress check (`quantize/outliers.py`) scales a few residual channels by 20-100x in every weight
that writes the stream, so each block's update of those channels is scaled too: an error in a writer's input
reaches the stream multiplied by up to 100x. This measures how much that amplifies a perturbation of the
weights alone, with no quantizer involved: every quantizable MatMul weight W [K, M] gets Gaussian noise of
`level` x the standard deviation of its column (fp32 throughout), in the random-weight model and in its
stressed copy, and the outputs are compared with the unperturbed model's (min per-token cosine over every
output, at one square image per size). For scale, the relative RMS error that rounding alone puts on
the same weights: int8 per output column (what dynamic INT8 does: 8 and 7 bits) and MatMulNBits 8-bit
blocks of 32. Each model runs in this process, one copy in memory at a time. Writes
bench/results/stress-ceiling-NAME.json and .md. Torch-free; needs build/NAME/optimized.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx_ir as ir

from bench.timing import grid_for, pixels, stage_model
from quantize import outlier_check, outliers, quantizers, stage
from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core import parity as metrics
from vlm_vision_onnx.core.machine import describe, machine
from vlm_vision_onnx.core.session import open_session

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
LEVELS = (1e-4, 1e-3, 1e-2)
#: The stress copies (`quantize.outliers.WRITERS`) by their row label.
COPIES = {"every": "outlier stress, every writer", "embedding": "outlier stress, embedding + biases"}
#: (label, int8 flags) each stress copy is quantized with.
QUANTIZED = [("dynamic 7-bit, outlier split", ["--method", "dynamic", "--reduce-range"]),
             ("dynamic 7-bit, no split", ["--method", "dynamic", "--reduce-range", "--outlier-ratio", "0"])]
SIZES = (448, 1024)
SEED = 1


def say(message: str) -> None:
    print(f"[stress-ceiling] {message}", flush=True)


def rounding_error(model: ir.Model) -> dict[str, float]:
    """Relative RMS error ||W - Q(W)|| / ||W|| over every quantizable weight, for each rounding scheme."""
    sums = {"int8 per column": 0.0, "int7 per column (--reduce-range)": 0.0, "8-bit blocks of 32": 0.0}
    total = 0.0
    for node, _ in quantizers.quantizable(model):
        w = node.inputs[1].const_value.numpy().astype(np.float64)
        total += float((w ** 2).sum())
        for label, levels in (("int8 per column", 127), ("int7 per column (--reduce-range)", 63)):
            step = np.abs(w).max(axis=0, keepdims=True) / levels
            sums[label] += float(((np.round(w / step) * step - w) ** 2).sum())
        k = w.shape[0] - w.shape[0] % 32
        blocks = w[:k].reshape(-1, 32, w.shape[1])
        step = np.abs(blocks).max(axis=1, keepdims=True) / 127
        sums["8-bit blocks of 32"] += float(((np.round(blocks / step) * step - blocks) ** 2).sum())
    return {label: (s / total) ** 0.5 for label, s in sums.items()}


def perturbed(model_file: Path, level: float, out: Path) -> None:
    """`model_file` with N(0, (level x column std)^2) added to every quantizable weight, saved to `out`."""
    model = onnx_io.load(model_file)
    rng = np.random.default_rng(SEED)
    for node, _ in quantizers.quantizable(model):
        w = node.inputs[1].const_value.numpy()
        noise = level * w.std(axis=0, keepdims=True) * rng.standard_normal(w.shape)
        node.inputs[1].const_value = ir.tensor((w + noise).astype(np.float32), name=node.inputs[1].name)
    onnx_io.save(model, out)


def quantized(copy: Path, work: Path, flags: list[str]) -> float:
    """Min per-token cosine of `python -m quantize int8 COPY_FOLDER OUT FLAGS --outliers off` against the copy's
    own fp32 outputs over every validation layout (the stage's report)."""
    from quantize import __main__ as quantize_cli

    out = work / "int8"
    if quantize_cli.main(["int8", str(copy), str(out), *flags, "--outliers", "off", "--force"]) != 0:
        raise SystemExit(f"error: python -m quantize int8 {copy} ... {' '.join(flags)} failed")
    worst = json.loads((out / "report.json").read_text())["validation"]["min_token_cosine"]
    shutil.rmtree(out)
    return worst


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.stress_ceiling", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-vl")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    optimized = stage_model(args.build, args.model)
    feeds = [pixels(grid_for(side, side)) for side in SIZES]
    rows, stage_rows, record = [], [], None
    with tempfile.TemporaryDirectory(prefix=".stress-ceiling-", dir=optimized.parent.parent) as tmp:
        tmp = Path(tmp)
        named = tmp / "random.onnx"  # every node named, as the stages see it
        model = onnx_io.load(optimized)
        stage.name_nodes(model)
        rounding = rounding_error(model)
        onnx_io.save(model, named)
        del model
        copies = {"random": named}
        for writers in outliers.WRITERS:
            folder = tmp / f"stress-{writers}"
            folder.mkdir()
            record = outlier_check.make_stressed(named, folder / onnx_io.MODEL_FILE, writers)
            copies[COPIES[writers]] = folder / onnx_io.MODEL_FILE
        for kind, model_file in copies.items():
            session = open_session(model_file, args.threads)
            reference = [session.run(None, feed) for feed in feeds]
            del session
            for level in LEVELS:
                noisy = tmp / "noisy.onnx"
                perturbed(model_file, level, noisy)
                session = open_session(noisy, args.threads)
                cosines = [min(metrics.min_token_cosine(g, r) for g, r in zip(session.run(None, feed), ref))
                           for feed, ref in zip(feeds, reference)]
                del session
                rows.append({"weights": kind, "level": level, "min_token_cosine": dict(zip(map(str, SIZES), cosines))})
                say(f"{kind}, noise {level:g} x column std: " +
                    ", ".join(f"{s}x{s} {c:.5f}" for s, c in zip(SIZES, cosines)))
        for writers in outliers.WRITERS:
            for label, flags in QUANTIZED:
                worst = quantized(copies[COPIES[writers]].parent, tmp, flags)
                stage_rows.append({"weights": COPIES[writers], "quantization": label, "flags": flags,
                                   "min_token_cosine": worst})
                say(f"{COPIES[writers]}, {label}: min per-token cosine {worst:.5f}")
    facts = machine()
    result = {"model": args.model, "machine": facts, "sizes": list(SIZES), "seed": SEED,
              "stress": {"channels": record["channels"], "factors": record["factors"]},
              "rounding_relative_rms": rounding, "rows": rows, "quantized": stage_rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"stress-ceiling-{args.model}.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / f"stress-ceiling-{args.model}.md").write_text(markdown(result))
    say(f"wrote {args.out / f'stress-ceiling-{args.model}.md'}")
    return 0


def markdown(result: dict) -> str:
    sizes = [f"{s}x{s}" for s in result["sizes"]]
    stress = result["stress"]
    lines = [f"# Outlier stress: what weight noise alone does ({result['model']})", "",
             (f"Produced by `python -m bench.stress_ceiling --model {result['model']}` on "
              f"{describe(result['machine'])}. Every quantizable MatMul weight gets Gaussian noise of LEVEL x its "
              f"column's standard deviation (fp32, seed {result['seed']}); min per-token cosine of every output "
              "against the unperturbed model, one square image per size. Random weights, and two outlier-stress "
              f"copies (residual channels {stress['channels']} x {stress['factors']}): every writer of the stream "
              "scaled (the stages' check), or only the patch embedding and the blocks' bias terms "
              "(`quantize.outliers.WRITERS`)."), "",
             f"| weights | noise (x column std) | {' | '.join(sizes)} |", "|---|---:|" + "---:|" * len(sizes)]
    lines += [f"| {r['weights']} | {r['level']:g} | " + " | ".join(f"{c:.5f}" for c in r["min_token_cosine"].values())
              + " |" for r in result["rows"]]
    lines += ["", ("Relative RMS error of rounding the same weights (what a quantizer adds before any activation "
                   "error):"), "", "| rounding | relative RMS |", "|---|---:|"]
    lines += [f"| {label} | {value:.4f} |" for label, value in result["rounding_relative_rms"].items()]
    lines += ["", ("Each stress copy through the int8 stage's own command (`--outliers off`: the quantization "
                   "alone), min per-token cosine against the copy's fp32 outputs over every validation layout:"),
              "", "| weights | quantization | min per-token cosine | flags |", "|---|---|---:|---|"]
    lines += [f"| {r['weights']} | {r['quantization']} | {r['min_token_cosine']:.5f} | `{' '.join(r['flags'])}` |"
              for r in result["quantized"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
