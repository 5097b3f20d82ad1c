"""`python -m bench.collection --package dist/NAME`: throughput and memory of `python -m runtime embed-collection`.

Photos: the real photographs of `runtime.sample_photos.PHOTOS` (skimage.data), resized to `tools.photos.SIZES` in turn (64² to
640x480, both orientations; PNG and JPEG), `--images` of them.

Throughput (images/s), in this process, interleaved: `--reps` rounds, each running every configuration once on
the same photos into a fresh OUT (parts written as by the command): `--scheduler local` with 1 and 2 ONNX Runtime
threads, and Ray (one local cluster started once for the run, `runtime.collection_ray.cluster`) with 1 and with 2
actors of 1 thread each. Two figures per run: *steady*, the images in the parts after the one that completes
`WARM` of them, over the time from that part to the last (what a long collection sees: no start-up; Ray hands
over the first parts in a burst once its pool is up, so the first part alone is no clean start), and *end to
end*, every image over the whole call (with the session or actor-pool start). Medians over the rounds; the ratios compare medians of one run.

Memory: the command itself (`python -m runtime embed-collection ... --scheduler E`) in a child process on `--counts`
inputs (symbolic links to the photos), the peak over the run of the summed proportional set size (PSS,
/proc/PID/smaps_rollup, sampled every `SAMPLE_S` s) of the child and every process under it: the driver, and
with Ray the cluster it starts and its workers (shared pages, e.g. the object store, counted once).

Targets: Ray with 2 actors >= 1.8x Ray with 1 actor; Ray >= 0.9x local at the same total threads (1 actor x 1
thread against 1 thread, 2 x 1 against 2); peak memory at the largest count within 20% of the smallest.
Writes bench/results/collection.{json,md} naming the CPU (`core.machine`).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.timing import load_average
from tools.photos import SIZES, write_photos
from vlm_vision_onnx.core import console
from vlm_vision_onnx.core.machine import describe, machine
from vlm_vision_onnx.runtime import collection, collection_io, collection_ray, embed

ROOT = Path(__file__).resolve().parents[1]
#: label -> (engine, actors, threads per session)
CONFIGS = {"local, 1 thread": ("local", None, 1), "local, 2 threads": ("local", None, 2),
           "Ray, 1 actor x 1 thread": ("ray", 1, 1), "Ray, 2 actors x 1 thread": ("ray", 2, 1)}
SAMPLE_S = 0.2
WARM = 0.25  # steady throughput: the rows after the part that reaches this fraction, over the time after it
TARGETS = {"ray2_over_ray1": 1.8, "ray_over_local": 0.9, "memory_growth": 1.2}


def linked(folder: Path, sources: list[Path], count: int) -> Path:
    """`folder` holding `count` symbolic links to `sources` in turn (distinct paths, the same photos)."""
    folder.mkdir(parents=True)
    for k in range(count):
        source = sources[k % len(sources)]
        (folder / f"{k:05d}{source.suffix}").symlink_to(source)
    return folder


class Timed:
    """A `write` callback of the engines: writes the part and records (time, rows) of each."""

    def __init__(self, out: Path):
        self.out, self.marks = out, []

    def __call__(self, table) -> None:
        collection_io.write_part(self.out, table)
        self.marks.append((time.perf_counter(), table.num_rows))


def one_run(label: str, work: list, settings: dict, cpus: float | None, out: Path) -> dict:
    """One configuration on the chunks: {steady, end_to_end} images/s."""
    engine, actors, threads = CONFIGS[label]
    out.mkdir(parents=True)
    timed = Timed(out)
    start = time.perf_counter()
    if engine == "local":
        collection.run_local(work, {**settings, "threads": threads}, timed)
    else:
        collection_ray.run(work, settings, cpus, actors, threads, timed)
    done = np.cumsum([rows for _, rows in timed.marks])
    times = [t for t, _ in timed.marks]
    warm = max(1, int(np.searchsorted(done, WARM * done[-1])))  # the first part that reaches WARM of the rows
    warm = min(warm, len(done) - 1)
    steady = (done[-1] - done[warm - 1]) / (times[-1] - times[warm - 1]) if times[-1] > times[warm - 1] else float("nan")
    return {"steady": float(steady), "end_to_end": float(done[-1] / (times[-1] - start))}


def throughput(package: Path, variant: str, photos: list[Path], batch: int, reps: int, work_dir: Path) -> dict:
    """{label: {steady_median, end_to_end_median, steady, end_to_end}} (images/s), rounds interleaved."""
    manifest = embed.read_manifest(package)
    meta = collection.package_meta(package, manifest, variant, deepstack=False)
    settings = {"folder": str(package), "variant": variant, "max_tokens": collection.MAX_TOKENS,
                "columns": meta["columns"], "checksum": meta["checksum"]}
    paths = [str(p) for p in photos]
    work = collection.chunks(paths, batch)
    runs = {label: [] for label in CONFIGS}
    with collection_ray.cluster(None) as cpus:
        for rep in range(reps):
            for i, label in enumerate(CONFIGS):
                record = one_run(label, work, settings, cpus, work_dir / f"r{rep}-{i}")
                runs[label].append(record)
                print(f"[bench.collection] round {rep + 1}/{reps} {label}: {record['steady']:.2f} images/s steady, "
                      f"{record['end_to_end']:.2f} end to end", flush=True)
    return {label: {"steady_median": float(np.median([r["steady"] for r in records])),
                    "end_to_end_median": float(np.median([r["end_to_end"] for r in records])),
                    "steady": [round(r["steady"], 3) for r in records],
                    "end_to_end": [round(r["end_to_end"], 3) for r in records]} for label, records in runs.items()}


def tree_pss_mib(root: int) -> float:
    """Summed PSS (MiB) of process `root` and every process under it (0 for those gone while reading)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    total, todo = 0, [root]
    while todo:
        pid = todo.pop()
        todo.extend(children.get(pid, []))
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in rollup if line.startswith("Pss:")), 0)
    return total / 1024


