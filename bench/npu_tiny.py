"""`python -m bench.npu_tiny`: the tiny Qwen configs as static models on Qualcomm's HTP simulator, one run.

Per model and size (`--models NAME:WxH ...`, default one per generation): the commands `make export STATIC=WxH`
runs (`builders.vision --static`, `quantize qnn`, `quantize fp16 --outliers off`), then `runtime npu-check` on the
fp32 export (HTP fp16 precision), the fp16 stage and the A16W8 QDQ stage. Writes RESULTS/npu-tiny.json and
npu-tiny.md: min per-token cosine against the CPU EP's fp32 on npu-check's photos, the CPU EP's own QDQ figure
from the qnn stage's report, context-binary size and the simulator's compile time (not a device's speed).
Random weights: the accuracy says little of a trained checkpoint.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from vlm_vision_onnx.core.machine import describe, machine

DEFAULT = ("qwen2-vl-tiny:84x56", "qwen2.5-vl-tiny:196x140", "qwen3-vl-tiny:96x64", "qwen3.5-tiny:96x64")
RESULTS = Path(__file__).parent / "results"


def _run(*args: str) -> None:
    subprocess.run([sys.executable, "-m", *args], check=True, stdout=subprocess.DEVNULL)


def measure(model: str, size: str, work: Path) -> dict:
    root = work / f"{model}-{size}"
    _run("builders.vision", "--model", model, "--static", size, "--out", str(root / "export"))
    _run("quantize", "qnn", str(root / "export"), str(root / "qnn"))
    _run("quantize", "fp16", str(root / "export"), str(root / "fp16"), "--outliers", "off")
    row = {"model": model, "size": size,
           "qnn_cpu_photos": json.loads((root / "qnn" / "report.json").read_text())["min_token_cosine"]}
    for stage in ("export", "fp16", "qnn"):
        report = root / f"npu-{stage}.json"
        _run("vlm_vision_onnx.runtime", "npu-check", str(root / stage), "--json", str(report))
        row[stage] = json.loads(report.read_text())["npu_check"][0]
    return row


def table(rows: list[dict]) -> str:
    lines = [("| model | size | fp32 at HTP fp16 precision | fp16 stage | A16W8 QDQ (HTP) | A16W8 QDQ (CPU EP) | "
              "context binary MiB (fp32 / QDQ) | compile s (fp32 / QDQ) | simulator run s, 4 photos (fp32 / QDQ) |"),
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        mib = [sum(r[s]["context"]["binaries"].values()) / 2**20 for s in ("export", "qnn")]
        lines.append(f"| `{r['model']}` | {r['size']} | {r['export']['min_token_cosine']:.5f} | "
                     f"{r['fp16']['min_token_cosine']:.5f} | {r['qnn']['min_token_cosine']:.5f} | "
                     f"{r['qnn_cpu_photos']:.5f} | {mib[0]:.1f} / {mib[1]:.1f} | "
                     f"{r['export']['context_compile_s']:.1f} / {r['qnn']['context_compile_s']:.1f} | "
                     f"{r['export']['htp_run_s']:.1f} / {r['qnn']['htp_run_s']:.1f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.npu_tiny", description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(DEFAULT), metavar="NAME:WxH")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--report-only", action="store_true", help="rewrite npu-tiny.md from npu-tiny.json")
    args = parser.parse_args(argv)
    if args.report_only:
        found = json.loads((args.results / "npu-tiny.json").read_text())
        started, facts, rows = found["started"], found["machine"], found["rows"]
    else:
        started = time.strftime("%Y-%m-%dT%H:%M:%S")
        with tempfile.TemporaryDirectory(prefix="npu-tiny-") as tmp:
            rows = [measure(*item.split(":"), Path(tmp)) for item in args.models]
        facts = machine()
        (args.results / "npu-tiny.json").write_text(json.dumps({"started": started, "machine": facts, "rows": rows},
                                                                indent=1) + "\n")
    (args.results / "npu-tiny.md").write_text(
        f"# Tiny static models on the HTP simulator\n\n`python -m bench.npu_tiny` ({started}, {describe(facts)}; "
        "onnxruntime-qnn 2.7.0, soc 60, HTP v73). Min per-token cosine against the CPU EP's fp32 on npu-check's 4 "
        "photos; every node ran on the HTP with CPU fallback disabled. Random weights. Compile and run times are "
        "the simulator's on this machine (shared with other work), not a device's.\n\n" + table(rows) + "\n")
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
