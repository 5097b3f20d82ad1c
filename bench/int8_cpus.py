"""`python -m bench.int8_cpus --model qwen3-vl-tiny`: the same quantized models on a CPU with VNNI and on one without.

ONNX Runtime's u8 x s8 kernel of x86 CPUs without VNNI/AMX saturates (`core/cpu.py`). This builds the INT8
variants (and the shipped INT4) of build/NAME/optimized with the stages' own commands (`--outliers off`: the
quantization alone)
into build/NAME/int8-cpus/LABEL/, runs them and the fp32 model at the first CASES validation layouts on this
CPU, and runs the INT8 models again under `qemu-x86_64 -cpu Haswell` (user-mode emulation of an AVX2 CPU
without VNNI, so ORT dispatches its AVX2 kernels; Debian's `qemu-user`), each run in its own process. Per
variant and CPU: min per-token cosine against the fp32 outputs of this CPU. Writes
bench/results/int8-cpus-NAME.json and .md. Torch-free; needs `make export MODEL=NAME` first (the tiny model:
seconds to build, about a minute per model under qemu).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.timing import stage_model
from vlm_vision_onnx.core import parity
from vlm_vision_onnx.core.machine import describe, machine
from vlm_vision_onnx.core.session import open_session
from vlm_vision_onnx.families import QWEN3_VL, validation

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
#: (label, stage, flags of `python -m quantize STAGE`)
VARIANTS = [
    ("int8 dynamic 8-bit (--full-range)", "int8", ["--method", "dynamic", "--full-range"]),
    ("int8 dynamic 7-bit (--reduce-range, default)", "int8", ["--method", "dynamic", "--reduce-range"]),
    ("int8 nbits 8-bit b32 a4", "int8", ["--method", "nbits", "--block-size", "32", "--accuracy-level", "4"]),
    ("int4 b128 asym a4", "int4", ["--block-size", "128", "--asymmetric", "--accuracy-level", "4"]),
]
#: How many of the validation layouts (in the export's order) each model runs at.
CASES = 6
EMULATED_CPU = "Haswell"


def say(message: str) -> None:
    print(f"[int8-cpus] {message}", flush=True)


def run_model(model: Path, feeds: Path, out: Path, emulate: str | None) -> float:
    """Run `model` at every feed of the npz `feeds` in a child process (under qemu when `emulate`); seconds."""
    command = [sys.executable, "-m", "bench.int8_cpus", "--child", str(model), str(feeds), str(out)]
    if emulate:  # the venv's interpreter under qemu; site-packages as PYTHONPATH (qemu's argv[0] is the binary)
        site = next(p for p in sys.path if p.endswith("site-packages"))
        command = ["qemu-x86_64", "-cpu", emulate, "-E", f"PYTHONPATH={ROOT}:{site}",
                   os.path.realpath(sys.executable), *command[1:]]
    start = time.perf_counter()
    done = subprocess.run(command, check=False, cwd=ROOT, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise SystemExit(f"error: running {model.name} {'under qemu -cpu ' + emulate if emulate else 'natively'} "
                         f"failed (exit {done.returncode}): {last}")
    return time.perf_counter() - start


def child(model: str, feeds: str, out: str) -> None:
    """One process: run `model` at each case of `feeds` ({case}__{input}) and save {case}__{output}."""
    session = open_session(model, 1)
    data = np.load(feeds)
    cases = sorted({k.split("__")[0] for k in data.files})
    results = {}
    for case in cases:
        feed = {k.split("__", 1)[1]: data[k] for k in data.files if k.startswith(case + "__")}
        for meta, value in zip(session.get_outputs(), session.run(None, feed)):
            results[f"{case}__{meta.name}"] = value
    np.savez(out, **results)


def worst_cosine(outputs: Path, reference: Path) -> float:
    got, ref = np.load(outputs), np.load(reference)
    return min(parity.min_token_cosine(got[k], ref[k]) for k in ref.files)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        child(*argv[1:4])
        return 0
    parser = argparse.ArgumentParser(prog="python -m bench.int8_cpus", description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-vl-tiny")
    parser.add_argument("--build", type=Path, default=ROOT / "build")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    optimized = stage_model(args.build, args.model)
    if shutil.which("qemu-x86_64") is None:
        print("error: qemu-x86_64 is not installed: `apt-get install qemu-user` (it emulates a CPU without VNNI)",
              file=sys.stderr)
        return 2
    from quantize import __main__ as quantize_cli

    layouts = validation.from_report(optimized, QWEN3_VL)[:CASES]
    inputs = validation.layout_inputs(QWEN3_VL, layouts, {"patch_dim": "1536"})
    work = args.build / args.model / "int8-cpus"
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(dir=work) as tmp:
        tmp = Path(tmp)
        feeds = tmp / "feeds.npz"
        np.savez(feeds, **{f"c{i:02d}__{k}": v for i, x in enumerate(inputs) for k, v in x.items()})
        reference = tmp / "fp32.npz"
        run_model(optimized, feeds, reference, None)
        for label, stage, flags in VARIANTS:
            folder = work / label.split(" (")[0].replace(" ", "-")
            say(f"building {folder}: python -m quantize {stage} {optimized.parent} {folder} {' '.join(flags)}")
            if quantize_cli.main([stage, str(optimized.parent), str(folder), *flags, "--outliers", "off",
                                  "--force"]) != 0:
                return 1
            row = {"label": label, "stage": stage, "flags": flags}
            for cpu, emulate in (("native", None), ("emulated", EMULATED_CPU)):
                out = tmp / f"{folder.name}-{cpu}.npz"
                seconds = run_model(folder / "model.onnx", feeds, out, emulate)
                row[cpu] = worst_cosine(out, reference)
                say(f"{label} on {cpu}: min per-token cosine {row[cpu]:.5f} ({seconds:.0f} s)")
            rows.append(row)
    facts = machine()
    result = {"model": args.model, "machine": facts, "emulated_cpu": EMULATED_CPU,
              "cases": [lay["case"] for lay in layouts], "rows": rows}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"int8-cpus-{args.model}.json").write_text(json.dumps(result, indent=1) + "\n")
    intro = (f"Produced by `python -m bench.int8_cpus --model {args.model}`. Native: {describe(facts)} (VNNI: "
              f"{facts['vnni']}); emulated: `qemu-x86_64 -cpu {EMULATED_CPU}` (AVX2, no VNNI) on the same host. "
              f"Min per-token cosine against the fp32 model's outputs on the native CPU, over the validation "
              f"layouts {', '.join(result['cases'])} and every output. Random weights; quantization alone "
              "(`--outliers off`).")
    lines = [f"# INT8 and INT4 on a CPU with and without VNNI: {args.model}", "", intro, "",
             f"| variant | native | {EMULATED_CPU} (emulated) | flags |", "|---|---:|---:|---|"]
    lines += [f"| {r['label']} | {r['native']:.5f} | {r['emulated']:.5f} | `{r['stage']} {' '.join(r['flags'])}` |"
              for r in rows]
    (args.out / f"int8-cpus-{args.model}.md").write_text("\n".join(lines) + "\n")
    say(f"wrote {args.out / f'int8-cpus-{args.model}.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
