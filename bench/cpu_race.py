"""`python -m bench.cpu_race --build build/qwen3-vl-2b`: every way to run the encoder on this CPU, against PyTorch.

Paths (each in its own worker process, `bench.runtime_worker`, so that each has its own peak RSS):
  PyTorch fp32 / bf16   transformers' eager tower with sdpa attention, the export's config and weight seed
  ORT fp32 / INT8       ONNX Runtime on the optimized and int8 stages' files
  OV f32 / bf16         OpenVINO on the optimized file at each inference precision (bf16 only where the CPU has it)
  OV INT8               OpenVINO on the ov-int8 stage's file (when BUILD/ov-int8 exists)
Cases: real photos (scikit-image's astronaut) resized to each `--sizes` square through the package's processor,
and `--video` frames (rocket crops panned, resized to 448x448). For every `--threads` count all paths are open at
once and timed interleaved: a warm-up run (whose outputs give the accuracy), then `--reps` rounds over the paths,
case by case. Accuracy: min per-token cosine over every output against PyTorch fp32 on the same feed. FLOP/s from
`bench.flops` (matrix products) against this CPU's peaks (`peaks`: /proc/cpuinfo's clock x cores x FLOP per
cycle of its widest fp32 FMA, AMX-BF16 and AMX-INT8 where present). OpenVINO's per-op profile (PERF_COUNT) of
each OV path at the largest image case of at most 1024^2. The default path is what `runtime embed` runs
(`runtime.path_choice` on the build's stage reports, at each case's image size). `--package DIR` adds the acceptance figure at each of
`--embed-sizes` (alone with `--sizes "" --video 0`): process wall time of `runtime embed` on 4 photos
(no engine or variant option; in each of `--venvs`: the README's `.venv` that `make install` made, torch installed,
and a venv holding `pip install .[runtime]` alone, as users install it: `tools.runtime_venv`, or `--runtime-python`;
an untimed first round fills the page cache; each later run's features compared with that first run's, min per-token cosine, so a
path whose repeated runs disagree shows; and every other path this CPU's class ranks, plus each INT8 variant, named explicitly where
the package ships its variant, `embed_also`) against a PyTorch bf16 process that loads the same weights from a
safetensors file and embeds the same 4 photos. Accuracy there: each runtime command's untimed run against PyTorch
fp32 on the same 4 photos, each alone (`bench.cpu_race_torch reference`), min per-token cosine over every output.
Writes bench/results/cpu-race[-SUFFIX].json and .md.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench import cpu_race_torch, ov_attention_kernels
from bench.flops import encoder_flops
from bench.ov_attention_kernels import attention_model
from bench.runtime_worker import second_run_profile
from bench.runtimes import Worker
from bench.timing import load_average, write_results
from builders.config import load_config
from tools import runtime_venv
from vlm_vision_onnx.core import cpu, onnx_io
from vlm_vision_onnx.core.machine import describe, machine
from vlm_vision_onnx.core.parity import min_token_cosine
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.runtime import embed as runtime_embed
from vlm_vision_onnx.runtime import path_choice

ROOT = Path(__file__).resolve().parents[1]
TAG = "cpu-race"
REFERENCE = "PyTorch fp32"
PHOTO = "astronaut"
EMBED_PHOTOS = ("astronaut", "coffee", "chelsea", "rocket")
#: Explicit paths the process race times beside the default, besides the other ranked ones (`embed_also`): each
#: INT8 variant on its engine, so that a CPU whose ranking leaves one out still shows what it would give.
EMBED_ALSO = (path_choice.Path("onnxruntime", "int8"), path_choice.Path("openvino", "ov-int8", "bf16"))
FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_int8",
         "amx_tile")


def peaks(threads: int) -> dict[str, float | None]:
    """This CPU's peak TFLOP/s at `threads` cores: fp32 (FMA width x 2 units), AMX-BF16, AMX-INT8 (None: absent).
    The clock is /proc/cpuinfo's `cpu MHz` (what the kernel reports, not a measured turbo clock)."""
    mhz = 0.0
    try:
        mhz = float(next(line.split(":")[1] for line in Path("/proc/cpuinfo").read_text().splitlines()
                         if line.startswith("cpu MHz")))
    except (OSError, StopIteration, ValueError):
        pass
    per_cycle = 64 if cpu.has("avx512f") else 32 if cpu.has("fma") else 8
    scale = threads * mhz * 1e6 / 1e12
    return {"clock_mhz": mhz, "fp32": per_cycle * scale,
            "amx_bf16": 1024 * scale if cpu.has("amx_bf16") else None,
            "amx_int8": 2048 * scale if cpu.has("amx_int8") else None}


