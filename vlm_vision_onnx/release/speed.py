"""`python -m release speed BUILD`: time each model the package would hold, for its model card.

Writes `BUILD/speed/report.json` (stage `speed`): seconds per image of the fp32 and quantized stages
at one smoke size (default 448x448, random pixels laid out as the processor would), one warm-up run
then the median of `reps` runs, at a fixed thread count, with the machine it ran on. Packaging
reads it and keeps a stage's timing only when that stage's report is the one that was timed (its
`created` stamp), so a re-export never shows stale numbers. Timings vary run to run: a package made
with and without a fresh speed report differs, while re-packaging the same build is byte-identical.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from vlm_vision_onnx.core import onnx_io, session
from vlm_vision_onnx.core import report as report_mod
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.machine import describe, machine
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.core.staging import staged_folder
from vlm_vision_onnx.families import family
from vlm_vision_onnx.release import stages
from vlm_vision_onnx.runtime import smoke

STAGE = "speed"


def time_model(model: Path, feeds: dict, threads: int, reps: int) -> list[float]:
    """Seconds of `reps` runs after one warm-up run."""
    sess = session.open_session(model, threads)
    session.run(sess, feeds)
    runs = []
    for _ in range(reps):
        start = time.perf_counter()
        session.run(sess, feeds)
        runs.append(round(time.perf_counter() - start, 4))
    return runs


def smoke_inputs(found: dict[str, stages.Stage], fam_name: str) -> dict[str, dict]:
    """{size: feeds} of the smoke sizes, with the processor settings the package will hold (written by the
    family into a scratch folder)."""
    fam = family(fam_name)
    export = found["export"].report
    metadata = onnx_io.metadata(stages.variants(found)[0].stage.model)
    with tempfile.TemporaryDirectory() as tmp:
        fam.release.write_config(export, metadata, Path(tmp))
        fam.release.write_processor(export, metadata, Path(tmp))
        return dict(smoke.smoke_cases(fam_name, tmp))


def measure(build: str | Path, size: str = "448x448", threads: int = 1, reps: int = 3) -> Path:
    """Time every packaged stage of `build` at `size`; write and return BUILD/speed/report.json."""
    build = Path(build)
    found = stages.read_build(build)
    fam_name = found["export"].report.get("family", "?")
    cases = smoke_inputs(found, fam_name)
    if size not in cases:
        raise UsageError(f"--size {size} is not a smoke size; choose one of {', '.join(cases)}")
    if threads < 1 or reps < 1:
        raise UsageError(f"--threads and --reps must be >= 1, got {threads} and {reps}")
    results = {}
    for variant in stages.variants(found):
        if variant.folder != "onnx":  # an OpenVINO IR: ONNX Runtime cannot open it
            continue
        say(f"time {variant.stage.name} ({variant.name}) at {size}, {threads} thread(s), {reps} runs")
        runs = time_model(variant.stage.model, cases[size], threads, reps)
        results[variant.stage.name] = {"variant": variant.name, "median_s": statistics.median(runs), "runs_s": runs,
                                       "stage_created": variant.stage.report.get("created")}
    report = {"stage": STAGE, "size": size, "threads": threads, "reps": reps,
              "machine": describe(machine()), "results": results, **report_mod.footer({})}
    with staged_folder(build / STAGE, STAGE, inputs=[]) as tmp:
        report_mod.write(tmp, report)
    say("; ".join(f"{r['variant']} {r['median_s']:.3f} s" for r in results.values()))
    return build / STAGE / "report.json"
