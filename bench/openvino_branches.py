"""`python -m bench.openvino_branches --build build/qwen3-vl-2b`: OpenVINO running the optimized file with its Ifs
as they are against each If replaced by the branch it takes (core.openvino_branches, what `OpenVINOSession` runs).

Each point runs in a fresh process (peak resident memory is per process): read, compile, one warm-up run, `--reps`
timed runs; rounds alternate the two forms. Writes bench/results/openvino-branches[-SUFFIX].md/.json: median
seconds, peak RSS and the largest difference between the two forms' outputs, per photo size.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.timing import write_results
from core.machine import describe, machine
from core.progress import say

TAG = "openvino-branches"
FORMS = ("Ifs as they are", "branches wired in")
RESULTS = Path(__file__).parent / "results"


def point(model: str, form: str, precision: str, threads: int, feeds: str, reps: int, out: str) -> dict:
    """One process's measurement: {seconds: [...], peak_rss_mib}; the outputs saved to `out`."""
    import openvino

    from core import openvino_session

    core = openvino.Core()
    config = {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads}
    with np.load(feeds) as loaded:
        inputs = {k: loaded[k] for k in loaded.files}
    first = core.read_model(model)
    own = len(first.outputs)  # the model's outputs (compile_cpu adds the Ifs' outputs after them)
    if form == FORMS[0]:
        compiled = openvino_session.compile_cpu(core, first, config)
    else:
        compiled = openvino_session.branch_compiler(core, model, config, keep=1, model=first)(inputs)
    del first
    request = compiled.create_infer_request()
    request.infer(inputs)
    seconds = []
    for _ in range(reps):
        start = time.perf_counter()
        request.infer(inputs)
        seconds.append(time.perf_counter() - start)
    np.savez(out, *[request.get_output_tensor(i).data.copy() for i in range(own)])
    return {"seconds": seconds, "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def measure(build: Path, sizes: list[int], precision: str, threads: int, reps: int, rounds: int, tmp: Path) -> dict:
    """{size: {form: {seconds, peak_rss_mib}, 'max_abs_diff': float}}."""
    from bench import cpu_race

    model = build / "optimized" / "model.onnx"
    cases = cpu_race.cases(model, sizes, 0)
    found = {}
    for size in sizes:
        case = f"{size}x{size}"
        feeds = tmp / f"{case}.npz"
        np.savez(feeds, **cases[case])
        runs = {form: {"seconds": [], "peak_rss_mib": 0.0} for form in FORMS}
        for r in range(rounds):
            for form in FORMS:
                say(f"{case} round {r + 1}/{rounds}: {form}", TAG)
                args = [str(model), form, precision, threads, str(feeds), reps, str(tmp / f"{case}-{FORMS.index(form)}.npz")]
                code = f"import json, sys; from bench.openvino_branches import point; print(json.dumps(point(*{args!r})))"
                done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
                got = json.loads(done.stdout.strip().splitlines()[-1])
                runs[form]["seconds"] += got["seconds"]
                runs[form]["peak_rss_mib"] = max(runs[form]["peak_rss_mib"], got["peak_rss_mib"])
        with np.load(tmp / f"{case}-0.npz") as a, np.load(tmp / f"{case}-1.npz") as b:
            diff = max(float(np.abs(a[k] - b[k]).max()) for k in a.files)
        found[case] = {**{form: {**r, "median_s": float(np.median(r["seconds"]))} for form, r in runs.items()},
                       "max_abs_diff": diff}
    return found


def markdown(result: dict) -> str:
    lines = [f"# OpenVINO: Ifs as they are against the branches wired in ({result['build']})", "",
             (f"`{result['command']}` on {describe(result['machine'])}; {result['started']} - {result['finished']}. OpenVINO "
             f"{result['precision']}, {result['threads']} thread(s); each point a fresh process (read, compile, "
             "one warm-up run, then the timed runs), rounds alternating the forms; medians; peak RSS per process."),
             "", "| photo | form | median s | peak RSS MiB | outputs' max abs difference |", "|---|---|---:|---:|---:|"]
    for case, r in result["cases"].items():
        for form in FORMS:
            lines.append(f"| {case} | {form} | {r[form]['median_s']:.3f} | {r[form]['peak_rss_mib']:,.0f} | "
                         f"{r['max_abs_diff']:.3g} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.openvino_branches", description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=Path, required=True)
    parser.add_argument("--sizes", default="448,1024", help="square photo sides, comma-separated (default 448,1024)")
    parser.add_argument("--precision", default="bf16", choices=("f32", "bf16"))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--suffix", default="")
    args = parser.parse_args(argv)
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    with tempfile.TemporaryDirectory() as tmp:
        cases = measure(args.build, [int(s) for s in args.sizes.split(",")], args.precision, args.threads,
                        args.reps, args.rounds, Path(tmp))
    command = "python -m bench.openvino_branches " + " ".join(argv if argv is not None else sys.argv[1:])
    result = {"build": args.build.name, "command": command, "machine": machine(), "started": started,
              "finished": time.strftime("%Y-%m-%dT%H:%M:%S"), "precision": args.precision, "threads": args.threads,
              "cases": cases}
    write_results(RESULTS, f"openvino-branches{'-' + args.suffix if args.suffix else ''}", result, markdown(result),
                  TAG)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