def paths(build: Path) -> dict[str, dict]:
    """label -> worker `open` command (without threads) for every path this build and machine have."""
    from vlm_vision_onnx.core import openvino_session
    from vlm_vision_onnx.core.engine import default_precision

    export = json.loads((build / "export" / "report.json").read_text())
    found = {REFERENCE: {"engine": "torch", "file": export["model"], "seed": export.get("seed", 0), "precision": "f32"},
             "PyTorch bf16": {"engine": "torch", "file": export["model"], "seed": export.get("seed", 0),
                              "precision": "bf16"},
             "ORT fp32": {"engine": "onnxruntime", "file": str(build / "optimized" / "model.onnx")},
             "ORT INT8": {"engine": "onnxruntime", "file": str(build / "int8" / "model.onnx")}}
    if openvino_session.available():
        found["OV f32"] = {"engine": "openvino", "file": found["ORT fp32"]["file"], "precision": "f32"}
        if openvino_session.bf16_supported():
            found["OV bf16"] = {"engine": "openvino", "file": found["ORT fp32"]["file"], "precision": "bf16"}
        ov_int8 = [p for p in (build / "ov-int8").glob("model.*") if p.suffix in (".xml", ".onnx")] \
            if (build / "ov-int8").is_dir() else []
        if ov_int8:
            found["OV INT8"] = {"engine": "openvino", "file": str(ov_int8[0]), "precision": default_precision()}
    return {label: c for label, c in found.items() if c["engine"] == "torch" or Path(c["file"]).exists()}


def _manifest(build: Path, fam, metadata: dict) -> dict:
    """A manifest of `build` as far as `runtime.path_choice` reads one: fp32, and int8 / ov-int8 where built, with
    their stage reports' accuracy and measured image sizes."""
    from vlm_vision_onnx.runtime import path_choice

    variants = [{"name": "fp32", "file": "onnx/vision_encoder.onnx"}]
    for stage, name in (("int8", "int8"), ("ov-int8", "ov-int8")):
        report = build / stage / "report.json"
        if report.exists():
            data = json.loads(report.read_text())
            validation = data.get("validation", {})
            accuracy = {"min_token_cosine": validation.get("min_token_cosine"),
                        "photos": validation.get("photos") or {},
                        "largest_image_pixels": path_choice.measured_pixels(fam, metadata, validation)}
            variants.append({"name": name, "file": data.get("file", f"onnx/vision_encoder_{name}.onnx"),
                             "quantization": data.get("config", {}), "accuracy_vs_fp32": accuracy})
    return {"variants": variants}


def default_paths(build: Path, case_feeds: dict[str, dict]) -> dict[str, tuple[str, str]]:
    """{case: (label, line)}: what `runtime embed` runs on this machine for a package of `build` at each case's
    largest image (`Family.layout_pixels`), as a race label, and its path line."""
    from vlm_vision_onnx.families import of_model
    from vlm_vision_onnx.runtime import path_choice

    metadata = onnx_io.metadata(build / "optimized" / "model.onnx")
    fam = of_model(metadata, str(build))
    manifest = _manifest(build, fam, metadata)
    found = {}
    for case, feeds in case_feeds.items():
        largest = path_choice.Largest(fam.layout_pixels(fam.case_layout(feeds), metadata))
        choice = path_choice.choose(manifest, largest=largest)
        engine = {"onnxruntime": "ORT", "openvino": "OV"}[choice.path.engine]
        kind = {"fp32": choice.path.precision or "fp32", "int8": "INT8", "ov-int8": "INT8"}.get(choice.variant,
                                                                                             choice.variant)
        found[case] = (f"{engine} {kind}", choice.line())
    return found


