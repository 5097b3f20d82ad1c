"""A benchmark worker process: holds sessions of one runtime install and times runs on request (torch-free).

`python -m bench.runtime_worker` reads one JSON command per line on stdin and answers one JSON line on stdout:
  {"open": LABEL, "engine": "onnxruntime"|"openvino"|"reference", "file": PATH, "threads": T,
   "precision": "f32"|"bf16"|null}   (reference: the ONNX reference evaluator, numpy, threads as numpy's BLAS has)
      -> {"ok": true, "version": the runtime's version}
  {"run": LABEL, "feeds": NPZ, "out": NPZ|null} -> {"ok": true, "seconds": wall time of one run}
      (the outputs are written to `out` when given)
  {"close": LABEL} -> {"ok": true}
An error answers {"ok": false, "error": one line}. `bench.runtimes` runs one worker per runtime install (ONNX
Runtime of the venv, another version from a folder on PYTHONPATH) and interleaves runs across them, so that
versions that cannot share a process are still timed in one run.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np


class _Reference:
    """onnx.reference.ReferenceEvaluator behind `run` / `get_outputs` (the file's outputs in order)."""

    def __init__(self, path: str):
        import onnx
        from onnx.reference import ReferenceEvaluator

        proto = onnx.load(path)
        self.names = [o.name for o in proto.graph.output]
        self.evaluator = ReferenceEvaluator(proto)

    def get_outputs(self):
        from types import SimpleNamespace

        return [SimpleNamespace(name=n) for n in self.names]

    def run(self, names, feeds):
        return self.evaluator.run(names, feeds)


def _open(command: dict):
    if command["engine"] == "reference":
        import onnx

        return _Reference(command["file"]), onnx.__version__
    if command["engine"] == "openvino":
        import openvino

        from core.openvino_session import OpenVINOSession

        return OpenVINOSession(command["file"], command.get("threads"), command.get("precision") or "f32"), \
            openvino.__version__
    import onnxruntime

    from core import session

    return session.open_session(command["file"], command.get("threads")), onnxruntime.__version__


def main() -> int:
    sessions: dict = {}
    feeds_cache: dict = {}
    for line in sys.stdin:
        command = json.loads(line)
        try:
            if "open" in command:
                sessions[command["open"]], version = _open(command)
                answer = {"ok": True, "version": version}
            elif "run" in command:
                sess = sessions[command["run"]]
                if command["feeds"] not in feeds_cache:
                    with np.load(command["feeds"]) as data:
                        feeds_cache[command["feeds"]] = {k: data[k] for k in data.files}
                feeds = feeds_cache[command["feeds"]]
                start = time.perf_counter()
                outputs = sess.run(None, feeds)
                seconds = time.perf_counter() - start
                if command.get("out"):
                    names = [o.name for o in sess.get_outputs()]
                    np.savez(command["out"], **dict(zip(names, outputs)))
                answer = {"ok": True, "seconds": seconds}
            elif "close" in command:
                sessions.pop(command["close"], None)
                answer = {"ok": True}
            else:
                answer = {"ok": False, "error": f"unknown command {sorted(command)}"}
        except Exception as err:  # noqa: BLE001 -- reported to the driver as one line
            answer = {"ok": False, "error": f"{type(err).__name__}: {' '.join(str(err).split())[:300]}"}
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
