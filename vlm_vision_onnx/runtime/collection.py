"""`python -m runtime embed-collection PACKAGE INPUT OUT`: embeddings of a whole image collection into a
Parquet dataset folder, resumable, on Ray Data (`--scheduler ray`, `runtime/collection_ray.py`) or in this
process (`--scheduler local`), without torch.

INPUT (a folder, a glob, or a .parquet/.csv list with a `path` column) and OUT (`part-*.parquet` rows plus
`_collection.json`) are described in `runtime/collection_io.py`. The listing is split, in order, into chunks
of `--batch` entries; a chunk is the unit of work of a scheduler (one Ray task on an actor) and becomes one part
when it is done. Both schedulers make the same chunks and the same packs from the same pending list, and one
`Embedder` turns each chunk into rows, so their outputs are the same bits. `--engine onnxruntime|openvino`
(`core.engine`) is the runtime of each session, under either scheduler.

Packing (`Embedder.rows`): every entry is read (`runtime.images.load_rgb`) and preprocessed alone first
(`Processing.embed_pack` on that entry: its token count; a corrupt file, or a size the processor refuses,
becomes a row with status `error` and the message). Consecutive entries then go into one encoder call while
their tokens stay within `--max-tokens` (Qwen3-VL: 4 patches per token; an entry larger than the budget runs
alone; at most one video per call, as `embed_pack` takes one), preprocessed again as that pack by the family's
own `embed_pack` (the second preprocessing costs 3-65 ms per image against 1.5-3.4 s of encoder per 448^2
image at 2B dims). The pack's outputs are cut per entry by `runtime.embed.split`. A pack ONNX Runtime
fails on is retried entry by entry, so only the failing entry becomes an error row.

Measured (tiny Qwen3-VL package, ONNX Runtime 1.31.1 CPU, 1-3 threads; also the tiny Phi-4-multimodal package,
whose packs pad crops): an image's outputs are the same bits whether it runs alone or in a pack, in any order
and at any thread count; tests/test_embed_collection.py asserts it (Qwen3-VL) against single-image `embed`.

Exit codes: 0 every row of OUT is `ok`; 1 OUT holds error rows (the rest is written); 2 bad input, nothing
written; 130 interrupted (finished parts are kept; the same command resumes).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from vlm_vision_onnx.core import console, onnx_io, onnx_light
from vlm_vision_onnx.core import engine as engines
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.families import family
from vlm_vision_onnx.runtime import collection_io, embed, images, path_choice, unpack
from vlm_vision_onnx.runtime.collection_embedder import TAG, Embedder
from vlm_vision_onnx.runtime.progress_bar import Bar
from vlm_vision_onnx.runtime.verify import sha256

SCHEDULERS = ("ray", "local")
BATCH = 16  # entries per chunk: one Ray task, one part
MAX_TOKENS = 1024  # per encoder call (Qwen3-VL: 4,096 patches, about five 448x448 images)


def chunks(paths: list[str], size: int) -> list[tuple[list[str], list[str]]]:
    """(paths as listed, absolute files) per chunk of `size` entries, in order."""
    return [(paths[i:i + size], [os.path.abspath(p) for p in paths[i:i + size]]) for i in range(0, len(paths), size)]


def checksum(folder: Path, model: Path, cached: dict | None = None) -> tuple[str, dict]:
    """(checksum, stats) of the bytes that run: sha256 of the variant's ONNX file (as in SHA256SUMS); with external
    data, sha256 of the `SHA256  FILE` lines of the model and its data files. Always computed from the files (the
    model's own external-data references, which `core.onnx_io` keeps inside its folder), never taken from the
    manifest. `stats` {file: [size, mtime_ns, sha256]} is kept in `_collection.json`; `cached` (an earlier run's)
    spares hashing a file whose size and mtime are unchanged (1.5 GB takes about 9 s here)."""
    proto = onnx_io.read_light(model)
    names = {model.relative_to(folder).as_posix()}
    for tensor in onnx_io.all_tensors(proto.graph):
        if tensor.data_location == onnx_light.EXTERNAL:
            location = next(e.value for e in tensor.external_data if e.key == "location")
            names.add((model.parent / location).relative_to(folder).as_posix())
    del proto
    stats, sums = {}, []
    for name in sorted(names):
        info = (folder / name).stat()
        earlier = (cached or {}).get(name)
        known = isinstance(earlier, list) and len(earlier) == 3 and earlier[:2] == [info.st_size, info.st_mtime_ns]
        digest = earlier[2] if known else sha256(folder / name)
        stats[name] = [info.st_size, info.st_mtime_ns, digest]
        sums.append((digest, name))
    if len(sums) == 1:
        return sums[0][0], stats
    return hashlib.sha256("".join(f"{s}  {f}\n" for s, f in sorted(sums)).encode()).hexdigest(), stats


def run_local(work: list, settings: dict, write) -> None:
    """The chunks one after another in this process, one session (`settings`: `Embedder`'s arguments)."""
    embedder = Embedder(**settings)
    for paths, files in work:
        write(embedder.rows(paths, files))


def default_scheduler() -> str:
    from vlm_vision_onnx.runtime import collection_ray

    return "ray" if collection_ray.available() else "local"


def add_arguments(parser) -> None:
    parser.add_argument("package", type=Path, help="dist/NAME or dist/NAME.tar.gz")
    parser.add_argument("input", metavar="INPUT", help="a folder (recursive), a glob, or a .parquet/.csv list with "
                                                       "a `path` column (a folder row is one video of its frames)")
    parser.add_argument("out", type=Path, metavar="OUT", help="Parquet dataset folder (new, or an earlier OUT to resume)")
    path_choice.add_arguments(parser)
    parser.add_argument("--scheduler", choices=SCHEDULERS, help="ray (default when ray is installed) or local")
    engines.add_arguments(parser, SCHEDULERS, "; ray and local are taken as --scheduler (their flag before "
                                              "2026-11-26)")
    parser.add_argument("--address", help="an existing Ray cluster (HOST:PORT of its head, or `auto`); default: a "
                                          "local cluster started for the run")
    parser.add_argument("--actors", type=int, help="Ray: sessions in the actor pool (default: CPUs // threads)")
    parser.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads per session (local default: all "
                                                    "cores; Ray default: 2, at most the CPUs)")
    parser.add_argument("--batch", type=int, default=BATCH, help=f"entries per chunk: one task, one part "
                                                                 f"(default {BATCH})")
    parser.add_argument("--max-tokens", type=int, default=MAX_TOKENS,
                        help=f"patch budget of one encoder call, in output tokens (Qwen3-VL: 4 patches each; "
                             f"default {MAX_TOKENS})")
    parser.add_argument("--deepstack", action="store_true", help="also write the DeepStack features (Qwen3-VL)")
    images.add_budget_argument(parser)


def _check_numbers(args) -> None:
    for name in ("actors", "threads", "batch", "max_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be >= 1, got {value}")
    if args.engine in SCHEDULERS:  # the flag's former meaning
        args.scheduler, args.engine = args.scheduler or args.engine, "onnxruntime"
    if args.scheduler == "local" and (args.address or args.actors):
        raise UsageError("--address and --actors are for --scheduler ray; drop them or use --scheduler ray")


class Writer:
    """Writes each finished chunk's rows as a part of OUT and moves the progress bar; `start` creates OUT (once
    the run is sure to go ahead) and starts the bar's clock."""

    def __init__(self, out: Path, meta: dict, total: int):
        self.out, self.meta, self.total = out, meta, total
        self.bar: Bar | None = None
        self.failed = 0

    def start(self) -> None:
        collection_io.start_out(self.out, self.meta)
        self.bar = Bar(self.total, TAG)

    @property
    def done(self) -> int:
        return self.bar.done if self.bar else 0

    def __call__(self, table) -> None:
        collection_io.write_part(self.out, table)
        errors = table.num_rows - table.column("status").to_pylist().count("ok")
        self.failed += errors
        self.bar.update(table.num_rows, errors)


def package_meta(folder: Path, manifest: dict, variant: str, deepstack: bool, cached: dict | None = None) -> dict:
    """What `_collection.json` records; a rerun into the same OUT must give the same (checked by `check_out`).
    `cached`: the file stats of an earlier `_collection.json` (`checksum`)."""
    outputs = [o.get("name") for o in manifest.get("outputs", []) if isinstance(o, dict)]
    digest, stats = checksum(folder, embed.model_file(folder, manifest, variant), cached)
    for name, (_, _, file_digest) in stats.items():  # the bytes that run are the package's (hashed just now)
        unpack.check_recorded(folder, folder / name, file_digest)
    return {"format": collection_io.FORMAT, "package": manifest.get("name"), "family": manifest["family"],
            "variant": variant, "checksum": digest, "checksum_files": stats,
            "columns": ["embedding", *(outputs[1:] if deepstack else [])],
            "embedding": "flattened row-major float32 [tokens, hidden]; reshape with the `shape` column"}


def run(args) -> int:
    """The `embed-collection` subcommand (see the module docstring); returns the exit code."""
    from vlm_vision_onnx.runtime import collection_ray

    _check_numbers(args)
    scheduler = args.scheduler or default_scheduler()
    if scheduler == "ray" and not collection_ray.available():
        raise UsageError("--scheduler ray needs ray: pip install '.[ray]' (or use --scheduler local)")
    collection_io.pyarrow_modules()
    out = Path(os.path.abspath(args.out))
    with unpack.opened(args.package) as folder:
        manifest = embed.read_manifest(folder)
        earlier = collection_io.earlier_meta(out)
        # a resumed collection keeps its variant unless one is given (the choice may differ on another machine)
        variant = args.variant or (earlier.get("variant") if isinstance(earlier.get("variant"), str) else None)
        processing = family(manifest["family"]).processing
        processing.load_processor(folder)
        processor_pixels = int(processing.max_pixels(folder))  # it downsizes any larger image to this
        budget = images.pixel_budget(processor_pixels, args.max_image_pixels)
        # one variant embeds the whole collection: chosen for the largest image the model may see in it
        choice = path_choice.choose(manifest, args.engine, variant, args.precision,
                                    largest=path_choice.Largest(min(budget, processor_pixels),
                                                                "images within --max-image-pixels may have"))
        say(choice.line(), TAG)
        # an unpacked tarball's files are new each run: nothing to spare
        cached = None if unpack.is_tarball(Path(args.package)) else earlier.get("checksum_files")
        meta = package_meta(folder, manifest, choice.variant, args.deepstack,
                            cached if isinstance(cached, dict) else None)
        folders = [p for p in (args.input, args.package) if Path(p).is_dir()]  # OUT may sit beside a list file
        done, old_errors = collection_io.check_out(out, folders, meta)
        todo = collection_io.pending(args.input, done)
        if done:
            say(f"OUT already holds {len(done):,} entries; {len(todo):,} to go", TAG)
        if not todo:
            return summary(args.out, len(done), old_errors)
        settings = {"folder": str(folder), "variant": choice.variant, "max_tokens": args.max_tokens,
                    "columns": meta["columns"], "checksum": meta["checksum"], "threads": args.threads,
                    "engine": choice.engine, "max_pixels": budget}
        work, write = chunks(todo, args.batch), Writer(out, meta, len(todo))
        try:
            if scheduler == "local":
                write.start()
                run_local(work, settings, write)
            else:
                with collection_ray.cluster(args.address) as cpus:  # bad --address: UsageError, nothing written
                    write.start()
                    collection_ray.run(work, settings, cpus, args.actors, args.threads, write)
        except KeyboardInterrupt:
            if write.bar and write.bar.live:
                print(file=console.stream())
            print(f"error: interrupted after {write.done:,} of {len(todo):,} entries; the finished parts in "
                  f"{args.out} are kept: run the same command again to resume", file=console.stream())
            return 130
        write.bar.close()
    return summary(args.out, len(done) + write.done, old_errors + write.failed)


def summary(out: Path, rows: int, errors: int) -> int:
    """The last line: what OUT holds; exit 1 when some rows are errors."""
    print(f"wrote {out}: {rows:,} rows, {rows - errors:,} ok, {errors:,} error{'s' if errors != 1 else ''}")
    if errors:
        print(f"error: {errors:,} of {rows:,} entries could not be embedded: their rows in {out} have status "
              "'error' and the reason in `error`", file=console.stream())
        return 1
    return 0