def cases(model: Path, sizes: list[int], video: int, processor: Path | None = None,
          photo: str = PHOTO) -> dict[str, dict[str, np.ndarray]]:
    """{case: feeds}: `photo` (scikit-image's) at each size through the processor of `model` (the one its release
    package will hold, or the folder `processor`), then a `video`-frame 448^2 video."""
    from quantize import calibration
    from vlm_vision_onnx.families import of_model

    found = {}
    for size in sizes:
        found[f"{size}x{size}"] = calibration.for_model(model, processor, photos=(photo,), sizes=((size, size),),
                                                        video=False)[0]
    if video:
        rocket = calibration.photo("rocket")
        frames = [(Path(f"frame {k}"), calibration.resized(np.ascontiguousarray(rocket[:, 12 * k: 12 * k + 480]),
                                                           (448, 448))) for k in range(video)]
        metadata = onnx_io.metadata(model)
        with tempfile.TemporaryDirectory() as tmp:
            folder = processor or calibration.processor_folder(calibration.export_report(model), metadata, tmp)
            pack = of_model(metadata, str(model)).processing.embed_pack(folder, [], frames)
        found[f"video {video}x448x448"] = dict(pack.feeds)
    return found


def race(build: Path, case_feeds: dict, threads: int, reps: int, tmp: Path, only: tuple[str, ...] | None = None,
         untimed: tuple[str, ...] = (), profile: bool = True) -> dict:
    """Open every path with `threads` (or those of `only` the build has), time the cases interleaved (`untimed`
    ones run the warm-up alone: their outputs, no time); {case: {label: {...}}, 'rss': ..., 'profile'} (OpenVINO's
    per-op profile and the batched attention's when `profile`)."""
    opened = {label: c for label, c in paths(build).items() if only is None or label in only}
    workers = {}
    for label, command in opened.items():
        say(f"{threads} thread(s): open {label}", TAG)
        worker = Worker()
        start = time.perf_counter()
        try:
            answer = worker.ask(open=label, threads=threads, **command)
        except RuntimeError as err:
            say(f"{label}: {err}: skipped", TAG)
            worker.close()
            continue
        workers[label] = (worker, round(time.perf_counter() - start, 2), answer.get("version"))
    results: dict = {"cases": {}, "load_s": {k: v[1] for k, v in workers.items()},
                     "versions": {k: v[2] for k, v in workers.items()}}
    for case, feeds in case_feeds.items():
        feed_file = tmp / f"{case.replace(' ', '_')}.npz"
        np.savez(feed_file, **feeds)
        outputs, times = {}, {label: [] for label in workers if label not in untimed}
        for label, (worker, _, _) in workers.items():  # warm-up: its outputs give the accuracy
            out = tmp / f"{label.replace(' ', '_')}.npz"
            worker.ask(run=label, feeds=str(feed_file), out=str(out))
            with np.load(out) as data:
                outputs[label] = [data[k] for k in data.files]
        for round_ in range(reps):
            for label, taken in times.items():
                taken.append(workers[label][0].ask(run=label, feeds=str(feed_file))["seconds"])
            say(f"{threads} thread(s), {case}: round {round_ + 1}/{reps}", TAG)
        reference = outputs.get(REFERENCE)
        layout = {"grid_thw": feeds["grid_thw"].tolist()} if "grid_thw" in feeds else \
            {"shapes": {name: list(a.shape) for name, a in feeds.items()}}
        results["cases"][case] = {label: {
            "median_s": round(statistics.median(t), 4), "times_s": [round(x, 4) for x in t],
            "min_token_cosine": (min(min_token_cosine(o, r) for o, r in zip(outputs[label], reference))
                                 if reference is not None and len(outputs[label]) == len(reference) else None),
            **layout} for label, t in times.items()}
    results["peak_rss_mib"] = {label: w.ask(rss=True).get("peak_rss_mib") for label, (w, _, _) in workers.items()}
    image_cases = [c for c in case_feeds if profile and not c.startswith("video") and int(c.split("x")[0]) <= 1024]
    if image_cases:
        biggest = max(image_cases, key=lambda c: int(c.split("x")[0]))
        feed_file = tmp / f"{biggest}.npz"
        results["profile_case"] = biggest
        results["profile"] = {}
        for label in [label for label in workers if not label.startswith("OV")]:  # memory for the profiles' compiles
            workers.pop(label)[0].close()
        for label, (worker, _, _) in workers.items():
            if label.startswith("OV"):
                try:
                    results["profile"][label] = worker.ask(profile=label, feeds=str(feed_file))["ops"][:10]
                except RuntimeError as err:
                    results["profile"][label] = str(err)
        from vlm_vision_onnx.core import openvino_session

        vision = load_config(paths(build)[REFERENCE]["file"]).vision
        results["attention_profile"] = {
            precision: attention_profile(vision, case_feeds[biggest]["grid_thw"].tolist(), precision, threads)
            for precision in (("f32", "bf16") if openvino_session.bf16_supported() else ("f32",))
            if openvino_session.available()}
    for worker, _, _ in workers.values():
        worker.close()
    return results


