"""`python -m bench.ov_streams --build build/qwen3-vl-2b --size 1024`: several photos on OpenVINO one at a time
against several at once on its streams, as `runtime embed` runs them.

Two sessions of one OpenVINO path (`--path`, a label of `bench.cpu_race.paths`: "OV INT8" by default, the
default path at 1024^2 on an AMX Xeon), each running the same photos (`--photos`, scikit-image's, resized to
`--size`^2 through the package's processor) with `OpenVINOSession.run_each`:
  one at a time   compiled for latency (`at_once=1`): each photo alone on every thread, one after another
  at once         compiled for that many requests (`at_once=photos`, `openvino_session.performance_hint`): the
                  CPU plugin's throughput streams, each on a share of the threads (what `runtime embed` runs)
Timed interleaved (`--reps` rounds after an untimed one); each round makes its infer requests anew, as a process
does; the two forms' outputs compared (min per-token cosine over every output and photo).
Writes bench/results/ov-streams[-SUFFIX].json and .md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

from bench.cpu_race import EMBED_PHOTOS, FLAGS, cases, paths
from bench.timing import load_average, shown, write_results
from core import cpu
from core.machine import describe, machine
from core.parity import min_token_cosine
from core.progress import say

ROOT = Path(__file__).resolve().parents[1]
TAG = "ov-streams"
FORMS = ("one at a time", "at once")


def photo_feeds(build: Path, photos: tuple[str, ...], size: int) -> list[dict]:
    """The feeds of each photo at `size`^2 through the package's processor."""
    return [next(iter(cases(build / "optimized" / "model.onnx", [size], 0, photo=photo).values()))
            for photo in photos]


def race(build: Path, label: str, feeds: list[dict], threads: int, reps: int) -> dict:
    """Both forms of `label`'s session on `feeds`, interleaved: {form: {times_s, median_s}, 'streams',
    'min_token_cosine'}."""
    from core.openvino_session import OpenVINOSession

    command = paths(build)[label]
    sessions = {form: OpenVINOSession(command["file"], threads, command["precision"],
                                      at_once=1 if form == FORMS[0] else len(feeds)) for form in FORMS}
    outputs = {form: sess.run_each(None, feeds) for form, sess in sessions.items()}  # untimed
    times: dict[str, list[float]] = {form: [] for form in FORMS}
    for round_ in range(reps):
        for form, sess in sessions.items():
            start = time.perf_counter()
            sess.run_each(None, feeds)
            times[form].append(round(time.perf_counter() - start, 3))
        say(f"round {round_ + 1}/{reps}: " + ", ".join(f"{form} {t[-1]:.2f} s" for form, t in times.items()), TAG)
    agree = min(min_token_cosine(a, b) for one, other in zip(*outputs.values()) for a, b in zip(one, other))
    return {**{form: {"times_s": t, "median_s": statistics.median(t)} for form, t in times.items()},
            "at_a_time": {form: sess.most_at_once for form, sess in sessions.items()},
            "min_token_cosine": round(float(agree), 6),
            "speedup": round(statistics.median(times[FORMS[0]]) / statistics.median(times[FORMS[1]]), 3)}


def markdown(result: dict) -> str:
    r = result["race"]
    flags = ", ".join(result["cpu_flags"])
    lines = ["# OpenVINO: photos one at a time or at once on its streams", "",
             (f"`{result['command']}` on {describe(result['machine'])}; CPU flags: {flags}; {result['started']} - "
             f"{result['finished']}. {result['path']} ({result['file']}), {len(result['photos'])} photos "
             f"({', '.join(result['photos'])}) at {result['size']}x{result['size']}, {result['threads']} thread(s); "
             f"medians of {len(r[FORMS[0]]['times_s'])} interleaved rounds after an untimed one."), "",
             "| form | photos at a time | median s | rounds s |", "|---|---:|---:|---|"]
    for form in FORMS:
        lines.append(f"| {form} | {r['at_a_time'][form]} | {r[form]['median_s']:.2f} | "
                     f"{', '.join(f'{t:.2f}' for t in r[form]['times_s'])} |")
    lines += ["", (f"At once: **{r['speedup']:.2f}x** the speed of one at a time; the two forms' outputs agree at a "
                  f"min per-token cosine of {r['min_token_cosine']:.6f}."), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ov_streams", description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build" / "qwen3-vl-2b")
    parser.add_argument("--path", default="OV INT8", help="an OpenVINO path of bench.cpu_race (default: OV INT8)")
    parser.add_argument("--size", type=int, default=1024, help="square photo side (default 1024)")
    parser.add_argument("--photos", default=",".join(EMBED_PHOTOS),
                        help=f"scikit-image photos, comma-separated (default {','.join(EMBED_PHOTOS)})")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--suffix", default="")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    found = paths(args.build)
    if not args.path.startswith("OV") or args.path not in found:
        parser.error(f"--path: {args.path!r} is no OpenVINO path of {args.build} on this machine; known: "
                     f"{', '.join(label for label in found if label.startswith('OV'))}")
    photos = tuple(p.strip() for p in args.photos.split(",") if p.strip())
    result = {"command": "python -m bench.ov_streams " + " ".join(argv if argv is not None else sys.argv[1:]),
              "machine": machine(), "cpu_flags": [f for f in FLAGS if cpu.has(f)], "path": args.path,
              "file": shown(found[args.path]["file"]), "size": args.size, "photos": list(photos), "threads": args.threads,
              "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_average_start": load_average()}
    result["race"] = race(args.build, args.path, photo_feeds(args.build, photos, args.size), args.threads, args.reps)
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    write_results(args.out, "ov-streams" + (f"-{args.suffix}" if args.suffix else ""), result, markdown(result), TAG)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
