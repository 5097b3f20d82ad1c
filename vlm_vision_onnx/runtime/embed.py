"""`python -m runtime embed IMAGE [IMAGE ...] --package DIR|DIR.tar.gz --out FILE.npz`: embeddings of image
files (and of one video given as frames) from a release package, without torch.

Every image (and the video) is preprocessed as the model's own processor does (`Family.processing`: families/<family>/preprocess*.py),
then all of them run as one pack (mixed sizes) through `onnx/vision_encoder[_VARIANT].onnx`, and the
outputs are split back per entry; on OpenVINO each entry runs alone (`entry_packs`, `Engine.one_entry_per_run`:
its first run at a large new shape costs more than the runs saved by packing), several at the same time on
OpenVINO's streams (`Engine.at_once`: the number of entries; `openvino_session.performance_hint`). FILE.npz holds:
- `entries`: str [num_entries], `image_0`, `image_1`, ... in the order given, then `video`;
- `ENTRY.source`: str [files] the file(s) of the entry (a video's frames in order);
- Qwen3-VL: `ENTRY.grid_thw` int64 [3] (t, h, w in patches) and one array per model output,
  `ENTRY.image_features` [t*h*w/4, out_hidden], `ENTRY.deepstack_embeds_K` likewise;
- Phi-4-multimodal (images only): `ENTRY.image_size` int64 [2] (HD canvas height, width),
  `ENTRY.num_crops` int64 (with the global crop), `ENTRY.image_features` [tokens, out_hidden].
The session opens in a background thread from the moment the images' headers are read, while the processor
(transformers), the images and the preprocessing load in Python (`runtime.session_opening`).
Bad input (unreadable image, empty folder, a package of another model, ...) is one `error:` line and
exit 2, with nothing written. `--engine qnn` runs the package's static buckets on Qualcomm's NPU instead
(runtime/npu_embed.py: one bucket per image, `ENTRY.bucket` added).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from vlm_vision_onnx.core import engine as engines
from vlm_vision_onnx.core import session
from vlm_vision_onnx.core.engine import Engine
from vlm_vision_onnx.core.errors import CheckFailed, UsageError
from vlm_vision_onnx.core.progress import say, step
from vlm_vision_onnx.core.report import read_json_object
from vlm_vision_onnx.core.staging import (
    add_clobber_argument,
    check_result_file,
    is_marked_result,
    staged_file,
)
from vlm_vision_onnx.families import family
from vlm_vision_onnx.families.base import Pack
from vlm_vision_onnx.runtime import buckets, images, npu, path_choice, unpack
from vlm_vision_onnx.runtime.session_opening import SessionOpening

TAG = "embed"
MODEL_STEM = "onnx/vision_encoder"
PROGRESS_EVERY = 8  # with more files than this, a progress line every this many


def read_manifest(folder: Path) -> dict:
    path = folder / "manifest.json"
    if not path.is_file():
        raise UsageError(f"{folder} is not a release package: manifest.json is missing")
    manifest = read_json_object(path, "manifest", "build or unpack the package again")
    family(manifest.get("family"), str(path))  # UsageError naming the known families
    return manifest


def model_file(folder: Path, manifest: dict, variant: str) -> Path:
    """The variant's ONNX file: as the manifest names it, else onnx/vision_encoder[_VARIANT].onnx."""
    variants = [v for v in manifest.get("variants", []) if isinstance(v, dict)] \
        if isinstance(manifest.get("variants", []), list) else []
    named = {v.get("name"): v.get("file") for v in variants}
    relative = named.get(variant) or (f"{MODEL_STEM}.onnx" if variant == "fp32" else f"{MODEL_STEM}_{variant}.onnx")
    path = unpack.inside(folder, relative, f"manifest.json's variant {variant!r}")
    for record in variants:  # every path the manifest names for a variant stays inside the package
        listed = record.get("files", [])
        for name in listed if isinstance(listed, list) else [listed]:
            unpack.inside(folder, name, f"manifest.json's variant {record.get('name')!r}")
    if not path.is_file():
        found = sorted(named) or sorted(
            "fp32" if p.stem == "vision_encoder" else p.stem.removeprefix("vision_encoder_")
            for p in (folder / "onnx").glob("vision_encoder*.onnx"))
        raise UsageError(f"package {folder} has no variant {variant!r} ({relative} is missing); "
                         f"variants: {', '.join(found) or 'none'}")
    return path