def attention_profile(vision: dict, grid: list[list[int]], precision: str, threads: int) -> list[dict]:
    """OpenVINO's kernels for the export's batched attention (the segment attention's If branch taken when every
    segment has one size: one com.microsoft MultiHeadAttention on [frames, rows, C]) at one case's frame shape,
    as a model of its own (the whole model's profile sums every block's attention with the rest of its layers of
    that type). Seconds per (layer type, kernel)."""
    heads, width = vision["num_heads"], vision["hidden_size"]
    frames, rows = sum(t for t, _, _ in grid), grid[0][1] * grid[0][2]
    compiled = ov_attention_kernels.compile_cpu(attention_model(frames, rows, heads, width), precision, threads,
                                                {}, profile=True)
    request = compiled.create_infer_request()
    feeds = {n: np.random.default_rng(0).standard_normal((frames, rows, width), dtype=np.float32) for n in "qkv"}
    return second_run_profile(request, lambda: request.infer(feeds))[:6]


def embed_also(manifest: dict, size: int) -> list[tuple[str, ...]]:
    """`runtime embed` options naming each path the process race times beside the default at `size`^2: the other
    paths this CPU's class ranks and EMBED_ALSO, where the package ships the variant; the default itself left out."""
    default = path_choice.choose(manifest, largest=path_choice.Largest.of((size * size,) * len(EMBED_PHOTOS))).path
    shipped = {r.get("name") for r in manifest.get("variants", []) if isinstance(r, dict)}
    ranked = path_choice.RANKING.get(path_choice.cpu_class(), ())
    options = []
    for path in dict.fromkeys((*ranked, *EMBED_ALSO)):
        if path != default and path.variant in shipped:
            options.append(("--engine", path.engine, "--variant", path.variant)
                           + (("--precision", path.precision) if path.precision else ()))
    return options


#: A stage's line on a process's stderr (`core.progress.step`): "[embed] run ... on 4 entries (...): 28.1 s".
STAGE_LINE = re.compile(rf"^\[(?:{runtime_embed.TAG}|{cpu_race_torch.TAG})\] (\S+).*: ([0-9.]+) s$")


def stages(stderr: str) -> dict[str, float]:
    """{stage: seconds} from a `runtime embed` or `bench.cpu_race_torch embed` process's stderr, each stage named by
    the first word of its step (runtime embed: load, preprocess, wait (for the model's session), run; PyTorch:
    import, load, preprocess, forward)."""
    return {m[1]: float(m[2]) for m in map(STAGE_LINE.match, stderr.splitlines()) if m}


