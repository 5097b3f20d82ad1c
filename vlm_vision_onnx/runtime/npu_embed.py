"""`python -m runtime embed IMAGE ... --package DIR --engine qnn`: embeddings on Qualcomm's NPU from a package's
static buckets (docs/npu.md "In a package").

Each image goes to the bucket that fits it best (`runtime.buckets.choose`: the closest aspect ratio, then the
closest pixel count, then the larger), is resized — not cropped — to exactly the bucket's width and height with the
family's static preprocessing (`StaticForm.feeds`: families/<family>/static_inputs.py, PIL bicubic, then the
processor's own steps), and runs alone through that bucket's file on the QNN EP's HTP backend with CPU fallback disabled
(`runtime.npu.open_compiled`: compiled once, then loaded from the context cache, runtime/npu_context_cache.py):
the QDQ file by default (uint16 activations, int8 weights), `--variant fp16` the fp16
file, `--variant fp32` the fp32 file (both at HTP fp16 precision). One session per bucket used.

FILE.npz has the layout of `runtime embed` (runtime/embed.py): `entries`, and per entry `ENTRY.source`, the
bucket's layout facts as the dynamic engines write them (a Qwen bucket's `ENTRY.grid_thw`, a Phi-4 bucket's
`ENTRY.image_size` and `ENTRY.num_crops`), every output, plus `ENTRY.bucket` int64 [2]: the width and height it
ran at. Images only (a video bucket is not run here). Without onnxruntime-qnn: one `error:` line with
the install hint, exit 2.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from vlm_vision_onnx.core import onnx_io, session
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.progress import say, step
from vlm_vision_onnx.core.staging import check_result_file, staged_file
from vlm_vision_onnx.families import family
from vlm_vision_onnx.runtime import buckets, images, npu, unpack
from vlm_vision_onnx.runtime import embed as embed_mod

TAG = "embed"
ENGINE = "qnn"
DEFAULT_VARIANT = "qdq"
#: The precision the HTP runs each static file at (runtime.npu.FLOORS's keys).
PRECISION = {"qdq": "qdq", "fp16": "fp16", "fp32": "fp16"}


def _usable(found: list[buckets.Bucket], variant: str, package: Path) -> list[buckets.Bucket]:
    """The image buckets that ship `variant`; UsageError naming what the package has when none does."""
    image_buckets = [b for b in found if not b.frames]
    if not image_buckets:
        raise UsageError(f"package {package} has no static image buckets ({buckets.KEY} in its manifest): build "
                         "them with make export STATIC=WxH[,WxH...], then make package (docs/npu.md)")
    usable = [b for b in image_buckets if variant in b.files]
    if not usable:
        shipped = ", ".join(f"{b.name}: {'/'.join(b.files)}" for b in image_buckets)
        raise UsageError(f"package {package} has no static bucket with a {variant} file ({shipped}); give "
                         "--variant with one it has")
    return usable


def embed(image_args: list[str], package: Path, variant: str | None, out: Path, htp: npu.Htp, force=False,
          max_image_pixels: int | None = None) -> dict[str, np.ndarray]:
    """Choose a bucket per image, run each on the HTP, write OUT.npz (module docstring); returns what was written."""
    variant = variant or DEFAULT_VARIANT
    if variant not in PRECISION:
        raise UsageError(f"--engine {ENGINE} runs a static bucket's {', '.join(PRECISION)} file, not --variant "
                         f"{variant} (default {DEFAULT_VARIANT})")
    image_paths = images.expand(image_args)
    if not image_paths:
        raise UsageError("give at least one IMAGE")
    out = check_result_file(out, [*image_paths, package], force, ".npz", embed_mod._earlier_result)
    npu.devices()  # without onnxruntime-qnn: its install hint, before any work
    precision = PRECISION[variant]
    with unpack.opened(package) as folder:
        manifest = embed_mod.read_manifest(folder)
        family_name = manifest["family"]
        usable = _usable(buckets.read(manifest), variant, package)
        processing = family(family_name).processing
        budget = images.pixel_budget(processing.max_pixels(folder), max_image_pixels)
        loaded = embed_mod.load_images(image_paths, max_pixels=budget)
        chosen = [buckets.choose(rgb.shape[1], rgb.shape[0], [(b.width, b.height) for b in usable]) for rgb in loaded]
        names = [f"image_{i}" for i in range(len(loaded))]
        used = sorted(set(chosen))
        say(f"path: {ENGINE} (HTP soc {htp.soc_model}, v{htp.htp_arch}, {precision}), variant {variant}; bucket "
            + "; ".join(f"{usable[i].name} for {', '.join(n for n, c in zip(names, chosen) if c == i)}" for i in used)
            + " (closest aspect ratio, then pixel count; resized to the bucket)", TAG)
        result: dict[str, np.ndarray] = {"entries": np.array(names)}
        for index in used:
            bucket = usable[index]
            model = unpack.inside(folder, bucket.files[variant], f"manifest.json's {buckets.KEY}")
            relative = model.relative_to(folder)
            metadata = onnx_io.metadata(model)
            if metadata.get("static_size") != bucket.name or metadata.get("family") != family_name:
                raise UsageError(f"{relative} is the static {metadata.get('family')} model of "
                                 f"{metadata.get('static_size')}, not the package's bucket {bucket.name}: run "
                                 f"python -m runtime verify {package}")
            with step(f"open {relative} on the HTP", tag=TAG):
                sess, how = npu.open_compiled(model, htp, precision)
            say(f"{relative}: {how}", TAG)
            static_feeds = family(family_name).static.feeds
            for name, path, rgb, at in zip(names, image_paths, loaded, chosen):
                if at != index:
                    continue
                feeds = embed_mod.cast_feeds(sess, static_feeds(rgb, metadata), relative,
                                             family_name)
                with step(f"run {name} ({rgb.shape[1]}x{rgb.shape[0]}) at {bucket.name} on the HTP", tag=TAG):
                    outputs = session.run(sess, feeds)
                result[f"{name}.source"] = np.array([str(path)])
                result.update({f"{name}.{k}": np.array(v, dtype=np.int64) for k, v in bucket.layout.items()})
                result[f"{name}.bucket"] = np.array([bucket.width, bucket.height], dtype=np.int64)
                result.update({f"{name}.{k}": v for k, v in outputs.items()})
            del sess
    result = {"entries": result["entries"], **{k: result[k] for n in names for k in result if k.startswith(f"{n}.")}}
    with staged_file(out) as tmp:
        np.savez(tmp, **result)
    return result


def from_args(args) -> dict[str, np.ndarray]:
    """`runtime embed --engine qnn`: the options the other engines take and this one does not are refused."""
    if args.video:
        raise UsageError(f"--engine {ENGINE} runs images only (a package's static buckets are image sizes): drop "
                         "--video, or run it with another --engine")
    if args.precision is not None:
        raise UsageError(f"--precision is OpenVINO's; with --engine {ENGINE} give --variant qdq (default) or fp16")
    if args.threads is not None:
        raise UsageError(f"--threads is for the CPU engines; --engine {ENGINE} runs on the NPU")
    return embed(args.images, args.package, args.variant, args.out, npu.Htp.from_args(args), args.force,
                 args.max_image_pixels)


def run(args) -> int:
    """`runtime embed --engine qnn` (the command line picks it over runtime/embed.py's `run`): embed, then one line
    per entry and what was written, as the other engines print them."""
    return embed_mod.report(args, from_args(args))
