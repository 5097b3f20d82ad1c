"""`python -m bench.suite_durations LOG --label LABEL [--note TEXT]`: where the test suite's time goes.

LOG is the output of a pytest run with `--durations=0` (for example `make test PYTEST_ARGS=--durations=0 2>&1 | tee
LOG`, or `.venv/bin/python -m pytest -q tests --durations=0 > LOG`). The run's figures (its wall time and counts
from pytest's last line, the 40 slowest test phases, seconds per test file: setup, call and teardown of its tests
summed, and the machine) go into bench/results/test-durations.json under "runs" / LABEL, and
bench/results/test-durations.md is written anew from every label there, in the order they were added.

With pytest-xdist the per-test seconds are each worker's own: their sum is more than the wall time.

`--builds CACHE/made.tsv` (tests/builds.py writes a line per build it makes) adds the seconds the run spent making
its builds, summed per label (each build's own making, its parents excluded): where a cold run's setup time goes.
"""

import json
import re
from collections import defaultdict
from pathlib import Path

from bench.timing import write_results
from vlm_vision_onnx.core.errors import Parser, UsageError, main_wrapper
from vlm_vision_onnx.core.machine import describe, machine

RESULTS = Path(__file__).resolve().parent / "results"
#: One line of pytest's durations table: "12.34s call     tests/test_x.py::test_y[param]".
PHASE = re.compile(r"^(\d+(?:\.\d+)?)s (setup|call|teardown)\s+(\S+?)::(.+)$")
#: pytest's last line: "1476 passed, 13 skipped, 5 warnings in 1315.32s (0:21:55)".
SUMMARY = re.compile(r"^=*\s*(.*?) in (\d+(?:\.\d+)?)s")
SLOWEST = 40


def parse(text: str) -> dict:
    """{wall_s, outcome, slowest: [[seconds, phase, file, test]], per_file: {file: seconds}} of one pytest log."""
    phases, summary = [], None
    for line in text.splitlines():
        if match := PHASE.match(line.strip()):
            phases.append([float(match[1]), match[2], match[3], match[4]])
        elif (match := SUMMARY.match(line.strip())) and ("passed" in line or "failed" in line):
            summary = match
    if summary is None or not phases:
        raise UsageError("the log holds no pytest summary line or no durations table (run pytest with --durations=0)")
    per_file = defaultdict(float)
    for seconds, _, file, _ in phases:
        per_file[file] += seconds
    return {"wall_s": float(summary[2]), "outcome": summary[1].strip("= "),
            "slowest": sorted(phases, key=lambda p: -p[0])[:SLOWEST],
            "per_file": dict(sorted(((f, round(s, 2)) for f, s in per_file.items()), key=lambda kv: -kv[1])),
            "phases_total_s": round(sum(p[0] for p in phases), 1)}


def builds(text: str) -> dict:
    """{label: [count, seconds]} from made.tsv's lines "label<TAB>folder<TAB>seconds<TAB>pid", most seconds first."""
    found = defaultdict(lambda: [0, 0.0])
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split("\t")
        try:
            found[fields[0]][0] += 1
            found[fields[0]][1] += float(fields[2])
        except (IndexError, ValueError):
            raise UsageError(f"line {number} of the builds file is not label, folder, seconds, pid: {line[:80]!r}") from None
    return {label: [n, round(s, 1)] for label, (n, s) in sorted(found.items(), key=lambda kv: -kv[1][1])}


def markdown(runs: dict) -> str:
    lines = ["# Test-suite durations", "",
             "Written by `python -m bench.suite_durations LOG --label LABEL` from a pytest log with `--durations=0`.",
             "Wall: pytest's own figure for the test run (after install). Sum of phases: every test's setup, call and",
             "teardown added up (more than the wall under pytest-xdist, whose workers run at once).", ""]
    lines += ["| run | machine | wall | sum of phases | outcome | note |", "|---|---|---:|---:|---|---|"]
    lines += [f"| {label} | {r['machine']} | {r['wall_s'] / 60:.1f} min ({r['wall_s']:.0f} s) | {r['phases_total_s']:.0f} s "
              f"| {r['outcome']} | {r.get('note', '')} |" for label, r in runs.items()]
    for label, run in runs.items():
        lines += ["", f"## {label}", "", f"Command: `{run['command']}`" if run.get("command") else "", "",
                  f"### The {SLOWEST} slowest test phases", "", "| s | phase | test |", "|---:|---|---|"]
        lines += [f"| {s:.1f} | {phase} | `{file}::{test}` |" for s, phase, file, test in run["slowest"]]
        lines += ["", "### Seconds per file (setup + call + teardown)", "", "| file | s |", "|---|---:|"]
        lines += [f"| `{file}` | {s:.1f} |" for file, s in run["per_file"].items()]
        if run.get("builds"):
            total = sum(s for _, s in run["builds"].values())
            lines += ["", f"### Builds made ({total:.0f} s in all, each build's own making, parents excluded)", "",
                      "| build | made | s |", "|---|---:|---:|"]
            lines += [f"| {label} | {n} | {s:.1f} |" for label, (n, s) in run["builds"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m bench.suite_durations", description=__doc__.split("\n\n")[0])
    parser.add_argument("log", type=Path, help="a pytest log with --durations=0")
    parser.add_argument("--label", required=True, help="the run's name in the tables (before, after, ...)")
    parser.add_argument("--command", default="", help="the command that made the log, for the record")
    parser.add_argument("--note", default="", help="one line beside the run (cache state, workers, ...)")
    parser.add_argument("--builds", type=Path, help="the run's CACHE/made.tsv (tests/builds.py), for seconds per build")
    parser.add_argument("--results", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    def body() -> int:
        if not args.log.is_file():
            raise UsageError(f"{args.log} is not a file")
        run = parse(args.log.read_text(errors="replace"))
        run.update(machine=describe(machine()), command=args.command, note=args.note)
        if args.builds:
            if not args.builds.is_file():
                raise UsageError(f"{args.builds} is not a file")
            run["builds"] = builds(args.builds.read_text(errors="replace"))
        store = args.results / "test-durations.json"
        result = json.loads(store.read_text()) if store.is_file() else {"runs": {}}
        result["runs"][args.label] = run
        write_results(args.results, "test-durations", result, markdown(result["runs"]), "suite_durations")
        return 0

    return main_wrapper(body)

if __name__ == "__main__":
    raise SystemExit(main())