def load_images(paths: list[Path], what: str = "images", max_pixels: int | None = None) -> list[np.ndarray]:
    """RGB uint8 [H, W, 3] per file (each within `max_pixels`), with a progress line every PROGRESS_EVERY files when
    there are many."""
    loaded = []
    for i, path in enumerate(paths, 1):
        loaded.append(images.load_rgb(path, max_pixels))
        if len(paths) > PROGRESS_EVERY and (i % PROGRESS_EVERY == 0 or i == len(paths)):
            say(f"loaded {i}/{len(paths)} {what}", TAG)
    return loaded


def cast_feeds(sess, feeds: dict[str, np.ndarray], model: Path, family: str) -> dict[str, np.ndarray]:
    """The feeds in the session's input dtypes; UsageError when the model's inputs are not the family's."""
    declared = {i.name: i.type for i in sess.get_inputs()}
    if set(declared) != set(feeds):
        raise UsageError(f"{model} has inputs {sorted(declared)}, not those of a {family} encoder "
                         f"({sorted(feeds)}): the package holds another model")
    for entry in sess.get_inputs():
        shape = feeds[entry.name].shape
        fixed = [(axis, dim) for axis, dim in enumerate(entry.shape) if isinstance(dim, int)]
        if len(shape) != len(entry.shape) or any(shape[axis] != dim for axis, dim in fixed):
            raise UsageError(f"{model} takes {entry.name} of shape {entry.shape}, but the package's preprocessor "
                             f"gives {list(shape)}: preprocessor_config.json does not fit the model")
    return {name: array.astype(session.NUMPY_TYPES.get(declared[name], array.dtype), copy=False)
            for name, array in feeds.items()}


def entry_packs(embed_pack, folder: Path, images: list, frames: list) -> list[Pack]:
    """One Pack per entry (each image alone, then the video), named as in the whole pack (image_0, ..., video):
    what an engine with `Engine.one_entry_per_run` (OpenVINO) runs."""
    packs = []
    for i, item in enumerate(images):
        pack = embed_pack(folder, [item], [])
        pack.names = [f"image_{i}"]
        packs.append(pack)
    if frames:
        packs.append(embed_pack(folder, [], frames))
    return packs


def split(outputs: dict[str, np.ndarray], pack: Pack) -> dict[str, np.ndarray]:
    """The npz content: every output cut into per-entry rows (see the module docstring)."""
    total = sum(pack.tokens)
    result = {"entries": np.array(pack.names)}
    for name, array in outputs.items():
        if array.shape[0] != total:
            raise CheckFailed(f"output {name} has {array.shape[0]} rows, but the processor's layout gives "
                              f"{total} tokens ({', '.join(map(str, pack.tokens))} per entry)")
    ends = np.cumsum(pack.tokens)
    for entry, source, facts, end, count in zip(pack.names, pack.sources, pack.facts, ends, pack.tokens):
        result[f"{entry}.source"] = np.array(source)
        result.update({f"{entry}.{k}": np.asarray(v) for k, v in facts.items()})
        result.update({f"{entry}.{name}": array[end - count: end] for name, array in outputs.items()})
    return result


def _earlier_result(path: Path) -> bool:
    """Whether an existing OUT is an earlier `embed` result (it may then be replaced): this tool's mark on it
    (`core.staging.is_marked_result`) and the `entries` of an embed result."""
    if not is_marked_result(path):
        return False
    try:
        with np.load(path) as data:
            return "entries" in data.files
    except (OSError, ValueError, EOFError):
        return False


def choose_model(folder: Path, manifest: dict, engine: Engine, variant: str | None,
                 largest: path_choice.Largest) -> tuple[path_choice.Choice, Path]:
    """The path (`runtime.path_choice`) for a call whose images the model sees at `largest`, and its model file;
    UsageError for an OpenVINO IR asked of another engine."""
    choice = path_choice.choose(manifest, engine.name, variant, engine.precision, largest=largest)
    model = model_file(folder, manifest, choice.variant)
    if model.suffix == ".xml" and choice.engine.name != "openvino":  # an OpenVINO IR (the ov-int8 variant)
        raise UsageError(f"variant {choice.variant!r} ({model.relative_to(folder)}) is an OpenVINO IR: run it with "
                         "--engine openvino")
    if choice.engine.name == "openvino" and model.suffix == ".onnx":  # its reader crashes on some broken graphs
        unpack.check_recorded(folder, model)
    return choice, model


