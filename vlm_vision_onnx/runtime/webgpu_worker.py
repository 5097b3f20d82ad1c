"""Run one ONNX model on ONNX Runtime's WebGPU execution provider: the worker of `python -m runtime webgpu-check`.

Standalone on purpose (numpy and onnxruntime only, no project import): it runs with the Python of the WebGPU
install's own venv (`tools/webgpu-install.sh`: the PyPI package onnxruntime-webgpu, which must never replace the
project's onnxruntime), under that install's env.sh (the Vulkan software driver).

    python webgpu_worker.py MODEL CASES OUT [WARM]

CASES/case_K.npz holds the inputs of case K by name; OUT/case_K.npz receives its outputs by name. WARM: how many
extra runs of case 0 to time once its shaders are compiled (default 0). Prints one JSON object:
{"providers": the session's EPs, "on_cpu": [{"op", "domain", "name"}] nodes ONNX Runtime placed on its CPU EP
(ops the WebGPU EP has no kernel for, and the shape computations it keeps on the CPU), "load_s", "cases":
[{"case": file name, "seconds"} or {"case", "error"}], "warm_s": [seconds]}. A session that cannot be created
prints {"error": one line} and exits 1.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

PROVIDERS = ["WebGpuExecutionProvider", "CPUExecutionProvider"]


def _one_line(err: BaseException) -> str:
    text = " ".join(str(err).split())
    return f"{type(err).__name__}: {text}"


def on_cpu(session: ort.InferenceSession) -> list[dict]:
    """The nodes ONNX Runtime assigned to its CPU EP (session.record_ep_graph_assignment_info)."""
    found = []
    for subgraph in session.get_provider_graph_assignment_info():
        if subgraph.ep_name != "CPUExecutionProvider":
            continue
        for node in subgraph.get_nodes():
            found.append({"op": node.op_type, "domain": node.domain, "name": node.name})
    return found


def main(argv: list[str]) -> int:
    model, cases, out = (Path(a) for a in argv[:3])
    warm = int(argv[3]) if len(argv) > 3 else 0
    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.add_session_config_entry("session.record_ep_graph_assignment_info", "1")
    start = time.perf_counter()
    try:
        session = ort.InferenceSession(str(model), options, providers=PROVIDERS)
    except Exception as err:  # noqa: BLE001 - any load failure is the one line the caller reports
        print(json.dumps({"error": _one_line(err)}))
        return 1
    record = {"providers": session.get_providers(), "on_cpu": on_cpu(session),
              "load_s": time.perf_counter() - start, "cases": [], "warm_s": []}
    names = [o.name for o in session.get_outputs()]
    files = sorted(cases.glob("case_*.npz"), key=lambda p: int(p.stem.split("_")[1]))
    out.mkdir(parents=True, exist_ok=True)
    for i, file in enumerate(files):
        with np.load(file) as data:
            feeds = {k: data[k] for k in data.files}
        start = time.perf_counter()
        try:
            outputs = session.run(None, feeds)
        except Exception as err:  # noqa: BLE001 - reported per case, the other cases still run
            record["cases"].append({"case": file.name, "error": _one_line(err)})
            continue
        record["cases"].append({"case": file.name, "seconds": time.perf_counter() - start})
        np.savez(out / file.name, **dict(zip(names, outputs)))
        if i == 0:
            for _ in range(warm):
                start = time.perf_counter()
                session.run(None, feeds)
                record["warm_s"].append(time.perf_counter() - start)
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
