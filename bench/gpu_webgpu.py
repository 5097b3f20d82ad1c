"""`python -m bench.gpu_webgpu`: the fp16 and q4f16 variants on a GPU through ONNX Runtime's WebGPU EP (Vulkan),
against PyTorch bf16 on the same GPU, accuracy against fp32 (issue 33, item 6: the project's first GPU times).

The GPU is the device tool's machine (an NVIDIA H100 or H200), which takes 64 MiB of files per call and fetches
nothing, so the work is split:

`prepare BUILD OUT [--force|--clobber]` (here; OUT written as a stage's folder, core.staging): the build's fp32 (optimized), fp16 and q4f16 files stripped of their weights
(`tools.weightless`: a seed and each weight's statistics; every derived initializer checked bit for bit against
the stage's file), the processor folder the release package will hold, and OUT/prepared.json (model config and
weight seed of the export, for PyTorch's tower).

`run FOLDER OUT [--home DIR]` (on the GPU machine, with onnxruntime-webgpu importable as `onnxruntime`;
bench/gpu_webgpu_device.sh sets it up there):
1. `tools.weightless rebuild`: fp32, fp16 and q4f16 with the reseeded weights (sha256 of every initializer checked);
2. `runtime webgpu-check`'s check on them (as a package: fp32, fp16 floor 0.999, q4f16 floor 0.98): the attention
   canary, then every variant at every validation layout on WebGPU against the CPU EP's fp32, and the nodes left
   on the CPU EP. DIR (default $VLM_WEBGPU_HOME) holds env.sh (Vulkan: the NVIDIA driver's ICD) and
   venv/bin/python, as `--webgpu` wants;
3. the race, one process, interleaved: PyTorch fp32 and bf16 on CUDA (transformers' tower with sdpa attention, the
   export's config, its weights replaced by the rebuilt fp32's, TF32 off) and ONNX Runtime WebGPU fp32, fp16 and
   q4f16, on real photos (scikit-image's astronaut at 448^2 and 1024^2, 8 rocket frames as a 448^2 video) through
   the package's processor; numpy in and numpy out for every path (host-device copies included, as a user calls
   it); a warm-up run each (its outputs give the accuracy, its seconds the first-run cost: shader compilation on
   WebGPU), then REPS rounds. Accuracy: min per-token cosine over every output against ONNX Runtime's CPU EP on
   the rebuilt fp32. Writes OUT/gpu-webgpu.json and .md.

`profile FOLDER OUT [--sizes 448,1024]` (on the GPU machine): the rebuilt fp16 and q4f16 under ONNX Runtime's
profiler at each photo size, the last of three runs summed per (EP, op): OUT/gpu-webgpu-profile.json.

`cpu-accuracy FOLDER OUT` (anywhere): the race's cases on ONNX Runtime's CPU EP, fp16 and q4f16 against fp32:
OUT/gpu-webgpu-cpu-ep.json (what the variants hold without WebGPU).

On the device tool's machine: `bash bench/gpu_webgpu_device.sh WHEELS DEBS run|profile FOLDER OUT` (docs/benchmarks.md,
"GPU: WebGPU against PyTorch").
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from tools import weightless
from vlm_vision_onnx.core import onnx_io, staging
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.parity import min_token_cosine
from vlm_vision_onnx.core.progress import say

TAG = "gpu-webgpu"
#: The `stage` of the folder `prepare` writes (core.staging: what it may replace).
PREPARE_STAGE = "gpu-webgpu-prepare"
VARIANTS = {"fp32": "optimized", "fp16": "fp16", "q4f16": "q4f16"}
#: The floors `runtime webgpu-check` holds each variant to (the fp16 and q4f16 stages' defaults).
FLOORS = {"fp16": 0.999, "q4f16": 0.98}
BASELINE = "PyTorch bf16"
PYTORCH_FP32 = "PyTorch fp32"
SIZES = (448, 1024)
VIDEO = 8
REPS = 10


def prepare(build: Path, out: Path, force=False) -> None:
    """The `prepare` step (module docstring), staged as a stage's folder (core.staging; `force` as there)."""
    from quantize import calibration

    fp32 = build / "optimized" / "model.onnx"
    files = {name: build / stage / "model.onnx" for name, stage in VARIANTS.items()}
    missing = [str(p) for p in files.values() if not p.exists()]
    if missing:
        raise UsageError(f"missing {', '.join(missing)}: run `make export MODEL=... FP16=1` first")
    with staging.staged_folder(out, PREPARE_STAGE, [build], force) as folder:
        weightless.strip_into(fp32, folder, files)
        export = calibration.export_report(fp32)
        calibration.processor_folder(export, onnx_io.metadata(fp32), folder / "processor")
        (folder / "prepared.json").write_text(json.dumps({"config": export["model"], "seed": export.get("seed", 0),
                                                          "build": str(build)}, indent=1) + "\n")
        weightless.write_report(folder, PREPARE_STAGE, build=str(build))
    say(f"prepared {out}", TAG)


