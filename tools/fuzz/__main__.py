"""`python -m tools.fuzz seeds DIR` makes the seeds (tools/fuzz/seeds.py); `python -m tools.fuzz run --seeds DIR
--work DIR --seed S --cases N [--first K] [--jobs J] [--budget-s T] [--json FILE]` runs cases K..K+N-1 of seed
S (or `--only K ...`), one forked process each, J at a time (tools/fuzz/runner.py), and prints the table of
outcomes per command.
Exit 0 when no case ended in a traceback, a hang, over the memory limit, a crash, a refusal of more than one line,
or with files written or removed outside OUT; 1 otherwise."""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from tools.fuzz import cases as fuzz_cases
from tools.fuzz import runner
from tools.fuzz import seeds as fuzz_seeds

#: The outcomes that are findings (a well-behaved command never ends so).
BAD = ("traceback", "hang", "memory", "crash")


def bad(result: dict) -> bool:
    return result["outcome"] in BAD or result["outside"] or result["one_line"] is False


def table(results: list[dict]) -> str:
    """Markdown: per command, the count of each outcome, refusals not on one line, cases writing outside OUT."""
    by_command: dict[str, Counter] = defaultdict(Counter)
    for r in results:
        counts = by_command[r["command"]]
        counts[r["outcome"]] += 1
        counts["not one line"] += r["one_line"] is False
        counts["not naming the input"] += r.get("names_input") is False
        counts["outside OUT"] += bool(r["outside"])
    columns = [*runner.OUTCOMES, "not one line", "not naming the input", "outside OUT"]
    lines = ["| command | cases | " + " | ".join(columns) + " |", "|---|---:|" + "---:|" * len(columns)]
    total = Counter()
    for command in sorted(by_command):
        counts = by_command[command]
        cases = sum(counts[o] for o in runner.OUTCOMES)
        total.update(counts)
        lines.append(f"| {command} | {cases} | " + " | ".join(str(counts[c]) for c in columns) + " |")
    lines.append(f"| **all** | {sum(total[o] for o in runner.OUTCOMES)} | "
                 + " | ".join(str(total[c]) for c in columns) + " |")
    return "\n".join(lines)


def markdown(summary: dict, command: str) -> str:
    """bench/results/fuzz.md: the run's seed, size, limits, machine and the table of outcomes per command."""
    from vlm_vision_onnx.core import machine

    results = summary["results"]
    findings = [r for r in results if bad(r)]
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    header = f"Written by `{command}` ({when}, {machine.describe(machine.machine())})."
    run_line = (f"Seed {summary['seed']}, {summary['cases']} cases in {summary['seconds'] / 60:.0f} min, each in its "
                f"own forked process with a limit of {summary['limits']['seconds']:.0f} s and "
                f"{summary['limits']['memory_mib']} MiB peak resident memory. Case N is made again with "
                f"`python -m tools.fuzz run --seeds DIR --work DIR --seed {summary['seed']} --only N` "
                "(docs/errors.md, \"Fuzzing\").")
    legend = ("Outcomes: done (exit 0); failed (exit 1: a check failed, or the command's findings, as "
              "`surgery doctor`'s); refused (exit 2, one `error:` line); traceback, hang, memory (past the limit or "
              "out of memory), crash (a signal); \"not one line\": a refusal without exactly one `error:` line; "
              "\"outside OUT\": a file written or removed outside OUT.")
    listed = "; ".join(f"case {r['number']} {r['command']}: {r['outcome']} ({r['what']})" for r in findings[:20])
    lines = ["# Fuzzing: malformed inputs through every command", "", header, "", run_line, "", legend, "",
             table(results), "", f"{len(findings)} finding(s)." + (f" {listed}" if listed else ""), ""]
    return "\n".join(lines)


