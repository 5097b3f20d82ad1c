"""`runtime verify`'s checks of a package's static buckets (runtime/buckets.py; none in most packages).

Per bucket and per file (fp32, qdq, fp16), after the checksums (steps 1-2 of runtime/verify.py):
- the manifest records the file(s) and their sizes add up;
- the model's metadata names the manifest's family and model, the bucket's size (`static_size`) and layout
  (`StaticForm.layout` of its metadata: the grid of `static_grid_thw`, Phi-4's crops of `static_image_sizes`); its
  inputs and outputs are the bucket's (every dim numeric, first output `image_features`);
- config.json lists the buckets as the manifest does (`runtime.buckets.config_entries`);
- the file runs in ONNX Runtime (CPU EP) at its own size only — pixel_values of a random RGB image resized to the
  bucket (the family's `StaticForm.feeds`; random values for a video bucket), no grid_thw — with the outputs'
  recorded shapes and finite values. The dynamic smoke sizes are not run on it: it takes one size.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from vlm_vision_onnx.core import session
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families import family
from vlm_vision_onnx.families.base import FEATURES
from vlm_vision_onnx.runtime import buckets, package_records

SEED = 0


def _input_feeds(bucket: buckets.Bucket, record: dict, meta: dict[str, str], fail) -> dict[str, np.ndarray]:
    """{pixel_values} at the bucket's size (the only input of a static model)."""
    from vlm_vision_onnx.families import of_model

    dims = {i["name"]: i["dims"] for i in record["inputs"]}
    if list(dims) != ["pixel_values"] or not all(isinstance(d, int) for d in dims["pixel_values"]):
        fail(buckets.KEY, f"bucket {bucket.name} records inputs {record['inputs']}, not one pixel_values of "
                          "numeric dims (a static model's only input)")
    rng = np.random.default_rng(SEED)
    if bucket.frames:
        return {"pixel_values": rng.uniform(-1, 1, dims["pixel_values"]).astype(np.float32)}
    rgb = rng.integers(0, 256, (bucket.height, bucket.width, 3), dtype=np.uint8)
    return of_model(meta, bucket.name).static.feeds(rgb, meta)


def _check_file(manifest: dict, bucket: buckets.Bucket, record: dict, variant: dict, folder: Path, fail) -> dict:
    """One file's records and model against the manifest; returns its metadata."""
    file = variant["file"]
    listed = variant.get("files") if isinstance(variant.get("files"), list) else []
    what = f"static bucket {bucket.name} variant {variant['name']!r}"
    package_records.check_file_records(manifest, what, file, listed, variant.get("size"))
    proto, meta = package_records.read_package_model(manifest, folder, file)
    try:
        layout = family(manifest["family"]).static.layout(meta)
    except (UsageError, KeyError, ValueError, TypeError):
        layout = None
    if meta.get("static_size") != bucket.name or layout != bucket.layout:
        fail(file, f"is the static model of {meta.get('static_size') or 'no size'} ({layout}), but manifest.json "
                   f"lists it for bucket {bucket.name} ({bucket.layout}): a file swapped or the manifest edited")
    for what, values in (("inputs", proto.graph.input), ("outputs", proto.graph.output)):
        if package_records.io_records(values) != record[what]:
            fail(file, f"{what} {package_records.io_records(values)} differ from manifest.json's bucket {bucket.name} "
                       f"{record[what]}")
    if not record["outputs"] or record["outputs"][0]["name"] != FEATURES:
        fail(file, f"its first output is not {FEATURES!r}")
    return meta


def check(manifest: dict, folder: Path, threads: int | None, fail) -> list[str]:
    """Every static bucket of the package (module docstring); one line per bucket. `fail(file, reason)` raises."""
    try:
        found = buckets.read(manifest)
    except UsageError as err:
        fail("manifest.json", str(err).removeprefix("manifest.json's "))
    records = buckets.records(manifest)
    try:
        config = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError) as err:
        fail("config.json", f"is not readable JSON ({err})")
    expected = buckets.config_entries(manifest) if found else None
    if config.get(buckets.KEY) != expected:
        fail("config.json", f"{buckets.KEY} {config.get(buckets.KEY)} differ from manifest.json's buckets "
                            f"{expected}")
    lines = []
    for bucket, record in zip(found, records):
        for key in ("inputs", "outputs"):
            if not isinstance(record.get(key), list) or not all(isinstance(r, dict) and "name" in r and "dims" in r
                                                                for r in record[key]):
                fail("manifest.json", f"static bucket {bucket.name} lacks its {key} records")
        feeds, shapes = None, {o["name"]: o["dims"] for o in record["outputs"]}
        for variant in record["variants"]:
            meta = _check_file(manifest, bucket, record, variant, folder, fail)
            feeds = feeds or _input_feeds(bucket, record, meta, fail)
            file = variant["file"]
            try:
                sess = session.open_session(folder / file, threads)
            except UsageError as err:
                fail(file, f"ONNX Runtime cannot load it ({err})")
            package_records.check_run(sess, feeds, file, f"at its size {bucket.name}", shapes)
        lines.append(f"static bucket {bucket.name} ({', '.join(v['name'] for v in record['variants'])}): runs at "
                     "its size on the CPU EP; output shapes as recorded")
    return lines
