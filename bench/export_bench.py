"""`python -m bench.export_bench`: export wall time and peak memory of both export paths.

Each path runs in its own fresh process (`python -m builders.vision`), so peak RSS is that export's
alone. Results: bench/results/export.json and export.md. Not a test: numbers depend on the machine.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bench.machine import describe, machine

RESULTS = Path(__file__).resolve().parent / "results"


def run_export(model: str, path: str, out: Path) -> dict:
    """One export in a child process; its report's timings and peak RSS, plus the wall time."""
    cmd = [sys.executable, "-m", "builders.vision", "--model", model, "--out", str(out)]
    if path == "dynamo":
        cmd.append("--dynamo")
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} exited {proc.returncode}: {proc.stderr.strip().splitlines()[-1]}")
    report = json.loads((out / "report.json").read_text())
    return {
        "path": path,
        "export_s": report["timings_s"]["export"],
        "load_s": report["timings_s"]["load"],
        "validate_s": report["timings_s"]["validate"],
        "command_wall_s": round(wall, 1),
        "peak_rss_mib_load_and_export": report["peak_rss_mib"]["load_and_export"],
        "peak_rss_mib_with_validation": report["peak_rss_mib"]["total"],
        "onnx_mib": round(sum(report["files"].values()) / 2**20, 1),
        "validation_passed": report["validation"]["passed"],
        "validation_cases": len(report["validation"]["cases"]),
    }


def markdown(results: dict) -> str:
    rows = [
        "| path | export (s) | peak RSS load+export (MiB) | validation (s, cases) | ONNX (MiB) | passed |",
        "|---|---|---|---|---|---|",
    ]
    for r in results["runs"]:
        rows.append(f"| {r['path']} | {r['export_s']:.1f} | {r['peak_rss_mib_load_and_export']:.0f} | "
                    f"{r['validate_s']:.1f} ({r['validation_cases']}) | {r['onnx_mib']:.0f} | {r['validation_passed']} |")
    return (f"Export of `{results['model']}` (random weights) on {results['machine']}, "
            f"{results['date']}; command `python -m bench.export_bench --model {results['model']}`.\n\n"
            + "\n".join(rows) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-vl-2b")
    parser.add_argument("--work", type=Path, default=Path("build/bench-export"))
    args = parser.parse_args()
    runs = [run_export(args.model, path, args.work / path) for path in ("torchscript", "dynamo")]
    results = {
        "model": args.model,
        "machine": describe(machine()),
        "date": time.strftime("%Y-%m-%d"),
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "export.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "export.md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