def report(result: dict, case, count: int, start: float) -> dict:
    """Say a finding on stderr (its folder kept), drop a clean case's folder; progress every 100 cases."""
    if bad(result):
        print(f"[fuzz] case {result['number']} {result['command']}: {result['outcome']}"
              f"{' (not one line)' if result['one_line'] is False else ''}"
              f"{' outside OUT: ' + ', '.join(result['outside'][:3]) if result['outside'] else ''}: "
              f"{result['what']} -> {result['last_line'][:200]}", file=sys.stderr)
    else:
        shutil.rmtree(case.folder, ignore_errors=True)  # kept only when it is a finding
    if count % 100 == 0:
        print(f"[fuzz] {count} cases, {time.monotonic() - start:.0f} s", file=sys.stderr)
    return result


def run(args) -> int:
    seeds_dir = args.seeds.resolve()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    commands = fuzz_cases.available(fuzz_cases.COMMANDS)
    if args.command:
        commands = [c for c in commands if c.label in args.command]
    for module in sorted({c.module for c in commands}):  # imported once; each case forks from here
        importlib.import_module(module)
    limits = runner.Limits(seconds=args.timeout, memory_bytes=args.memory_mib * 2**20)
    seed_state = runner.snapshot(seeds_dir, seeds_dir / ".none")
    numbers = list(args.only or range(args.first, args.first + args.cases))
    results, running, start = [], [], time.monotonic()
    while numbers or running:
        spent = args.budget_s and time.monotonic() - start > args.budget_s
        while numbers and len(running) < args.jobs and not spent:
            case = fuzz_cases.make(numbers.pop(0), args.seed, seeds_dir, work, commands)
            running.append(runner.start(case, limits))
        if spent and numbers:
            print(f"[fuzz] budget of {args.budget_s:.0f} s spent after {len(results) + len(running)} cases",
                  file=sys.stderr)
            numbers = []
        for job in list(running):
            result = runner.poll(job, limits, seed_state, seeds_dir)
            if result is None:
                continue
            running.remove(job)
            results.append(report(result.to_dict(), job.case, len(results) + 1, start))
        time.sleep(0.005)
    results.sort(key=lambda r: r["number"])
    summary = {"seed": args.seed, "cases": len(results), "seconds": round(time.monotonic() - start, 1),
               "limits": {"seconds": limits.seconds, "memory_mib": args.memory_mib},
               "commands": [c.label for c in commands], "results": results}
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1) + "\n")
    if args.markdown:
        args.markdown.write_text(markdown(summary, "python -m tools.fuzz " + " ".join(sys.argv[1:])))
    print(table(results))
    findings = [r for r in results if bad(r)]
    print(f"{len(results)} cases in {summary['seconds']:.0f} s; {len(findings)} finding(s)")
    return 1 if findings else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.fuzz", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="action", required=True)
    make = sub.add_parser("seeds", help="make the seed folder (tiny exports and packages, photos, configs)")
    make.add_argument("dest", type=Path)
    go = sub.add_parser("run", help="run fuzz cases")
    go.add_argument("--seeds", type=Path, required=True)
    go.add_argument("--work", type=Path, required=True, help="the cases' folders (findings are kept there)")
    go.add_argument("--seed", type=int, default=0)
    go.add_argument("--cases", type=int, default=1000)
    go.add_argument("--first", type=int, default=0, help="the first case number (default 0)")
    go.add_argument("--jobs", type=int, default=1, help="cases run at once (default 1)")
    go.add_argument("--only", type=int, nargs="+", help="run only these case numbers")
    go.add_argument("--budget-s", type=float, help="stop starting cases after this many seconds")
    go.add_argument("--timeout", type=float, default=60.0, help="seconds per case (default 60)")
    go.add_argument("--memory-mib", type=int, default=4096, help="peak resident memory per case (default 4096)")
    go.add_argument("--command", action="append", help="only this command (its label; repeatable)")
    go.add_argument("--json", type=Path, help="every case's result")
    go.add_argument("--markdown", type=Path, help="the run and its table (bench/results/fuzz.md)")
    args = parser.parse_args(argv)
    if args.action == "seeds":
        fuzz_seeds.make(args.dest)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
