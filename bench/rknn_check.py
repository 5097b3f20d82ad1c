"""`RKNN_VENV/bin/python bench/rknn_check.py MODEL.onnx ...`: do static exports convert with Rockchip's RKNN toolkit?

Rockchip's `rknn-toolkit2` 2.5.0 (PyPI) converts ONNX for its NPUs (target rk3588 here) and runs the result in its
x86 simulator. It needs numpy <= 1.26, onnx <= 1.18 and torch <= 2.4, which the project's venv does not take, so
this script runs in a venv of its own and imports nothing of the project (numpy, onnxruntime and rknn only):

    python3 -m venv RKNN_VENV
    RKNN_VENV/bin/pip install rknn-toolkit2==2.5.0     # pulls torch <= 2.4

For each model (a `--static` export: one input, pixel_values): load_onnx, build (fp16, no quantization),
export_rknn, init_runtime (the simulator), then random pixels through it and through ONNX Runtime's CPU EP: max abs
diff and min per-token cosine per output. One line per model; a model the toolkit refuses gets its step and error.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import onnxruntime as ort


def check(model: Path, work: Path, platform: str = "rk3588") -> str:
    from rknn.api import RKNN

    rknn = RKNN(verbose=False)
    rknn.config(target_platform=platform)
    steps = (("load_onnx", lambda: rknn.load_onnx(model=str(model))),
             ("build", lambda: rknn.build(do_quantization=False)),
             ("export_rknn", lambda: rknn.export_rknn(str(work / f"{model.parent.name}.rknn"))),
             ("init_runtime", rknn.init_runtime))
    for name, step in steps:
        try:
            code = step()
        except Exception as err:  # noqa: BLE001 -- the toolkit's refusal is the result
            return f"{model}: REFUSED at {name}: {type(err).__name__}: {str(err).strip().splitlines()[-1][:200]}"
        if code != 0:
            return f"{model}: REFUSED at {name} (return code {code})"
    session = ort.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    feed = session.get_inputs()[0]
    x = np.random.default_rng(0).standard_normal(feed.shape).astype(np.float32)
    reference = session.run(None, {feed.name: x})
    got = rknn.inference(inputs=[x], data_format="nchw")
    parts = []
    for out, want in zip(got, reference):
        out = np.asarray(out, dtype=np.float64).reshape(want.shape)
        cos = (out * want).sum(1) / (np.linalg.norm(out, axis=1) * np.linalg.norm(want, axis=1))
        parts.append(f"max abs {float(np.abs(out - want).max()):.2e}, min per-token cosine {float(cos.min()):.6f}")
    rknn.release()
    return f"{model}: converted for {platform} (fp16) and ran in the simulator: " + "; ".join(parts)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    with tempfile.TemporaryDirectory(prefix="rknn-") as tmp:
        for model in argv:
            print(check(Path(model), Path(tmp)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