def embed(image_args: list[str], video_args: list[str], package: Path, variant: str | None, out: Path,
          threads: int | None = None, force=False, engine: Engine = engines.DEFAULT,
          max_image_pixels: int | None = None) -> dict[str, np.ndarray]:
    """Preprocess, run (on `engine`; `Engine("auto")`: the engine, and the variant when `variant` is None, chosen by
    `runtime.path_choice` for the largest image or frame given) and write OUT.npz; returns what was written.
    `max_image_pixels`: the pixel budget of one image or frame (default: `images.pixel_budget` of the package's
    processor)."""
    image_paths = images.expand(image_args)
    frame_paths = images.expand(video_args)
    if not image_paths and not frame_paths:
        raise UsageError("give at least one IMAGE or --video FRAME ...")
    out = check_result_file(out, [*image_paths, *frame_paths, package], force, ".npz", _earlier_result)
    with unpack.opened(package) as folder:
        manifest = read_manifest(folder)
        # The path for the images' sizes as their headers give them, its session opening in the background while
        # transformers, the processor and the images load; the processor's downsizing can change the path only past
        # its max_pixels, and then that path's session opens after.
        headers = tuple(images.header_pixels(p) for p in (*image_paths, *frame_paths))
        early, early_model = choose_model(folder, manifest, engine, variant, path_choice.Largest.of(headers))
        with SessionOpening(at_once(early.engine, image_paths, frame_paths), early_model, threads,
                            warm_feeds(manifest)) as opening:
            result = _embed(folder, manifest, opening, image_paths, frame_paths, engine, variant, max_image_pixels)
    with staged_file(out) as tmp:
        np.savez(tmp, **result)
    return result


def _embed(folder: Path, manifest: dict, opening: SessionOpening, image_paths: list[Path], frame_paths: list[Path],
           engine: Engine, variant: str | None, max_image_pixels: int | None) -> dict[str, np.ndarray]:
    """`embed` inside the unpacked package, its session opening: load, choose, preprocess, run; the npz content."""
    family_name = manifest["family"]
    processing = family(family_name).processing
    processor_pixels = int(processing.max_pixels(folder))  # it downsizes any larger image to this
    budget = images.pixel_budget(processor_pixels, max_image_pixels)
    what = f"{len(image_paths)} image(s)" + (f" and a {len(frame_paths)}-frame video" if frame_paths else "")
    with step(f"load {what}", tag=TAG):
        loaded = (list(zip(image_paths, load_images(image_paths, max_pixels=budget))),
                  list(zip(frame_paths, load_images(frame_paths, "video frames", budget))))
    each = tuple(min(rgb.shape[0] * rgb.shape[1], processor_pixels) for _, rgb in (*loaded[0], *loaded[1]))
    choice, model = choose_model(folder, manifest, engine, variant, path_choice.Largest.of(each))
    engine = at_once(choice.engine, image_paths, frame_paths)
    say(choice.line(), TAG)
    with step(f"preprocess {what}", tag=TAG):
        packs = (entry_packs(processing.embed_pack, folder, *loaded) if engine.one_entry_per_run
                 else [processing.embed_pack(folder, *loaded)])
    with step("wait for the model's session", tag=TAG):  # opening since the start (OpenVINO: compiling)
        sess = opening.session(engine, model)
    names = [name for pack in packs for name in pack.names]
    with step(f"run {model.relative_to(folder)} on {len(names)} entries "
              f"({sum(sum(pack.tokens) for pack in packs)} tokens, {engine.describe()}"
              f"{', one entry per run' if len(packs) > 1 else ''})", tag=TAG):
        result = {"entries": np.array(names)}
        feeds = [cast_feeds(sess, pack.feeds, model.relative_to(folder), family_name) for pack in packs]
        for pack, outputs in zip(packs, session.run_each(sess, feeds)):
            result.update({k: v for k, v in split(outputs, pack).items() if k != "entries"})
    if getattr(sess, "most_at_once", 1) > 1:
        say(f"the entries ran {sess.most_at_once} at a time (OpenVINO's streams)", TAG)
    return result