def torch_tower(config: str, seed: int, fp32: Path):
    """transformers' tower of `config` (builders.qwen_vl.model.build_random: its constant biases and norms) with
    every weight of the ONNX fp32 file loaded into it: ONNX `visual.K` is torch `K`, `visual.K.matmul` its
    transpose (reshaped to K's shape: the patch embedding as a MatMul). Every weight of at least
    weightless.MIN_ELEMENTS values must land (ValueError otherwise)."""
    import onnx
    import torch
    from onnx import numpy_helper

    from builders.config import load_config
    from builders.qwen_vl.model import build_random

    model = build_random(load_config(config), seed)
    inits = {i.name: i for i in onnx.load(str(fp32)).graph.initializer}
    state, used = model.state_dict(), set()
    for key, tensor in state.items():
        for name, transposed in ((f"visual.{key}", False), (key, False), (f"visual.{key}.matmul", True),
                                 (f"{key}.matmul", True)):
            if name in inits:
                value = numpy_helper.to_array(inits[name])
                value = value.T if transposed else value
                if value.size == tensor.numel():
                    tensor.copy_(torch.from_numpy(np.array(value)).reshape(tensor.shape))
                    used.add(name)
                    break
    big = {n for n, i in inits.items() if i.data_type == onnx.TensorProto.FLOAT
           and int(np.prod(i.dims, dtype=np.int64)) >= weightless.MIN_ELEMENTS}
    if big - used:
        raise ValueError(f"ONNX weights with no torch parameter: {sorted(big - used)[:5]}")
    model.config._attn_implementation = "sdpa"
    return model.eval()


class TorchPath:
    """A tower on `device` in `dtype`: numpy feeds in, float32 numpy outputs (merged features, then DeepStack's) out
    (pixels and grid moved to the device as a user moves the processor's output)."""

    def __init__(self, model, dtype, device: str):
        import torch

        self.torch, self.dtype, self.device = torch, dtype, device
        self.model = model.to(device=device, dtype=dtype)

    def run(self, feeds: dict) -> list[np.ndarray]:
        torch = self.torch
        with torch.inference_mode():
            out = self.model(torch.from_numpy(feeds["pixel_values"]).to(self.device, self.dtype),
                             grid_thw=torch.from_numpy(feeds["grid_thw"]).to(self.device), return_dict=True)
            return [t.float().cpu().numpy() for t in (out.pooler_output, *getattr(out, "deepstack_features", ()))]


class OrtPath:
    """An ONNX Runtime session on `providers`: numpy feeds in, numpy outputs out."""

    def __init__(self, path: Path, providers: list[str]):
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3
        self.session = ort.InferenceSession(str(path), options, providers=providers)
        self.providers = self.session.get_providers()

    def run(self, feeds: dict) -> list[np.ndarray]:
        return self.session.run(None, feeds)


def gpu_facts() -> dict:
    """The GPU and driver (nvidia-smi), torch and onnxruntime versions."""
    import onnxruntime
    import torch

    try:
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        gpu = "no GPU (nvidia-smi absent)"
    return {"gpu": gpu, "torch": torch.__version__, "cuda": torch.version.cuda,
            "onnxruntime": onnxruntime.__version__, "python": platform.python_version(), "cpu_cores": os.cpu_count(),
            "vulkan_driver_files": os.environ.get("VK_DRIVER_FILES") or os.environ.get("VK_ICD_FILENAMES")}


