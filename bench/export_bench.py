"""`python -m bench.export_bench`: wall time and peak memory of every stage of `make export`.

Stages, each in its own fresh process so that its peak RSS is its own (`os.wait4` rusage of that child):
  export-torchscript  python -m builders.vision --out WORK/export
  export-dynamo       python -m builders.vision --dynamo --out WORK/export-dynamo
  surgery             python -m surgery stage WORK/export WORK/surgery  (the family's checks, as in `make export`)
  optimize            python -m quantize optimize WORK/surgery WORK/optimized
  int8                python -m quantize int8 WORK/optimized WORK/int8 FLAGS (the family's shipped ones, or --int8-flags)
  int4                python -m quantize int4 WORK/optimized WORK/int4 FLAGS (the family's shipped ones, or --int4-flags)
  ov-int8             python -m quantize ov-int8 WORK/optimized WORK/ov-int8 FLAGS --if-shipped (as `make export`: built
                      for the families that ship it, `Shipping.ov_int8`; its cost against the rest is reported)
Without export-torchscript in --stages, the stages given run again on the folders of an earlier run
(--work) and replace only their own rows of its results. Each peak is also given as a multiple of the
fp32 model's size (model.onnx + model.onnx.data of the export) against the target of at most 4x. Results: RESULTS/export.json and export.md (Qwen3-VL 2B;
another model: export-NAME.json / .md). Not a test:
numbers depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bench import shipped
from vlm_vision_onnx.core.machine import describe, machine

RESULTS = Path(__file__).resolve().parent / "results"
#: The memory target of every stage: peak RSS at most this many times the fp32 model's size.
TARGET_RATIO = 4.0
#: The default flags are those the model's family ships (declared with it, families/shipping.py), read through
#: `bench.shipped.shipping`.
STAGES = ("export-torchscript", "export-dynamo", "surgery", "optimize", "int8", "int4", "ov-int8")
#: The stages of `make export` besides ov-int8 (export-dynamo is `DYNAMO=1`'s instead of export-torchscript).
MAKE_EXPORT_REST = ("export-torchscript", "surgery", "optimize", "int8", "int4")
#: The ov-int8 stage's target (issue 57): its wall time at most this share of the rest of `make export`'s.
OV_INT8_SHARE = 1 / 3
DEFAULT_NAMES = ("qwen3-vl", "qwen3-vl-2b")  # written as export.json / export.md; other models as export-NAME.*
MARKER = ".export-bench"  # marks a work folder this benchmark made (and may therefore empty)


def commands(model_args: list[str], work: Path, int8_flags: str, int4_flags: str,
             ov_int8_flags: str = "") -> dict[str, list[str]]:
    """{stage: argv} of every stage (argv without the interpreter)."""
    return {
        "export-torchscript": ["-m", "builders.vision", *model_args, "--out", str(work / "export")],
        "export-dynamo": ["-m", "builders.vision", *model_args, "--dynamo", "--out", str(work / "export-dynamo")],
        "surgery": ["-m", "surgery", "stage", str(work / "export"), str(work / "surgery")],
        "optimize": ["-m", "quantize", "optimize", str(work / "surgery"), str(work / "optimized")],
        "int8": ["-m", "quantize", "int8", str(work / "optimized"), str(work / "int8"), *shlex.split(int8_flags)],
        "int4": ["-m", "quantize", "int4", str(work / "optimized"), str(work / "int4"), *shlex.split(int4_flags)],
        "ov-int8": ["-m", "quantize", "ov-int8", str(work / "optimized"), str(work / "ov-int8"),
                    *shlex.split(ov_int8_flags), "--if-shipped"],
    }


def run_stage(argv: list[str], log: Path) -> dict:
    """Run `python argv` as a child process (output to `log`); exit code, wall time and the child's peak RSS."""
    start = time.perf_counter()
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, *argv], stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
    return {"exit": proc.returncode, "wall_s": round(time.perf_counter() - start, 1),
            "peak_rss_mib": round(usage.ru_maxrss / 1024, 1)}  # Linux: ru_maxrss in KiB


