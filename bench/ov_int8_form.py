"""`python -m bench.ov_int8_form STAGE`: which form of the OpenVINO INT8 variant OpenVINO loads and runs fastest.

STAGE is an ov-int8 stage folder (`python -m quantize ov-int8`: OpenVINO IR, model.xml + model.bin). The same
quantization is made as QDQ ONNX by NNCF's ONNX backend from the stage's input (the optimize stage's model.onnx),
with the stage's own NNCF arguments (`quantize.ov_int8.nncf_arguments`) and the MatMuls the stage kept float.
Each form, and the fp32 ONNX file for scale, is then opened and run the way `runtime embed --engine openvino`
opens it (`core.openvino_session.OpenVINOSession`), each time in a fresh process, interleaved over `--rounds`:
- load: read + compile for the CPU (what every `embed` call pays before its first image),
- first: the first inference after it, and steady: the median of `--reps` inferences after that,
- peak RSS of the process,
on one photo through the family's processor (`--size`, default 448x448), plus the min per-token cosine of each
form's outputs against ONNX Runtime fp32 there. Results: bench/results/ov-int8-form.md and .json.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from core import machine, onnx_io
from core import report as reports
from core.errors import Parser, main_wrapper
from core.openvino_session import ir_file_sizes
from core.parity import min_token_cosine
from core.progress import say
from core.session import open_session, run

TAG = "bench.ov_int8_form"
RESULTS = Path(__file__).parent / "results"
STEM = "ov-int8-form"


def child(path: str, feeds: str, threads: int, precision: str, reps: int, out: str | None) -> dict:
    """In a fresh process: open `path` as `runtime embed --engine openvino` does, run it; the times."""
    from core.openvino_session import OpenVINOSession

    data = dict(np.load(feeds))
    start = time.perf_counter()
    session = OpenVINOSession(path, threads or None, precision)
    load = time.perf_counter() - start
    start = time.perf_counter()
    outputs = session.run(None, data)
    first = time.perf_counter() - start
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        session.run(None, data)
        times.append(time.perf_counter() - start)
    if out:
        np.savez(out, *outputs)
    return {"load_s": load, "first_s": first, "steady_s": float(np.median(times)),
            "peak_rss_mib": reports.peak_rss_mib()}


def qdq_onnx(stage: Path, dst: Path) -> Path:
    """The stage's quantization as QDQ ONNX (NNCF's ONNX backend) at `dst`."""
    import nncf
    import onnx

    from quantize import calibration, ov_int8

    report = json.loads((stage / "report.json").read_text())
    source = onnx_io.model_path(report["input"])
    config = report["config"]
    options = ov_int8.OvInt8Options(config["min_cosine"], config["smooth_alpha"], config["outliers"],
                                    config["stress_target"], tuple(config["exclude"]))
    floats = {n["node"] for n in report["float_weight_nodes"]}
    floats |= set(report["attention"]["matmuls_of_two_activations"])
    model = onnx.load(str(source))
    # OpenVINO names a node that writes a graph output after that output: match ONNX nodes by name or output
    names = [n.name for n in model.graph.node if n.name in floats or any(o in floats for o in n.output)]
    feeds = calibration.stage_set(source)[0]()
    quantized = nncf.quantize(model, nncf.Dataset(feeds), **ov_int8.nncf_arguments(options, names, len(feeds), ("Conv",)))
    onnx_io.save_proto(quantized, dst)
    return dst


def measure(files: dict[str, Path], feeds: Path, threads: int, precision: str, rounds: int, reps: int,
            work: Path) -> dict[str, list[dict]]:
    """{label: [child() per round]}: every file in a fresh process, interleaved over the rounds; the first round
    also keeps the outputs (work/LABEL.npz)."""
    found = {label: [] for label in files}
    for r in range(rounds):
        for label, path in files.items():
            out = str(work / f"{label}.npz") if r == 0 else ""
            args = [sys.executable, "-m", "bench.ov_int8_form", "--child", str(path), str(feeds), str(threads),
                    precision, str(reps), out]
            done = subprocess.run(args, capture_output=True, text=True, check=True, cwd=Path(__file__).parent.parent)
            found[label].append(json.loads(done.stdout.strip().splitlines()[-1]))
            say(f"round {r + 1}/{rounds} {label}: {found[label][-1]}", TAG)
    return found


def markdown(result: dict) -> str:
    lines = [
        "# OpenVINO INT8 variant: IR or QDQ ONNX",
        "",
        (f"`python -m bench.ov_int8_form {result['stage']} --rounds {result['rounds']} --reps {result['reps']} "
        f"--threads {result['threads']}` ({result['started']}); {machine.describe(result['machine'])} "
        f"(AVX-512 {'yes' if result['machine']['avx512'] else 'no'}, VNNI {'yes' if result['machine']['vnni'] else 'no'}, "
        f"AMX {'yes' if result['machine']['amx'] else 'no'}); OpenVINO {result['openvino']} at precision "
        f"{result['precision']}, {result['threads']} thread(s); model {result['model']} ({result['weights']}); "
        f"one {result['size']} photo through the family's processor ({result['tokens']} patches). Each file opened "
        "as `runtime embed --engine openvino` opens it, in a fresh process per round, interleaved; medians over the "
        "rounds. Cosine: min per-token cosine against ONNX Runtime fp32 on that photo. Load average at start "
        f"{result['load_average_start']}, at end {result['load_average_end']} (a shared machine: compare within the "
        "table, not with other runs)."),
        "",
        "| file | MiB | load (read + compile) s | first inference s | steady inference s | peak RSS MiB | cosine |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, row in result["forms"].items():
        lines.append(f"| {label} | {row['mib']:.1f} | {row['load_s']:.3f} | {row['first_s']:.3f} | "
                     f"{row['steady_s']:.3f} | {row['peak_rss_mib']:.0f} | {row['cosine']:.5f} |")
    lines += ["", result["decision"], ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == "--child":
        path, feeds, threads, precision, reps, out = sys.argv[2:8]
        print(json.dumps(child(path, feeds, int(threads), precision, int(reps), out or None)))
        return 0
    parser = Parser(prog="python -m bench.ov_int8_form", description=__doc__.splitlines()[0])
    parser.add_argument("stage", type=Path, help="an ov-int8 stage folder (python -m quantize ov-int8)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3, help="steady inferences per process (median)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", type=int, default=448, help="the photo's side in pixels (default 448)")
    parser.add_argument("--out", type=Path, default=RESULTS)

    def body() -> int:
        import openvino

        from core.engine import default_precision

        args = parser.parse_args(argv)
        started = time.strftime("%Y-%m-%dT%H:%M:%S")
        from bench.timing import load_average

        load_start = load_average()
        report = json.loads((args.stage / "report.json").read_text())
        fp32 = onnx_io.model_path(report["input"])
        precision = default_precision()
        with tempfile.TemporaryDirectory(prefix="ov-int8-form-") as tmp:
            work = Path(tmp)
            from bench.timing import photo_feed

            feed = photo_feed(fp32, (args.size, args.size))
            np.savez(work / "feeds.npz", **feed)
            reference = run(open_session(fp32, args.threads), feed)
            say("QDQ ONNX through NNCF's ONNX backend ...", TAG)
            qdq = qdq_onnx(args.stage, work / "qdq.onnx")
            files = {"OpenVINO IR (ov-int8 stage)": args.stage / "model.xml", "QDQ ONNX (NNCF ONNX backend)": qdq,
                     "fp32 ONNX (optimize stage; scale)": fp32}
            rounds = measure(files, work / "feeds.npz", args.threads, precision, args.rounds, args.reps, work)
            forms = {}
            for label, path in files.items():
                got = np.load(work / f"{label}.npz")
                outputs = [got[f"arr_{i}"] for i in range(len(got.files))]
                sizes = onnx_io.file_sizes(path) if path.suffix == ".onnx" else ir_file_sizes(path)
                forms[label] = {
                    "file": str(path), "mib": sum(sizes.values()) / 2**20,
                    **{k: float(np.median([r[k] for r in rounds[label]])) for k in rounds[label][0]},
                    "rounds": rounds[label],
                    "cosine": min(min_token_cosine(o, reference[n]) for o, n in zip(outputs, reference)),
                }
        names = list(forms)
        ir, qdq_row = forms[names[0]], forms[names[1]]
        faster = "IR" if ir["load_s"] <= qdq_row["load_s"] else "QDQ ONNX"
        decision = (f"Load: IR {ir['load_s']:.3f} s, QDQ ONNX {qdq_row['load_s']:.3f} s "
                    f"({max(ir['load_s'], qdq_row['load_s']) / min(ir['load_s'], qdq_row['load_s']):.2f}x: {faster} "
                    f"loads faster); steady inference: IR {ir['steady_s']:.3f} s, QDQ ONNX {qdq_row['steady_s']:.3f} s.")
        result = {"stage": str(args.stage), "started": started, "machine": machine.machine(),
                  "openvino": openvino.__version__, "precision": precision, "threads": args.threads,
                  "rounds": args.rounds, "reps": args.reps, "size": f"{args.size}x{args.size}",
                  "tokens": int(feed[next(iter(feed))].shape[0]), "model": report.get("model"),
                  "weights": report.get("weights"), "load_average_start": load_start, "forms": forms,
                  "decision": decision}
        from bench.timing import write_results

        result["load_average_end"] = load_average()
        write_results(args.out, STEM, result, markdown(result), TAG)
        return 0

    return main_wrapper(body)


if __name__ == "__main__":
    sys.exit(main())
