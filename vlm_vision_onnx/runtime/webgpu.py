"""`python -m runtime webgpu-check PACKAGE`: every variant of a release package on ONNX Runtime's WebGPU execution
provider, at every validation layout, against the CPU EP's fp32 (docs/webgpu.md).

The WebGPU side runs in the install that `tools/webgpu-install.sh DIR` (`make webgpu`) writes: the PyPI package
onnxruntime-webgpu in DIR/venv (never the project's onnxruntime) and, where the machine has no GPU, Mesa's lavapipe
(Vulkan on the CPU) selected by DIR/env.sh. Each variant runs in that venv through `runtime/webgpu_worker.py`
(one process per variant: one shader cache, one adapter); the inputs are the family's validation layouts of the
package's model (`Family.default_layouts`, random inputs under seed 0: mixed-size packs and videos included), the
reference the package's fp32 variant on this project's ONNX Runtime CPU EP.

Per variant: every output finite at every layout, and min per-token cosine against the CPU fp32 reference at or
above the variant's floor (`floor`): the floor its stage held it to (fp16 0.999, q4f16 0.98) or the accuracy its
manifest states on the CPU EP rounded down to three decimals, whichever is higher; fp32 FP32_FLOOR. The nodes ONNX
Runtime placed on its CPU EP instead of WebGPU are listed per variant (fallback), with the seconds per layout on
the adapter (a software adapter's seconds say nothing about a GPU). Exit 0 when every variant holds, 1 otherwise
(CheckFailed), 2 on bad input or a missing install (one line).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from vlm_vision_onnx.core import onnx_io, parity, session
from vlm_vision_onnx.core.errors import CheckFailed, UsageError
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.core.staging import add_clobber_argument, check_result_file, staged_file
from vlm_vision_onnx.families import family
from vlm_vision_onnx.runtime import unpack

TAG = "webgpu-check"
#: The folder of the WebGPU install when neither --webgpu nor this environment variable names one: `.webgpu` in
#: the current directory (where `make webgpu` puts it).
HOME_ENV = "VLM_WEBGPU_HOME"
DEFAULT_HOME = Path(".webgpu")
INSTALL_HINT = "run `make webgpu` (tools/webgpu-install.sh DIR), or name an install with --webgpu DIR"
#: fp32 on WebGPU against fp32 on the CPU EP: only the two EPs' float rounding differs.
FP32_FLOOR = 0.9999
WORKER = Path(__file__).resolve().parent / "webgpu_worker.py"
#: Extra runs of the first layout, timed once its shaders are compiled.
WARM_RUNS = 2
#: The attention canary: one com.microsoft.MultiHeadAttention at Qwen3-VL-2B's heads (16 x 64), the op every Qwen
#: export's segment attention runs, on standard-normal q/k/v (scores of std 1 after the 1/sqrt(64) scale: attention
#: far from uniform) at these lengths, float32 and float16, on WebGPU against the CPU EP. Why: a random-weight model attends almost uniformly, so a
#: wrong attention kernel barely moves its outputs (measured: the tiny Qwen3-VL fp32 package at cosine 0.9999999
#: through the kernel the canary shows 0.43 off); trained weights attend sharply and would not hide it.
CANARY_HEADS, CANARY_HEAD_DIM = 16, 64
CANARY_LENGTHS = (16, 64, 256, 784)
#: Max abs difference to the CPU EP a right kernel stays within (float16: its rounding of the output; measured
#: right kernels on lavapipe: 1.1e-6 float32, 4.3e-3 float16; the wrong one: 0.13-0.88, docs/webgpu.md).
CANARY_TOLERANCE = {"float32": 1e-4, "float16": 1e-2}


def webgpu_home(given: str | Path | None = None) -> Path:
    """The WebGPU install (env.sh + venv/bin/python): `given`, else $VLM_WEBGPU_HOME, else ./.webgpu."""
    home = Path(given or os.environ.get(HOME_ENV) or DEFAULT_HOME)
    missing = [p for p in ("env.sh", "venv/bin/python") if not (home / p).exists()]
    if missing:
        raise UsageError(f"no WebGPU install at {home} (it lacks {', '.join(missing)}): {INSTALL_HINT}")
    return home.resolve()


def floor(variant: dict) -> float:
    """The min per-token cosine a variant must reach on WebGPU against the CPU EP's fp32 (module docstring)."""
    if variant["name"] == "fp32":
        return FP32_FLOOR
    held = float((variant.get("quantization") or {}).get("min_cosine") or 0.0)
    stated = (variant.get("accuracy_vs_fp32") or {}).get("min_token_cosine")
    return max(held, math.floor(stated * 1000) / 1000) if stated is not None else held


