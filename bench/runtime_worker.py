"""A benchmark worker process: holds sessions of one runtime install and times runs on request (torch-free).

`python -m bench.runtime_worker` reads one JSON command per line on stdin and answers one JSON line on stdout:
  {"open": LABEL, "engine": "onnxruntime"|"openvino"|"reference", "file": PATH, "threads": T,
   "precision": "f32"|"bf16"|null}   (reference: the ONNX reference evaluator, numpy, threads as numpy's BLAS has)
      -> {"ok": true, "version": the runtime's version}
  {"run": LABEL, "feeds": NPZ, "out": NPZ|null} -> {"ok": true, "seconds": wall time of one run}
      (the outputs are written to `out` when given)
  {"close": LABEL} -> {"ok": true}
  {"profile": LABEL, "feeds": NPZ} -> {"ok": true, "ops": [{type, exec, precision, seconds}]}
      (OpenVINO sessions only: one run with its profiler on, the time summed per layer type and kernel; the
      session is closed first, so that its compiled model is not held twice: profile a label last)
  {"rss": true} -> {"ok": true, "peak_rss_mib": this process's peak resident memory}
engine "torch" (bench.cpu_race: PyTorch eager as users run it) takes "file": a config name (configs/NAME.yaml),
"seed": the export's weight seed, "precision": "f32"|"bf16", and runs the family's `pytorch_run` (transformers'
forward, sdpa attention); it is the only engine that imports torch.
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


class _Torch:
    """The eager model of a config at the export's seed as a PyTorch user runs it (the family's `pytorch_run`:
    transformers' forward, sdpa attention) in f32 or bf16, behind `run` / `get_outputs` (the export's outputs)."""

    def __init__(self, config: str, seed: int, precision: str, threads: int | None):
        import torch

        from builders import family as family_builder
        from builders.config import load_config

        if threads:
            torch.set_num_threads(threads)
        cfg = load_config(config)
        family = family_builder.of_config(cfg)
        module, _ = family.build(cfg, None, seed)
        self._run = family.pytorch_run(module, torch.bfloat16 if precision == "bf16" else torch.float32)
        self._names: list[str] = []

    def get_outputs(self):
        """The outputs of the last run (`output_0`, ...: the model's, in the export's order)."""
        from types import SimpleNamespace

        return [SimpleNamespace(name=n) for n in self._names]

    def run(self, names, feeds):
        outputs = self._run(feeds)
        self._names = [f"output_{i}" for i in range(len(outputs))]
        return outputs


def _profile(sessions: dict, label: str, feeds: dict) -> list[dict]:
    """OpenVINO: the session `label` closed, then its file compiled again with PERF_COUNT and run twice; seconds
    per (layer type, kernel, precision) of the second run, largest first."""
    import gc

    import openvino

    from vlm_vision_onnx.core import openvino_session

    sess = sessions.pop(label)
    path, precision, threads = sess.path, sess.precision, getattr(sess, "threads", None)
    del sess
    gc.collect()  # the first compile's memory goes before the second's comes
    config = {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY", "PERF_COUNT": True}
    if threads:
        config["INFERENCE_NUM_THREADS"] = threads
    core = openvino.Core()
    # compiled as the session runs it: each If replaced by the branch these feeds take (core.openvino_branches)
    compiled = openvino_session.branch_compiler(core, path, config, keep=1)(feeds)
    request = compiled.create_infer_request()
    contiguous = {k: np.ascontiguousarray(v) for k, v in feeds.items()}
    return second_run_profile(request, lambda: request.infer(contiguous))


def second_run_profile(request, run) -> list[dict]:
    """`profile_of(request)` after `run()` twice (an infer on `request`): the second run's profile, since the first
    includes its first-run allocations."""
    for _ in range(2):
        run()
    return profile_of(request)


def profile_of(request) -> list[dict]:
    """An OpenVINO infer request's last profile (PERF_COUNT): seconds per (layer type, kernel), largest first."""
    totals: dict[tuple, float] = {}
    for info in request.profiling_info:
        key = (info.node_type, info.exec_type)
        totals[key] = totals.get(key, 0.0) + info.real_time.total_seconds()
    return [{"type": t, "exec": e, "seconds": round(s, 4)} for (t, e), s in
            sorted(totals.items(), key=lambda item: -item[1]) if s > 0]


def _open(command: dict):
    if command["engine"] == "torch":
        import torch

        return _Torch(command["file"], command.get("seed", 0), command.get("precision") or "f32",
                      command.get("threads")), torch.__version__
    if command["engine"] == "reference":
        import onnx

        return _Reference(command["file"]), onnx.__version__
    if command["engine"] == "openvino":
        import openvino

        from vlm_vision_onnx.core.openvino_session import OpenVINOSession

        sess = OpenVINOSession(command["file"], command.get("threads"), command.get("precision") or "f32")
        sess.threads = command.get("threads")
        return sess, openvino.__version__
    import onnxruntime

    from vlm_vision_onnx.core import session

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
            elif "profile" in command:
                with np.load(command["feeds"]) as data:
                    feeds = {k: data[k] for k in data.files}
                answer = {"ok": True, "ops": _profile(sessions, command["profile"], feeds)}
            elif "rss" in command:
                import resource

                answer = {"ok": True, "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
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