def folder_mib(folder: Path) -> float:
    """MiB of the model files in a stage folder (model.onnx + model.onnx.data; an OpenVINO IR's model.xml + .bin)."""
    files = [*folder.glob("model.onnx*"), *folder.glob("model.xml"), *folder.glob("model.bin")]
    return round(sum(f.stat().st_size for f in files) / 2**20, 1)


def stage_facts(stage: str, folder: Path) -> dict:
    """What the stage's report says about its own run (timings, validation)."""
    report_file = folder / "report.json"
    if not report_file.exists():
        return {}
    report = json.loads(report_file.read_text())
    facts: dict = {"timings_s": report.get("timings_s")}
    validation = report.get("validation") or {}
    if "passed" in validation:
        facts["validation_passed"] = validation["passed"]
    if "cases" in validation:
        facts["validation_cases"] = len(validation["cases"])
    return facts


def markdown(results: dict) -> str:
    rows = ["| stage | wall (s) | peak RSS (MiB) | × fp32 model | ≤ 4× | model out (MiB) | exit |",
            "|---|---:|---:|---:|:---:|---:|---:|"]
    for r in results["stages"]:
        ratio = r.get("ratio")
        rows.append(f"| {r['stage']} | {r['wall_s']:.0f} | {r['peak_rss_mib']:.0f} | "
                    f"{ratio:.2f} | {'yes' if r['meets_target'] else '**no**'} | {r.get('model_mib', '')} | "
                    f"{r['exit']} |" if ratio is not None else
                    f"| {r['stage']} | {r['wall_s']:.0f} | {r['peak_rss_mib']:.0f} | – | – | – | {r['exit']} |")
    return (f"Stages of `make export` for `{results['model']}` (random weights) on {results['machine']}, "
            f"{results['date']}; fp32 model {results['fp32_mib']:.0f} MiB; target: peak RSS ≤ "
            f"{TARGET_RATIO:g}× the fp32 model. Command `{results['command']}`. Each stage runs in its own "
            f"process; peak RSS is that process's maximum resident set (os.wait4 rusage). "
            f"{results['note']}\n\n" + "\n".join(rows) + "\n" + ov_int8_share(results["stages"]))


def ov_int8_share(records: list[dict]) -> str:
    """A line: the ov-int8 stage's wall time against the rest of `make export` (MAKE_EXPORT_REST) and the target;
    "" unless all of them ran here."""
    wall = {r["stage"]: r["wall_s"] for r in records if r["exit"] == 0}
    if "ov-int8" not in wall or not set(MAKE_EXPORT_REST) <= set(wall):
        return ""
    rest = sum(wall[s] for s in MAKE_EXPORT_REST)
    share = wall["ov-int8"] / rest
    return (f"\nov-int8: {wall['ov-int8']:.0f} s against {rest:.0f} s for the rest of `make export` "
            f"({', '.join(MAKE_EXPORT_REST)}): **{share:.2f}** of it (target ≤ {OV_INT8_SHARE:.2f}: "
            f"{'met' if share <= OV_INT8_SHARE else 'missed'}).\n")