def race(models: dict[str, Path], prepared: dict, case_feeds: dict, reps: int, device: str = "cuda",
         extra: dict[str, Path] | None = None) -> dict:
    """The race of the module docstring's step 3: {case: {label: {...}}, ...}. `extra`: more WebGPU paths by label
    (another build's variants, `--baseline`), in the same rounds."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    say("CPU EP fp32 reference", TAG)
    cpu = OrtPath(models["fp32"], ["CPUExecutionProvider"])
    reference = {case: cpu.run(feeds) for case, feeds in case_feeds.items()}
    del cpu
    say(f"PyTorch towers on {device}", TAG)
    tower = torch_tower(prepared["config"], prepared["seed"], models["fp32"])
    paths = {BASELINE: TorchPath(copy.deepcopy(tower), torch.bfloat16, device),
             PYTORCH_FP32: TorchPath(tower, torch.float32, device)}
    load, failed = {}, {}
    webgpu_paths = {f"ORT WebGPU {name}": models[name] for name in ("fp32", "fp16", "q4f16")} | (extra or {})
    for label, file in webgpu_paths.items():
        start = time.perf_counter()
        try:
            path = OrtPath(file, ["WebGpuExecutionProvider", "CPUExecutionProvider"])
        except Exception as err:  # noqa: BLE001 - a path that cannot open is reported, the others still race
            failed[label] = " ".join(f"{type(err).__name__}: {err}".split())
            say(f"{label}: no session: {failed[label]}", TAG)
            continue
        load[label] = round(time.perf_counter() - start, 2)
        paths[label] = path
        say(f"{label}: session in {load[label]} s ({path.providers})", TAG)
    result = {"load_s": load, "failed": failed, "cases": {}}
    for case, feeds in case_feeds.items():
        first, outputs = {}, {}
        for label, path in paths.items():
            start = time.perf_counter()
            outputs[label] = path.run(feeds)
            first[label] = round(time.perf_counter() - start, 4)
        times = {label: [] for label in paths}
        for _ in range(reps):
            for label, path in paths.items():
                start = time.perf_counter()
                path.run(feeds)
                times[label].append(time.perf_counter() - start)
        base = statistics.median(times[BASELINE])
        result["cases"][case] = {label: {
            "median_s": round(statistics.median(t), 5), "times_s": [round(x, 5) for x in t], "first_s": first[label],
            "vs_pytorch_bf16": round(base / statistics.median(t), 3),
            "min_token_cosine": min(min_token_cosine(o, r) for o, r in zip(outputs[label], reference[case])),
            "grid_thw": feeds["grid_thw"].tolist()} for label, t in times.items()}
        result["cases"][case][BASELINE]["min_token_cosine_vs_pytorch_fp32"] = min(
            min_token_cosine(o, r) for o, r in zip(outputs[BASELINE], outputs[PYTORCH_FP32]))
        say(f"{case}: " + ", ".join(f"{k} {v['median_s'] * 1e3:.1f} ms" for k, v in result["cases"][case].items()),
            TAG)
    if device == "cuda":
        result["peak_cuda_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return result


def markdown(report: dict) -> str:
    """The tables of docs/benchmarks.md's GPU section."""
    facts = report["machine"]
    lines = [(f"{report['prepared']['config']} vision encoder on **{facts['gpu']}** ({facts['cpu_cores']} CPU cores), "
             f"torch {facts['torch']} (CUDA {facts['cuda']}), onnxruntime-webgpu {facts['onnxruntime']} on Vulkan "
             f"(driver {facts['vulkan_driver_files']}). Command: `python -m bench.gpu_webgpu run` "
             "(bench/gpu_webgpu.py). Weights: the export's random-weight files reseeded (`tools.weightless`: same "
             "graphs, same quantization and float16 plan, same weight statistics; every initializer's sha256 "
             "checked). Inputs: real photos through the package's processor. Times: median of "
             f"{report['reps']} interleaved rounds, numpy in and out (host-device copies included); first: the "
             "warm-up run (WebGPU compiles its shaders then). Accuracy: min per-token cosine over every output "
             "against ONNX Runtime's CPU EP on the fp32 file."), ""]
    if report.get("baseline"):
        build = report["baseline"].get("build")
        lines += [f"(baseline): the fp16 and q4f16 of {build}, prepared the same way, raced in the same rounds.", ""]
    race = report.get("race", {})
    for case, paths in race.get("cases", {}).items():
        lines += [f"**{case}** (grid_thw {next(iter(paths.values()))['grid_thw']})", "",
                  "| path | median (ms) | vs PyTorch bf16 | first run (ms) | min per-token cosine vs fp32 |",
                  "|---|---:|---:|---:|---:|"]
        for label, r in paths.items():
            # a baseline build's weights may be reseeded under other names (a Conv patch embedding before it was a
            # MatMul): its cosine against this build's fp32 is then no accuracy figure
            cosine = "(other weights)" if label.endswith("(baseline)") else f"{r['min_token_cosine']:.5f}"
            lines.append(f"| {label} | {r['median_s'] * 1e3:.1f} | {r['vs_pytorch_bf16']:.2f}x | "
                         f"{r['first_s'] * 1e3:.0f} | {cosine} |")
        bf16 = paths.get(BASELINE, {}).get("min_token_cosine_vs_pytorch_fp32")
        if bf16 is not None:
            lines.append(f"\nPyTorch bf16 against PyTorch fp32 (same weights, same GPU): {bf16:.5f}.")
        lines.append("")
    check = report.get("webgpu_check")
    if check:
        lines += [("`runtime webgpu-check` on the rebuilt variants (every validation layout, random inputs, seed 0; "
                  "against the CPU EP's fp32):"), "",
                  ("| variant | layouts | min per-token cosine | floor | finite | on the CPU EP besides shapes | "
                  "seconds, all layouts |"), "|---|---:|---:|---:|:---:|---|---:|"]
        for v in check["variants"]:
            if "error" in v:
                lines.append(f"| {v['variant']} | – | FAILED: {v['error']} | {v['floor']} | – | – | – |")
                continue
            cpu = ", ".join(f"{op} x{n}" for op, n in v["on_cpu"].items() if op.startswith("com.microsoft")
                            or op in ("MatMul", "MatMulInteger", "Conv", "Softmax")) or "–"
            lines.append(f"| {v['variant']} | {len(v['cases'])} | {v['min_token_cosine']:.5f} | {v['floor']} | "
                         f"{'yes' if v['finite'] else 'NO'} | {cpu} | {v['seconds']:.1f} |")
        canary = check.get("attention_canary", {})
        lines += ["", "Attention canary (MultiHeadAttention 16 x 64 against the CPU EP): " + "; ".join(
            f"{d} {'right' if c.get('ok') else 'WRONG'} (max abs diff "
            f"{max((x for x in c.get('max_abs', {}).values() if isinstance(x, float)), default=float('nan')):.2g})"
            for d, c in canary.items()), ""]
    return "\n".join(lines) + "\n"