#: Where the --package race runs `runtime embed` (`--venvs`): the README's `.venv` (what `make install` made: torch,
#: transformers and onnx installed beside the runtime; `python -m runtime` from the checkout, as the README runs it)
#: and a fresh `.[runtime]` venv (`tools.runtime_venv`: what `pip install 'vlm-vision-onnx[runtime]'` gives,
#: `python -m vlm_vision_onnx.runtime` outside the checkout).
VENVS = {"readme": ".venv (README: make install)", "runtime": ".[runtime] venv"}


def runtime_commands(venvs: list[str], tmp: Path, runtime_python: Path | None) -> dict[str, tuple[list[str], Path]]:
    """{venv label: (the `python -m ... runtime` prefix, working folder)} of each of `venvs` (VENVS' keys); the
    `.[runtime]` venv is `runtime_python`, else made in `tmp`."""
    found = {}
    for venv in venvs:
        if venv == "readme":
            found[VENVS[venv]] = ([str(ROOT / ".venv" / "bin" / "python"), "-m", "runtime"], ROOT)
        else:
            python = runtime_python or runtime_venv.make(tmp / "runtime-venv")
            found[VENVS[venv]] = ([str(python), "-m", "vlm_vision_onnx.runtime"], tmp)
    return found


def embed_race(package: Path, config: str, seed: int, size: int, threads: int, reps: int, tmp: Path,
               runtimes: dict[str, tuple[list[str], Path]]) -> dict:
    """Process wall time of `runtime embed` (the package's default path) in each of `runtimes` ({venv label:
    (command prefix, working folder)}: `runtime_commands`) and of a PyTorch bf16 process (this venv's), all on
    EMBED_PHOTOS resized to `size`; interleaved, `reps` rounds. The other paths (`embed_also`, named explicitly) run
    in the first venv only: the venv changes the process's start-up, not its model's run."""
    from PIL import Image

    from quantize import calibration

    photos = []
    for name in EMBED_PHOTOS:
        path = tmp / f"{name}-{size}.png"
        Image.fromarray(calibration.resized(calibration.photo(name), (size, size))).save(path)
        photos.append(str(path))
    weights = tmp / "weights.safetensors"
    if not weights.exists():
        subprocess.run([sys.executable, "-m", "bench.cpu_race_torch", "save", config, str(seed), str(weights)],
                       check=True, cwd=ROOT)
    fp32_file = tmp / f"pytorch-fp32-{size}.npz"  # the accuracy reference, before any timed run
    subprocess.run([sys.executable, "-m", "bench.cpu_race_torch", "reference", config, str(weights), str(package),
                    str(fp32_file), *photos], check=True, cwd=ROOT, capture_output=True)
    with np.load(fp32_file) as data:
        fp32 = {key: data[key] for key in data.files}
    arguments = ["embed", *photos, "--package", str(package.resolve()), "--out", str(tmp / "embed.npz"), "--threads",
                 str(threads), "--force"]
    venv_env = runtime_venv.environment()
    also = embed_also(json.loads((package / "manifest.json").read_text()), size)
    defaults = {venv: f"runtime embed (default path) in {venv}" for venv in runtimes}
    (first_venv, (first_prefix, first_cwd)), *_ = runtimes.items()
    commands = {  # (command, working folder, environment)
        **{defaults[venv]: ([*prefix, *arguments], cwd, venv_env) for venv, (prefix, cwd) in runtimes.items()},
        **{f"runtime embed {' '.join(options)} in {first_venv}": ([*first_prefix, *arguments, *options], first_cwd,
                                                                  venv_env) for options in also},
        "PyTorch bf16 process": ([sys.executable, "-m", "bench.cpu_race_torch", "embed", config, str(weights),
                                  str(package), str(threads), *photos], ROOT, None),
    }
    times: dict[str, list[float]] = {label: [] for label in commands}
    stage_times: dict[str, dict[str, list[float]]] = {label: {} for label in commands}
    lines: dict[str, str] = {}
    first: dict[str, dict[str, np.ndarray]] = {}  # each runtime command's features of its untimed run
    agree: dict[str, float] = {}  # the lowest min per-token cosine of a later run against that
    accuracy: dict[str, float] = {}  # each runtime command's untimed run against PyTorch fp32, every output
    for rep in range(-1, reps):  # -1: untimed, fills the page cache for every command
        for label, (command, cwd, env) in commands.items():
            start = time.perf_counter()
            done = subprocess.run(command, check=False, capture_output=True, text=True, cwd=cwd, env=env)
            if done.returncode:
                raise RuntimeError(f"{label} failed: {done.stderr.strip().splitlines()[-1:]}")
            if rep >= 0:
                times[label].append(round(time.perf_counter() - start, 3))
                for stage, seconds in stages(done.stderr).items():
                    stage_times[label].setdefault(stage, []).append(seconds)
            lines[label] = next((line for line in done.stderr.splitlines() if "path:" in line), "")
            if label.startswith("runtime embed"):
                with np.load(tmp / "embed.npz") as out:
                    arrays = {key: out[key] for key in out.files}  # each read from the archive once
                features = {key: value for key, value in arrays.items() if value.dtype.kind == "f"}
                if label in first:
                    agree[label] = min(agree.get(label, 1.0), *(min_token_cosine(features[key], value)
                                                                for key, value in first[label].items()))
                else:
                    first[label] = features
                    accuracy[label] = min(min_token_cosine(features[key], value) for key, value in fp32.items())
    medians = {label: statistics.median(t) for label, t in times.items()}
    torch_s = medians["PyTorch bf16 process"]
    return {"size": size, "photos": list(EMBED_PHOTOS), "threads": threads,
            "runtimes": {venv: " ".join(prefix) for venv, (prefix, _) in runtimes.items()},
            "times_s": times, "paths": lines, "repeat_min_token_cosine": agree,
            "min_token_cosine_vs_pytorch_fp32": accuracy,
            "median_s": medians, "path_line": lines.get(defaults[first_venv], ""),
            "stages_s": {label: {stage: statistics.median(t) for stage, t in by_stage.items()}
                         for label, by_stage in stage_times.items()},
            "speedup_vs_torch_bf16": {venv: round(torch_s / medians[label], 3) for venv, label in defaults.items()}}