def _without_note(argv: list[str]) -> list[str]:
    """The command's arguments without `--note TEXT` (the note is printed on its own)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--note":
            skip = True
        elif not arg.startswith("--note="):
            out.append(arg)
    return out


def prepare_work(work: Path) -> None:
    """An empty work folder: create it, or empty one this benchmark made before (never another folder)."""
    if work.exists():
        if not (work / MARKER).exists() and any(work.iterdir()):
            raise SystemExit(f"error: --work {work} exists and was not made by bench.export_bench; "
                             "give a new folder")
        shutil.rmtree(work)
    work.mkdir(parents=True)
    (work / MARKER).write_text("made by python -m bench.export_bench\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen3-vl-2b", help="a config name (default qwen3-vl-2b)")
    parser.add_argument("--config", type=Path, help="a config YAML file instead of --model")
    parser.add_argument("--work", type=Path, help="work folder (default build/bench-export/MODEL)")
    parser.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}")
    parser.add_argument("--int8-flags", help="default: the flags the model's family ships")
    parser.add_argument("--int4-flags", help="default: the flags the model's family ships")
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder for export.json / export.md")
    parser.add_argument("--note", default="", help="a sentence for the results (e.g. other jobs running)")
    args = parser.parse_args(argv)
    stages = [s for s in args.stages.split(",") if s]
    unknown = [s for s in stages if s not in STAGES]
    if unknown:
        parser.error(f"unknown stage(s) {', '.join(unknown)}; known: {', '.join(STAGES)}")
    name = args.config.stem if args.config else args.model
    declared = shipped.shipping(None if args.config else args.model, args.config)
    args.int8_flags = shlex.join(declared.stage_flags("int8")) if args.int8_flags is None else args.int8_flags
    args.int4_flags = shlex.join(declared.stage_flags("int4")) if args.int4_flags is None else args.int4_flags
    ov_int8_flags = shlex.join(declared.stage_flags("ov-int8"))
    work = args.work or Path("build/bench-export") / name
    stem = "export" if name in DEFAULT_NAMES else f"export-{name}"  # other models do not replace the 2B table
    earlier: dict = {}
    if "export-torchscript" in stages:
        prepare_work(work)
    else:  # later stages again (e.g. other INT8 flags) on the folders of an earlier run: its other rows stay
        if not (work / MARKER).exists() or not (args.results / f"{stem}.json").exists():
            parser.error(f"without export-torchscript, --work {work} must hold an earlier run of this benchmark "
                         f"and {args.results / (stem + '.json')} its results")
        earlier = json.loads((args.results / f"{stem}.json").read_text())
    model_args = ["--config", str(args.config)] if args.config else ["--model", args.model]
    argvs = commands(model_args, work, args.int8_flags, args.int4_flags, ov_int8_flags)
    folders = {"export-torchscript": "export", "export-dynamo": "export-dynamo", "surgery": "surgery",
               "optimize": "optimized", "int8": "int8", "int4": "int4", "ov-int8": "ov-int8"}
    records, fp32_mib = [], earlier.get("fp32_mib") or None
    for stage in stages:
        print(f"[export-bench] {stage}: python {' '.join(argvs[stage])}", flush=True)
        record = {"stage": stage, "command": "python " + " ".join(argvs[stage]),
                  **run_stage(argvs[stage], work / f"{stage}.log")}
        folder = work / folders[stage]
        if record["exit"] == 0:
            record["model_mib"] = folder_mib(folder)
            record.update(stage_facts(stage, folder))
            if stage.startswith("export") and fp32_mib is None:
                fp32_mib = record["model_mib"]
        records.append(record)
        print(f"[export-bench] {stage}: exit {record['exit']}, {record['wall_s']:.0f} s, peak RSS "
              f"{record['peak_rss_mib']:.0f} MiB (log {work / (stage + '.log')})", flush=True)
        if record["exit"] != 0:
            break
    if earlier:
        rerun = {r["stage"] for r in records}
        records = [r for r in earlier["stages"] if r["stage"] not in rerun] + records
        records.sort(key=lambda r: STAGES.index(r["stage"]) if r["stage"] in STAGES else len(STAGES))
    for record in records:
        record["ratio"] = round(record["peak_rss_mib"] / fp32_mib, 2) if fp32_mib else None
        record["meets_target"] = record["ratio"] is not None and record["ratio"] <= TARGET_RATIO
    results = {
        "model": name,
        "machine": describe(machine()),
        "date": time.strftime("%Y-%m-%d"),
        "command": (f"{earlier['command']}`, then `" if earlier else "") + "python -m bench.export_bench "
                   + shlex.join(_without_note(argv if argv is not None else sys.argv[1:])),
        "note": " ".join(filter(None, [earlier.get("note"), args.note])),
        "fp32_mib": fp32_mib or 0.0,
        "target_ratio": TARGET_RATIO,
        "stages": records,
    }
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"{stem}.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.results / f"{stem}.md").write_text(markdown(results))
    print(markdown(results))
    return 0 if all(r["exit"] == 0 for r in records) and set(stages) <= {r["stage"] for r in records} else 1


if __name__ == "__main__":
    sys.exit(main())
