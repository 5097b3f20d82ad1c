"""One point of the scale curve in a fresh process: `python -m bench.scale_point MODEL GRID [options]`.

Loads MODEL in ONNX Runtime, reads the resident memory, runs the encoder on random pixels of GRID
(JSON grid_thw, e.g. '[[1, 64, 64]]') `--reps` times, and prints one JSON line:
  {"seconds": [...], "rss_loaded_mib": ..., "peak_rss_mib": ..., "error": null}
With --singles GRID2 [GRID3 ...] it times the pack GRID against one call per single grid, interleaved,
and prints {"pack_s": [...], "singles_s": [...], ...}. `--max-memory-gib` caps the address space
(RLIMIT_AS), so a point that would exhaust the shared machine fails with an error instead.
Torch-free.
"""

import argparse
import json
import resource
import sys
import time
from pathlib import Path

from bench.timing import pixels
from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.report import peak_rss_mib
from vlm_vision_onnx.core.session import ORT_ERRORS, open_session


def rss_mib() -> float:
    """Current resident memory of this process, MiB (/proc/self/statm, pages)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * resource.getpagesize() / 2**20


def timed(run) -> float:
    start = time.perf_counter()
    run()
    return time.perf_counter() - start


def measure(model: Path, grid: list, reps: int, threads: int, singles: list[list] | None) -> dict:
    session = open_session(onnx_io.model_path(model), threads)  # a model.onnx or a stage folder
    record = {"rss_loaded_mib": round(rss_mib(), 1)}
    patch_dim = session.get_inputs()[0].shape[1]  # pixel_values [num_patches, 3*2*P*P]
    feed = pixels(grid, patch_dim=patch_dim)
    if singles is None:
        record["seconds"] = [round(timed(lambda: session.run(None, feed)), 4) for _ in range(reps)]
    else:
        feeds = [pixels(g, seed=i + 1, patch_dim=patch_dim) for i, g in enumerate(singles)]
        session.run(None, feed)  # warm once: both sides then run on a grown arena
        record["pack_s"], record["singles_s"] = [], []
        for _ in range(reps):
            record["pack_s"].append(round(timed(lambda: session.run(None, feed)), 4))
            record["singles_s"].append(round(timed(lambda: [session.run(None, f) for f in feeds]), 4))
    record["peak_rss_mib"] = round(peak_rss_mib(), 1)
    return record


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale_point", description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("grid", type=json.loads, help="grid_thw as JSON")
    parser.add_argument("--singles", type=json.loads, nargs="+", help="grids to time as separate calls")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-memory-gib", type=float, default=0, help="address-space cap (0: none)")
    args = parser.parse_args(argv)
    if args.max_memory_gib:
        cap = int(args.max_memory_gib * 2**30)
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    try:
        record = measure(args.model, args.grid, args.reps, args.threads, args.singles)
        record["error"] = None
    except (MemoryError, *ORT_ERRORS) as err:  # an allocation failure under the cap
        record = {"error": " ".join(str(err).split())[:300], "peak_rss_mib": round(peak_rss_mib(), 1)}
    print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
