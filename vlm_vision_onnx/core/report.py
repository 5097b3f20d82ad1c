"""Stage reports: `report.json` in every stage folder, self-contained (I/O contract, tolerance,
validation layouts, per-case results), so no stage reads a sibling's report."""

from __future__ import annotations

import json
import platform
import resource
import time
from pathlib import Path

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.onnx_io import write_json
from vlm_vision_onnx.core.staging import REPORT


def read_json_object(path: str | Path, what: str, fix: str) -> dict:
    """The JSON object in `path`; UsageError '<what> <path> is not valid JSON (...); <fix>' otherwise."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as err:
        raise UsageError(f"{what} {path} is not valid JSON ({err}); {fix}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{what} {path} is not a JSON object; {fix}")
    return data


def read_beside(model_file: str | Path) -> dict:
    """The report.json beside a model file ({} when there is none); UsageError when it is unreadable."""
    path = Path(model_file).with_name(REPORT)
    return read_json_object(path, "report", "fix it or remove it") if path.exists() else {}


def write(folder: str | Path, report: dict) -> None:
    write_json(Path(folder) / REPORT, report)


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, MiB: Linux's VmHWM (/proc/self/status), else ru_maxrss (KiB).

    Not ru_maxrss where VmHWM exists: Linux carries a parent's peak over fork and exec into the child's ru_maxrss,
    so a benchmark child of a large process reported its parent's peak (a 2B model's run at 1024x1024 read as
    18.5 GB, the comparison's parent holding fifteen sessions); VmHWM is the child's own address space's."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def versions() -> dict[str, str]:
    """Versions of the libraries that made an artifact (torch and transformers only if loaded)."""
    import sys

    import numpy
    import onnx
    import onnxruntime

    found = {"onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__, "numpy": numpy.__version__,
             "python": platform.python_version()}
    for name in ("onnx_ir", "onnxscript", "torch", "transformers"):
        module = sys.modules.get(name)
        if module is not None:
            found[name] = getattr(module, "__version__", "?")
    return found


def footer(timings: dict[str, float]) -> dict:
    """The closing fields of every report: timings, peak RSS, versions, creation time."""
    return {"timings_s": timings, "peak_rss_mib": peak_rss_mib(), "versions": versions(),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