def cases(manifest: dict, folder: Path) -> list[tuple[str, dict[str, np.ndarray]]]:
    """[(case, feeds)] of the validation layouts of the package's model (random inputs, seed 0)."""
    fam = family(manifest["family"])
    metadata = onnx_io.metadata(folder / manifest["variants"][0]["file"])
    rng = np.random.default_rng(0)
    return [(case, fam.layout_inputs(layout, metadata, rng)) for case, layout in fam.default_layouts(metadata)]


def in_env(home: Path, command: list[str]) -> list[str]:
    """`command` run under the install's env.sh (the software Vulkan driver, its shader cache, the vector width)."""
    return ["bash", "-c", 'source "$1" && shift && exec "$@"', "webgpu-env", str(home / "env.sh"), *command]


def run_worker(home: Path, model: Path, inputs: Path, out: Path, timeout: float) -> dict:
    """The worker's JSON record of `model` at the cases in `inputs` (see runtime/webgpu_worker.py)."""
    command = in_env(home, [str(home / "venv/bin/python"), str(WORKER), str(model), str(inputs), str(out),
                            str(WARM_RUNS)])
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"no result within {timeout:.0f} s (--timeout)"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if lines:
        return json.loads(lines[-1])
    tail = (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    return {"error": f"the worker failed (exit {done.returncode}): {tail}"}


def canary_model(dtype: str):
    """The canary's one-node model: query, key, value [1, S, heads*dim] of `dtype` -> output [1, S, heads*dim]."""
    from onnx import TensorProto, helper

    elem = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16}[dtype]
    width = CANARY_HEADS * CANARY_HEAD_DIM
    node = helper.make_node("MultiHeadAttention", ["query", "key", "value"], ["output"], domain="com.microsoft",
                            num_heads=CANARY_HEADS, scale=CANARY_HEAD_DIM ** -0.5)
    graph = helper.make_graph([node], "attention_canary",
                              [helper.make_tensor_value_info(n, elem, [1, "S", width]) for n in ("query", "key", "value")],
                              [helper.make_tensor_value_info("output", elem, [1, "S", width])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    return model


def attention_canary(home: Path, work: Path, timeout: float, dtypes: tuple[str, ...] = tuple(CANARY_TOLERANCE)) -> dict:
    """{dtype: {ok, max_abs by length[, error]}}: the canary (CANARY_*) on WebGPU against the CPU EP (float32, on
    the same inputs: the float16 ones rounded first)."""
    import onnx
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    width = CANARY_HEADS * CANARY_HEAD_DIM
    cpu = ort.InferenceSession(canary_model("float32").SerializeToString(), providers=["CPUExecutionProvider"])
    result = {}
    for dtype in dtypes:
        tolerance = CANARY_TOLERANCE[dtype]
        folder = work / f"canary-{dtype}"
        (folder / "inputs").mkdir(parents=True)
        model = folder / "model.onnx"
        onnx.save(canary_model(dtype), str(model))
        expected = []
        for i, length in enumerate(CANARY_LENGTHS):
            feeds = {n: rng.standard_normal((1, length, width)).astype(dtype)
                     for n in ("query", "key", "value")}
            np.savez(folder / "inputs" / f"case_{i}.npz", **feeds)
            expected.append(cpu.run(None, {n: x.astype(np.float32) for n, x in feeds.items()})[0])
        record = run_worker(home, model, folder / "inputs", folder / "out", timeout)
        if "error" in record:
            result[dtype] = {"ok": False, "error": record["error"]}
            continue
        diffs = {}
        for length, ref, ran in zip(CANARY_LENGTHS, expected, record["cases"]):
            if "error" in ran:
                diffs[length] = ran["error"]
                continue
            with np.load(folder / "out" / ran["case"]) as data:
                diffs[length] = float(np.abs(data["output"].astype(np.float32) - ref).max())
        ok = len(diffs) == len(CANARY_LENGTHS) and all(isinstance(d, float) and d <= tolerance for d in diffs.values())
        result[dtype] = {"ok": ok, "max_abs": diffs, "tolerance": tolerance,
                         "on_cpu": fallback_summary(record["on_cpu"])}
    return result


def canary_line(canary: dict) -> str:
    parts = []
    for dtype, r in canary.items():
        if "error" in r:
            parts.append(f"{dtype} FAILED: {r['error']}")
            continue
        worst = max((d for d in r["max_abs"].values() if isinstance(d, float)), default=float("nan"))
        verdict = "right" if r["ok"] else f"WRONG (tolerance {r['tolerance']})"
        parts.append(f"{dtype} {verdict}, max abs diff {worst:.2g} at S = {', '.join(map(str, CANARY_LENGTHS))}")
    return "attention canary (MultiHeadAttention 16 x 64 vs CPU EP): " + "; ".join(parts)


def fallback_summary(nodes: list[dict]) -> dict[str, int]:
    """{op (with its domain): count} of the nodes placed on the CPU EP."""
    return dict(Counter(f"{n['domain']}.{n['op']}" if n["domain"] else n["op"] for n in nodes).most_common())


def check_variant(variant: dict, record: dict, names: list[str], reference: list[list[np.ndarray]],
                  labels: list[str], out: Path) -> dict:
    """The variant's result: per case finiteness and min per-token cosine, and whether it holds its floor."""
    result = {"variant": variant["name"], "file": variant["file"], "floor": floor(variant)}
    if "error" in record:
        return {**result, "ok": False, "error": record["error"]}
    result.update(providers=record["providers"], on_cpu=fallback_summary(record["on_cpu"]),
                  on_cpu_nodes=record["on_cpu"], load_s=record["load_s"], warm_s=record["warm_s"])
    per_case, problems = [], []
    for label, ref, ran in zip(labels, reference, record["cases"]):
        if "error" in ran:
            problems.append(f"{label}: {ran['error']}")
            per_case.append({"case": label, "error": ran["error"]})
            continue
        with np.load(out / ran["case"]) as data:
            outputs = [data[n] for n in names]
        compared = {n: parity.compare(o, r) for n, o, r in zip(names, outputs, ref)}
        finite = all("nonfinite" not in c for c in compared.values())
        cosine = min(c.get("min_token_cosine", 1.0) for c in compared.values())
        per_case.append({"case": label, "seconds": ran["seconds"], "finite": finite, "min_token_cosine": cosine,
                         "max_abs": max(c.get("max_abs", 0.0) for c in compared.values())})
        if not finite:
            problems.append(f"{label}: non-finite outputs")
        elif cosine < result["floor"]:
            problems.append(f"{label}: min per-token cosine {cosine:.5f} < {result['floor']}")
    done = [c for c in per_case if "error" not in c]
    result.update(cases=per_case, problems=problems, ok=not problems and len(done) == len(labels),
                  finite=all(c["finite"] for c in done),
                  min_token_cosine=min((c["min_token_cosine"] for c in done), default=None),
                  seconds=sum(c["seconds"] for c in done))
    return result


def check(path: str | Path, home: str | Path | None = None, variants: list[str] | None = None,
          timeout: float = 1800.0, threads: int | None = None) -> dict:
    """Run the package's variants on WebGPU (module docstring); returns the report (`ok` when all hold)."""
    home = webgpu_home(home)
    with unpack.opened(path) as folder:
        manifest = json.loads((folder / "manifest.json").read_text())
        for v in manifest["variants"]:  # every file a manifest names stays inside the package
            unpack.inside(folder, v.get("file"), f"manifest.json's variant {v.get('name')!r}")
        # an OpenVINO IR variant (ov-int8, openvino/*.xml) is not an ONNX file: ONNX Runtime cannot run it
        chosen = [v for v in manifest["variants"] if (not variants or v["name"] in variants)
                  and not v["file"].endswith(".xml")]
        unknown = sorted(set(variants or []) - {v["name"] for v in manifest["variants"]})
        if unknown:
            raise UsageError(f"--variant {', '.join(unknown)}: the package has "
                             f"{', '.join(v['name'] for v in manifest['variants'])}")
        found = cases(manifest, folder)
        labels = [case for case, _ in found]
        fp32 = session.open_session(folder / manifest["variants"][0]["file"], threads)
        names = session.output_names(fp32)
        reference, cpu_s = [], []
        for _, feeds in found:
            start = time.perf_counter()
            reference.append(session.outputs(fp32, feeds))
            cpu_s.append(time.perf_counter() - start)
        del fp32
        report = {"package": manifest["name"], "family": manifest["family"], "webgpu_home": str(home),
                  "cases": labels, "cpu_fp32_seconds": dict(zip(labels, cpu_s)), "variants": []}
        with tempfile.TemporaryDirectory(prefix="webgpu-check-") as tmp:
            inputs = Path(tmp) / "inputs"
            inputs.mkdir()
            for i, (_, feeds) in enumerate(found):
                np.savez(inputs / f"case_{i}.npz", **feeds)
            report["attention_canary"] = attention_canary(home, Path(tmp), timeout)
            say(canary_line(report["attention_canary"]), TAG)
            for variant in chosen:
                out = Path(tmp) / variant["name"]
                say(f"{variant['file']}: {len(found)} layouts on WebGPU ...", TAG)
                record = run_worker(home, folder / variant["file"], inputs, out, timeout)
                result = check_variant(variant, record, names, reference, labels, out)
                report["variants"].append(result)
                say(line(result), TAG)
    report["ok"] = all(v["ok"] for v in report["variants"]) and all(
        c["ok"] for c in report["attention_canary"].values())
    return report


def line(result: dict) -> str:
    """One line per variant: what ran where, how close, how long."""
    if "error" in result:
        return f"{result['file']}: FAILED: {result['error']}"
    cpu = ", ".join(f"{op} x{n}" for op, n in result["on_cpu"].items()) or "none"
    head = (f"{result['file']}: {len(result['cases'])} layouts, min per-token cosine "
            f"{result['min_token_cosine']:.5f} vs CPU fp32 (floor {result['floor']}), "
            f"{'finite' if result['finite'] else 'NON-FINITE'}; on the CPU EP: {cpu}; {result['seconds']:.1f} s")
    return head + ("" if result["ok"] else f"; FAILED: {'; '.join(result['problems'])}")


def add_arguments(parser) -> None:
    parser.add_argument("package", type=Path, help="dist/NAME or dist/NAME.tar.gz")
    parser.add_argument("--webgpu", type=Path, metavar="DIR",
                        help=f"the WebGPU install (default ${HOME_ENV}, else ./.webgpu: `make webgpu`)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME",
                        help="check only this variant (fp32, fp16, int8, q4, q4f16; repeatable)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the whole report (per layout) to FILE")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing --json FILE that is not an earlier webgpu-check report")
    add_clobber_argument(parser)
    parser.add_argument("--timeout", type=float, default=1800.0, metavar="S", help="seconds per variant (default 1800)")
    parser.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads of the CPU reference")


def _earlier_report(path: Path) -> bool:
    """Whether `path` holds a webgpu-check report (a --json FILE it may replace)."""
    try:
        return {"attention_canary", "variants"} <= set(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return False


def run(args) -> int:
    """The `webgpu-check` subcommand."""
    if args.timeout <= 0:
        raise UsageError(f"--timeout must be > 0 seconds, got {args.timeout}")
    if args.json:  # refused before any work: never replaces a file this command did not write
        args.json = check_result_file(args.json, [args.package], args.force, ".json", _earlier_report)
    report = check(args.package, args.webgpu, args.variant, args.timeout, args.threads)
    if args.json:
        with staged_file(args.json) as tmp:
            tmp.write_text(json.dumps(report, indent=1) + "\n")
    failed = [v["file"] for v in report["variants"] if not v["ok"]]
    failed += [f"the {dtype} attention canary" for dtype, c in report["attention_canary"].items() if not c["ok"]]
    if failed:
        raise CheckFailed(f"on WebGPU, {', '.join(failed)} failed (see the lines above)")
    print(f"ok: {report['package']}: {len(report['variants'])} variant(s) on WebGPU at {len(report['cases'])} "
          "layouts, each finite and within its floor")
    return 0