def profile(model: Path, feeds: dict, runs: int = 3) -> dict:
    """ONNX Runtime's profiler on WebGPU: `runs` runs of `feeds`, the last one summed per (EP, op) on the host's
    clock (a WebGPU kernel's time is its dispatch; the GPU's work shows up where the host waits for it: the copies
    to the CPU EP). {run_ms, by_op: [{provider, op, count, ms}], largest first}."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    options.enable_profiling = True
    options.profile_file_prefix = str(model.parent / "profile")
    session = ort.InferenceSession(str(model), options, providers=["WebGpuExecutionProvider", "CPUExecutionProvider"])
    for _ in range(runs):
        session.run(None, feeds)
    events = json.loads(Path(session.end_profiling()).read_text())
    last = [e for e in events if e.get("name") == "model_run"][-1]
    begin, end = last["ts"], last["ts"] + last["dur"]
    totals: dict[tuple, list] = {}
    for e in events:
        if e.get("cat") != "Node" or not begin <= e["ts"] <= end or not e["name"].endswith("_kernel_time"):
            continue
        key = (e.get("args", {}).get("provider", "?"), e.get("args", {}).get("op_name", "?"))
        totals.setdefault(key, [0, 0.0])
        totals[key][0] += 1
        totals[key][1] += e["dur"] / 1e3
    by_op = [{"provider": p, "op": o, "count": c, "ms": round(ms, 2)} for (p, o), (c, ms) in
             sorted(totals.items(), key=lambda item: -item[1][1])]
    return {"run_ms": round(last["dur"] / 1e3, 2), "by_op": by_op}


def run_profile(folder: Path, out: Path, sizes: list[int], work: Path) -> int:
    """`profile`: the rebuilt fp16 and q4f16 (in `work`) profiled at each photo size (ONNX Runtime's profiler)."""
    from bench.cpu_race import cases

    models = weightless.rebuild(folder, work / "models", ["fp16", "q4f16"])
    feeds = cases(models["fp16"], sizes, 0, processor=folder / "processor")
    report = {"machine": gpu_facts(), "profiles": {}}
    for name, model in models.items():
        for case, feed in feeds.items():
            report["profiles"][f"{name} {case}"] = result = profile(model, feed)
            say(f"{name} {case}: run {result['run_ms']} ms; " + ", ".join(
                f"{r['provider'].replace('ExecutionProvider', '')} {r['op']} x{r['count']} {r['ms']} ms"
                for r in result["by_op"][:8]), TAG)
    (out / "gpu-webgpu-profile.json").write_text(json.dumps(report, indent=1) + "\n")
    return 0


def run_cpu_accuracy(folder: Path, out: Path, sizes: list[int], video: int, work: Path) -> int:
    """`cpu-accuracy`: the race's cases on ONNX Runtime's CPU EP (this machine's), each rebuilt variant (in `work`)
    against the rebuilt fp32: what the variants hold without WebGPU. OUT/gpu-webgpu-cpu-ep.json."""
    from bench.cpu_race import cases

    models = weightless.rebuild(folder, work / "models")
    feeds = cases(models["fp32"], sizes, video, processor=folder / "processor")
    fp32 = OrtPath(models["fp32"], ["CPUExecutionProvider"])
    reference = {case: fp32.run(feed) for case, feed in feeds.items()}
    del fp32
    result = {}
    for name in ("fp16", "q4f16"):
        session = OrtPath(models[name], ["CPUExecutionProvider"])
        result[name] = {case: min(min_token_cosine(o, r) for o, r in zip(session.run(feed), reference[case]))
                        for case, feed in feeds.items()}
        say(f"{name} on the CPU EP: " + ", ".join(f"{c} {v:.5f}" for c, v in result[name].items()), TAG)
    import onnxruntime

    (out / "gpu-webgpu-cpu-ep.json").write_text(json.dumps(
        {"onnxruntime": onnxruntime.__version__, "min_token_cosine_vs_fp32": result}, indent=1) + "\n")
    return 0


def run(folder: Path, out: Path, home: Path | None, reps: int, sizes: list[int], video: int, device: str,
        work: Path, baseline: Path | None = None) -> int:
    """The `run` step (module docstring); exit 0 when the check held, 1 otherwise. `baseline`: another prepared
    folder (the same model built before a change) whose fp16 and q4f16 race beside these, labelled "(baseline)".
    `work`: where the rebuilt models go (gigabytes at 2B dims)."""
    from bench.cpu_race import cases
    from vlm_vision_onnx.runtime import webgpu

    models_dir = work / "models"
    prepared = json.loads((folder / "prepared.json").read_text())
    start = time.perf_counter()
    models = weightless.rebuild(folder, models_dir)
    report = {"prepared": prepared, "machine": gpu_facts(), "reps": reps,
              "rebuild_s": round(time.perf_counter() - start, 1)}
    say(f"rebuilt in {report['rebuild_s']} s", TAG)
    manifest = {"name": f"{prepared['config']} (reseeded)", "family": onnx_io.metadata(models["fp32"])["family"],
                "variants": []}
    for name in ("fp32", "fp16", "q4f16"):
        variant = {"name": name, "file": f"{name}/model.onnx"}
        if name in FLOORS:
            variant["quantization"] = {"min_cosine": FLOORS[name]}
        manifest["variants"].append(variant)
    (models_dir / "manifest.json").write_text(json.dumps(manifest, indent=1))
    try:
        say("webgpu-check on the rebuilt variants", TAG)
        report["webgpu_check"] = webgpu.check(models_dir, home, None, timeout=900.0)
    except Exception as err:  # noqa: BLE001 - the race still runs; the failure is in the report
        report["webgpu_check_error"] = f"{type(err).__name__}: {err}"
        say(f"webgpu-check failed: {report['webgpu_check_error']}", TAG)
    (out / "gpu-webgpu.json").write_text(json.dumps(report, indent=1) + "\n")
    feeds = cases(models["fp32"], sizes, video, processor=folder / "processor")
    extra = None
    if baseline is not None:
        built = weightless.rebuild(baseline, work / "baseline", ["fp16", "q4f16"])
        extra = {f"ORT WebGPU {name} (baseline)": file for name, file in built.items()}
        report["baseline"] = json.loads((baseline / "prepared.json").read_text())
    report["race"] = race(models, prepared, feeds, reps, device, extra)
    (out / "gpu-webgpu.json").write_text(json.dumps(report, indent=1) + "\n")
    (out / "gpu-webgpu.md").write_text(markdown(report))
    say(f"wrote {out}/gpu-webgpu.json and .md", TAG)
    return 0 if report.get("webgpu_check", {}).get("ok") else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gpu_webgpu", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("build", type=Path)
    p.add_argument("out", type=Path)
    p.add_argument("--force", action="store_true", help="replace an OUT this tool wrote (any stage's)")
    staging.add_clobber_argument(p)
    r = sub.add_parser("run")
    r.add_argument("folder", type=Path)
    r.add_argument("out", type=Path)
    r.add_argument("--home", type=Path, help="the WebGPU install: env.sh and venv/bin/python (default: "
                   "$VLM_WEBGPU_HOME, else ./.webgpu)")
    r.add_argument("--reps", type=int, default=REPS)
    r.add_argument("--baseline", type=Path, metavar="FOLDER",
                   help="another prepared folder whose fp16 and q4f16 race beside these (the build before a change)")
    r.add_argument("--sizes", default=",".join(map(str, SIZES)), help="photo squares (default %(default)s)")
    r.add_argument("--video", type=int, default=VIDEO, help="frames of the 448^2 video (0: none)")
    r.add_argument("--torch-device", default="cuda", help="PyTorch's device (cpu: a dry run without a GPU)")
    c = sub.add_parser("cpu-accuracy", help="the race's cases on the CPU EP: each variant against fp32")
    c.add_argument("folder", type=Path)
    c.add_argument("out", type=Path)
    c.add_argument("--sizes", default=",".join(map(str, SIZES)))
    c.add_argument("--video", type=int, default=VIDEO)
    f = sub.add_parser("profile", help="ONNX Runtime's profiler on the rebuilt fp16 and q4f16 at each photo size")
    f.add_argument("folder", type=Path)
    f.add_argument("out", type=Path)
    f.add_argument("--sizes", default=",".join(map(str, SIZES)))
    args = parser.parse_args(argv)
    if args.command == "prepare":
        try:
            prepare(args.build, args.out, args.force)
        except UsageError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="gpu-webgpu-") as work:
        if args.command == "profile":
            return run_profile(args.folder, args.out, sizes, Path(work))
        if args.command == "cpu-accuracy":
            return run_cpu_accuracy(args.folder, args.out, sizes, args.video, Path(work))
        return run(args.folder, args.out, args.home, args.reps, sizes, args.video, args.torch_device, Path(work),
                   args.baseline)


if __name__ == "__main__":
    sys.exit(main())