def memory_point(package: Path, variant: str, inputs: Path, engine: str, batch: int, out: Path) -> dict:
    """The command in a child process: {exit, wall_s, peak_pss_mib} of its process tree."""
    command = [sys.executable, "-m", "vlm_vision_onnx.runtime", "embed-collection", str(package), str(inputs),
               str(out),
               "--variant", variant, "--scheduler", engine, "--batch", str(batch)]
    start = time.perf_counter()
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    peak = 0.0
    while child.poll() is None:
        peak = max(peak, tree_pss_mib(child.pid))
        time.sleep(SAMPLE_S)
    stderr = child.stderr.read()
    if child.returncode not in (0, 1):
        raise SystemExit(f"error: {' '.join(command)} exited {child.returncode}: {stderr.strip()[-400:]}")
    return {"exit": child.returncode, "wall_s": round(time.perf_counter() - start, 1), "peak_pss_mib": round(peak, 1)}


def memory(package: Path, variant: str, photos: list[Path], counts: list[int], batch: int, work_dir: Path) -> list:
    points = []
    for count in counts:
        inputs = linked(work_dir / f"inputs-{count}", photos, count)
        for engine in ("local", "ray"):
            record = memory_point(package, variant, inputs, engine, batch, work_dir / f"mem-{engine}-{count}")
            points.append({"images": count, "engine": engine, **record})
            print(f"[bench.collection] {count} images, --scheduler {engine}: peak {record['peak_pss_mib']:.0f} MiB, "
                  f"{record['wall_s']:.0f} s", flush=True)
    return points


def verdicts(result: dict) -> dict:
    """The targets' ratios from the medians of this run."""
    steady = {label: r["steady_median"] for label, r in result["throughput"].items()}
    labels = list(CONFIGS)
    ratios = {"ray2_over_ray1": steady[labels[3]] / steady[labels[2]],
              "ray1_over_local1": steady[labels[2]] / steady[labels[0]],
              "ray2_over_local2": steady[labels[3]] / steady[labels[1]]}
    for engine in ("local", "ray"):
        peaks = [p for p in result["memory"] if p["engine"] == engine]
        if len(peaks) >= 2:
            ratios[f"memory_growth_{engine}"] = peaks[-1]["peak_pss_mib"] / peaks[0]["peak_pss_mib"]
    return {k: round(v, 3) for k, v in ratios.items()}