def _cell(r: dict, base: float | None) -> str:
    """'1.234 s, 1.50x bf16, 0.99987, 0.80 TFLOP/s' of one path at one case."""
    ratio = f", {base / r['median_s']:.2f}x bf16" if base else ""
    cos = f", {r['min_token_cosine']:.5f}" if r["min_token_cosine"] is not None else ""
    return f"{r['median_s']:.3f} s{ratio}{cos}, {r['tflops']:.2f} TFLOP/s"


def stage_table(e: dict) -> list[str]:
    """Markdown lines: where each process's time goes (its stages' medians; the rest: the wall time's median less
    theirs, i.e. Python's start, the imports before the first stage, writing the result and exit)."""
    lines = [("Where each process's time goes (medians over the rounds, s; each stage as the process printed it: "
              "`runtime embed` waits for its model's session, opening since the process began, only after loading "
              "and preprocessing the photos):"), "", "| command | median s | stages | the rest |", "|---|---:|---|---:|"]
    for label, by_stage in e["stages_s"].items():
        if by_stage:
            rest = e["median_s"][label] - sum(by_stage.values())
            shown = ", ".join(f"{stage} {seconds:.2f}" for stage, seconds in by_stage.items())
            lines.append(f"| {label} | {e['median_s'][label]:.2f} | {shown} | {rest:.2f} |")
    return [*lines, ""]