def warm_feeds(manifest: dict) -> dict[str, np.ndarray] | None:
    """Inputs of one image as the package's first smoke record states them (`manifest["smoke"]`: shapes and
    integer values, the float inputs zeros), or None when it states none: what the session opening compiles for
    while Python loads (`runtime.session_opening`)."""
    smoke = manifest.get("smoke")
    record = smoke[0] if isinstance(smoke, list) and smoke and isinstance(smoke[0], dict) else {}
    shapes, values = record.get("inputs"), record.get("values") or {}
    if not isinstance(shapes, dict) or not isinstance(values, dict):
        return None
    try:
        return {name: (np.asarray(values[name], np.int64).reshape(shape) if name in values
                       else np.zeros(shape, np.float32)) for name, shape in shapes.items()}
    except (TypeError, ValueError):  # a garbled record: nothing to warm with
        return None


def at_once(engine: Engine, image_paths: list[Path], frame_paths: list[Path]) -> Engine:
    """`engine` told how many entries a call runs (each image, and the video): on an engine that runs each entry
    alone (OpenVINO) they run at the same time on its streams."""
    entries = len(image_paths) + bool(frame_paths)
    return replace(engine, at_once=entries) if engine.one_entry_per_run else engine


def add_arguments(parser) -> None:
    parser.add_argument("images", nargs="*", metavar="IMAGE", help="image files or folders of images")
    parser.add_argument("--package", type=Path, required=True, help="dist/NAME or dist/NAME.tar.gz")
    path_choice.add_arguments(parser)
    parser.add_argument("--video", nargs="+", default=[], metavar="FRAME",
                        help="one video: its frame files in order, or a folder of frames (Qwen3-VL)")
    parser.add_argument("--out", type=Path, required=True, help="FILE.npz")
    parser.add_argument("--threads", type=int, help="intra-op threads (default: all cores)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing OUT that another command of this tool wrote (never a file it did not)")
    add_clobber_argument(parser)
    images.add_budget_argument(parser)
    engines.add_arguments(parser, also=("qnn",),
                          also_help=", or qnn: the package's static buckets on Qualcomm's NPU (QNN EP, the npu "
                                    "extra; --variant qdq by default, or fp16; docs/npu.md)")
    npu.Htp.add_arguments(parser, cache=True)


FACTS = ("source", "grid_thw", "image_size", "num_crops", "bucket")


def describe(result: dict[str, np.ndarray], entry: str) -> str:
    """One line per entry: its file(s), its grid or HD size, and the shapes of its outputs."""
    sources = [str(s) for s in result[f"{entry}.source"]]
    source = sources[0] if len(sources) == 1 else f"{len(sources)} frames {sources[0]} .. {Path(sources[-1]).name}"
    layout = buckets.layout_text({k: result[f"{entry}.{k}"] for k in FACTS if f"{entry}.{k}" in result})
    if f"{entry}.bucket" in result:  # --engine qnn (runtime/npu_embed.py): the static bucket it ran at
        layout += ", bucket {}x{}".format(*result[f"{entry}.bucket"].tolist())
    outputs = [k.split(".", 1)[1] for k in result if k.startswith(f"{entry}.") and k.split(".", 1)[1] not in FACTS]
    shapes = ", ".join(f"{name} {list(result[f'{entry}.{name}'].shape)}" for name in outputs)
    return f"{entry}: {source} ({layout}) -> {shapes}"


def run(args) -> int:
    """The `embed` subcommand on a CPU engine (`--engine qnn`: runtime/npu_embed.py's `run`, which the command line
    picks): print one line per entry, then what was written."""
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    result = embed(args.images, args.video, args.package, args.variant, args.out, args.threads, args.force,
                   engines.from_args(args), args.max_image_pixels)
    return report(args, result)


def report(args, result: dict) -> int:
    """Print one line per entry of an embed `result`, then what was written; 0."""
    entries = [str(e) for e in result["entries"]]
    for entry in entries:
        print(describe(result, entry))
    print(f"wrote {args.out}: {len(entries)} {'entry' if len(entries) == 1 else 'entries'}")
    return 0