def target_row(what: str, measured: float, limit: float, at_least: bool = True) -> str:
    met = measured >= limit if at_least else measured <= limit
    return f"| {what} {'>=' if at_least else '<='} {limit} | {measured:.2f} | {'yes' if met else 'no'} |"


def markdown(result: dict) -> str:
    r = result["ratios"]
    lines = [f"# embed-collection throughput and memory ({result['package']}, {result['variant']})", "",
             f"`python -m bench.collection` on {describe(result['machine'])}; {result['started']} – "
             f"{result['finished']}; load average {result['load_average_start']} at the start. "
             f"{result['images']} real photos (skimage.data, {len(SIZES)} sizes from 64x64 to 640x480), "
             f"--batch {result['batch']}, --max-tokens {collection.MAX_TOKENS}, medians of {result['reps']} "
             "interleaved rounds. Weights: " + result["weights"] + ".", "",
             "| configuration | images/s steady | images/s end to end |", "|---|---:|---:|"]
    for label, t in result["throughput"].items():
        lines.append(f"| {label} | {t['steady_median']:.2f} | {t['end_to_end_median']:.2f} |")
    lines += ["", (f"Steady: the images in the parts after the one completing {WARM:.0%} of them, over the time "
                   "from that part to the last; end to end: every image over the whole call, session or actor-pool "
                   "start included."), "",
              "| target | measured | met |", "|---|---:|---|",
              target_row("Ray 2 actors / Ray 1 actor", r["ray2_over_ray1"], TARGETS["ray2_over_ray1"]),
              target_row("Ray 1x1 / local 1 thread", r["ray1_over_local1"], TARGETS["ray_over_local"]),
              target_row("Ray 2x1 / local 2 threads", r["ray2_over_local2"], TARGETS["ray_over_local"])]
    for engine in ("local", "ray"):
        if f"memory_growth_{engine}" in r:
            lines.append(target_row(f"peak memory --scheduler {engine}, {result['counts'][-1]} / "
                                    f"{result['counts'][0]} images", r[f"memory_growth_{engine}"],
                                    TARGETS["memory_growth"], at_least=False))
    if result["memory"]:
        lines += ["", "| images | engine | peak PSS of the process tree (MiB) | wall (s) |", "|---:|---|---:|---:|"]
        lines += [f"| {p['images']:,} | {p['engine']} | {p['peak_pss_mib']:.0f} | {p['wall_s']:.0f} |"
                  for p in result["memory"]]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.collection", description=__doc__.splitlines()[0])
    parser.add_argument("--package", type=Path, required=True, help="a release package folder, dist/NAME")
    parser.add_argument("--variant", default="fp32")
    parser.add_argument("--images", type=int, default=96, help="photos in the throughput runs")
    parser.add_argument("--batch", type=int, default=8, help="entries per chunk (--batch of the command)")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--counts", default="200,2000", help="input sizes of the memory runs ('' for none)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args(argv)
    if not (args.package / "manifest.json").is_file():
        print(f"error: {args.package} is not a release package folder: run `make export` and `make package` first",
              file=sys.stderr)
        return 2
    manifest = json.loads((args.package / "manifest.json").read_text())
    weights = manifest.get("weights", {})
    counts = [int(c) for c in args.counts.split(",") if c.strip()]
    result = {"machine": machine(), "package": manifest.get("name"), "variant": args.variant, "images": args.images,
              "batch": args.batch, "reps": args.reps, "counts": counts,
              "weights": "random (seed {})".format(weights.get("seed")) if weights.get("source") == "random"
              else f"checkpoint {weights.get('checkpoint')}", "load_average_start": load_average(),
              "started": time.strftime("%Y-%m-%dT%H:%M:%S")}
    with tempfile.TemporaryDirectory(prefix="bench-collection-") as tmp, console.quiet():  # Ray's logs: not here
        photos = write_photos(Path(tmp) / "photos", args.images)
        result["throughput"] = throughput(args.package, args.variant, photos, args.batch, args.reps, Path(tmp))
        result["memory"] = memory(args.package, args.variant, photos[:50], counts, args.batch, Path(tmp))
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    result["load_average_end"] = load_average()
    result["ratios"] = verdicts(result)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "collection.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "collection.md").write_text(markdown(result))
    print(f"wrote {args.out / 'collection.md'}: {result['ratios']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