def markdown(result: dict) -> str:
    flags = ", ".join(result["cpu_flags"]) or "none of " + ", ".join(FLAGS)
    lines = [f"# CPU race: {result['model']}", "",
             (f"`{result['command']}` on {describe(result['machine'])}; CPU flags: {flags}; {result['started']} - "
              f"{result['finished']}. Medians of interleaved rounds; accuracy: min per-token cosine over every output "
              "against PyTorch fp32 on the same real photo; FLOP/s: matrix products (bench.flops) / median. "
              "**Bold**: the default path (`runtime embed` with no option) at that case's size: "
              + "; ".join(f"{case}: {line}" for case, (_, line) in result["defaults"].items()) + "."), ""]
    for threads, run in result["runs"].items():
        p = run["peaks_tflops"]
        amx = [f"{name} {p[key]:.2f}" if p[key] else f"{name} absent"
               for name, key in (("AMX-BF16", "amx_bf16"), ("AMX-INT8", "amx_int8"))]
        lines += [f"## {threads} thread(s)", "",
                  f"Peaks at {threads} core(s), {p['clock_mhz']:.0f} MHz: fp32 {p['fp32']:.2f} TFLOP/s, {', '.join(amx)}.",
                  "", "| path | " + " | ".join(run["cases"]) + " | peak RSS MiB |",
                  "|---|" + "---:|" * (len(run["cases"]) + 1)]
        for label in next(iter(run["cases"].values())):
            cells = [_cell(by_label[label], by_label.get("PyTorch bf16", {}).get("median_s"))
                     for by_label in run["cases"].values()]
            cells = [f"**{c}**" if result["defaults"].get(case, ("",))[0] == label else c
                     for case, c in zip(run["cases"], cells)]
            lines.append(f"| {label} | " + " | ".join(cells) + f" | {run['peak_rss_mib'].get(label)} |")
        lines.append("")
        if run.get("profile"):
            lines += [(f"OpenVINO per-op profile at {run['profile_case']} (PERF_COUNT, one run; seconds by layer "
                       "type and kernel, top 10):"), ""]
            for label, ops in run["profile"].items():
                shown = "; ".join(f"{o['type']} {o['exec']} {o['seconds']:.3f}" for o in ops) \
                    if isinstance(ops, list) else ops
                lines.append(f"- {label}: {shown}")
            for precision, ops in run.get("attention_profile", {}).items():
                shown = "; ".join(f"{o['type']} {o['exec']} {o['seconds']:.3f}" for o in ops)
                lines.append(f"- one block's batched attention alone ({precision}, a model of its own): {shown}")
            lines.append("")
    for e in result.get("embed") or []:
        lines += [f"## Process wall time at {e['size']}x{e['size']}: `runtime embed` against a PyTorch bf16 process", "",
                  (f"{len(e['photos'])} photos at {e['size']}x{e['size']}, {e['threads']} thread(s), each command a "
                   "fresh process (`runtime embed` in "
                   + "; ".join(f"{venv}: `{prefix} embed`" for venv, prefix in e["runtimes"].items())
                   + f"; PyTorch loads the same weights from safetensors); {e['path_line']}"), "",
                  ("| command | path | median s | x PyTorch bf16 | runs | runs agree (min cosine) | "
                   "vs PyTorch fp32 (min cosine) |"),
                  "|---|---|---:|---:|---|---:|---:|"]
        torch_s = e["median_s"]["PyTorch bf16 process"]
        for label, median in e["median_s"].items():
            path = e.get("paths", {}).get(label, "").split("path: ")[-1]
            repeat = e.get("repeat_min_token_cosine", {}).get(label)
            versus = e.get("min_token_cosine_vs_pytorch_fp32", {}).get(label)
            lines.append(f"| {label} | {path} | {median:.2f} | {torch_s / median:.2f}x | "
                         f"{', '.join(f'{t:.2f}' for t in e['times_s'][label])} | "
                         f"{'' if repeat is None else f'{repeat:.6f}'} | {'' if versus is None else f'{versus:.5f}'} |")
        lines += ["", "`runtime embed` (default path) is " + ", ".join(
            f"**{ratio:.2f}x** PyTorch bf16 in {venv}" for venv, ratio in e["speedup_vs_torch_bf16"].items()) + ".", ""]
        if any(e.get("stages_s", {}).values()):
            lines += stage_table(e)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cpu_race", description=__doc__.splitlines()[0])
    parser.add_argument("--build", type=Path, default=ROOT / "build" / "qwen3-vl-2b")
    parser.add_argument("--sizes", default="448,1024", help="square image sides, comma-separated (default 448,1024)")
    parser.add_argument("--video", type=int, default=8, help="frames of the 448x448 video case (0: none)")
    parser.add_argument("--threads", default="2", help="thread counts, comma-separated (default 2)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--package", type=Path, help="also time `runtime embed` on this package against PyTorch")
    parser.add_argument("--embed-sizes", default="1024",
                        help="square photo sides of the --package race, comma-separated (default 1024)")
    parser.add_argument("--venvs", default="readme,runtime",
                        help="where the --package race runs `runtime embed`, comma-separated: readme (the README's "
                             ".venv, `python -m runtime` from the checkout), runtime (a `.[runtime]` venv: "
                             "--runtime-python, else a fresh one made for the run); default both")
    parser.add_argument("--runtime-python", type=Path, metavar="PY",
                        help="the python of the `.[runtime]` venv (default: a fresh venv with `pip install "
                             ".[runtime]` alone, what users install, made for the run)")
    parser.add_argument("--paths", help="only these paths, comma-separated labels (e.g. 'PyTorch fp32,PyTorch "
                                        "bf16,OV INT8': the memory of 2048^2); PyTorch fp32 gives the accuracy")
    parser.add_argument("--suffix", default="")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    only = tuple(label.strip() for label in args.paths.split(",")) if args.paths else None
    sizes = [int(s) for s in args.sizes.split(",") if s]
    venvs = [v.strip() for v in args.venvs.split(",") if v.strip()]
    if not venvs or set(venvs) - set(VENVS):
        parser.error(f"--venvs: give some of {', '.join(VENVS)}, comma-separated; got {args.venvs!r}")
    if not sizes and not args.video and not args.package:
        parser.error("nothing to run: give --sizes, --video or --package")
    export = json.loads((args.build / "export" / "report.json").read_text())
    unknown = [label for label in only or () if label not in paths(args.build)]
    if unknown:
        parser.error(f"--paths: {', '.join(unknown)} is no path of {args.build} on this machine; known: "
                     f"{', '.join(paths(args.build))}")
    vision = load_config(export["model"]).vision
    result = {"command": "python -m bench.cpu_race " + " ".join(argv if argv is not None else sys.argv[1:]),
              "model": export["model"], "machine": machine(), "cpu_flags": [f for f in FLAGS if cpu.has(f)],
              "started": time.strftime("%Y-%m-%dT%H:%M:%S"), "load_average_start": load_average(), "runs": {}}
    with tempfile.TemporaryDirectory(prefix="cpu-race-") as tmp:
        feeds = cases(args.build / "optimized" / "model.onnx", sizes, args.video) if sizes or args.video else {}
        result["defaults"] = default_paths(args.build, feeds)
        for threads in (int(t) for t in args.threads.split(",") if feeds):
            run = race(args.build, feeds, threads, args.reps, Path(tmp), only)
            run["peaks_tflops"] = peaks(threads)
            for by_label in run["cases"].values():
                for r in by_label.values():
                    r["tflops"] = encoder_flops(vision, r["grid_thw"]) / r["median_s"] / 1e12
            result["runs"][str(threads)] = run
        if args.package:  # --package alone (--sizes '' --video 0): the process race only
            runtimes = runtime_commands(venvs, Path(tmp), args.runtime_python)
            result["embed"] = [embed_race(args.package, export["model"], export.get("seed", 0), int(size),
                                          max(int(t) for t in args.threads.split(",")), args.reps, Path(tmp),
                                          runtimes)
                               for size in args.embed_sizes.split(",") if size]
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    stem = "cpu-race" + (f"-{args.suffix}" if args.suffix else "")
    write_results(args.out, stem, result, markdown(result), TAG)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
