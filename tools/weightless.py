"""Ship an ONNX model's variants without their weights, and rebuild them bit for bit from a seed elsewhere.

Why: the device machine (bench.gpu_webgpu) takes at most 64 MiB of files per call and has no way to fetch a
model; Qwen3-VL-2B's fp32 vision encoder is 1.55 GiB, its fp16 0.8 GiB, its q4f16 0.35 GiB. The weights of a
random-weight export carry no information beyond their distribution, so they travel as a seed and statistics.

`python -m tools.weightless strip FP32 OUT --variant NAME=MODEL ... [--seed S] [--min-elements N]`:
- the *sources*: FP32's float32 initializers of at least N elements (default MIN_ELEMENTS: the MatMul weights,
  the patch embedding, the position table). Each is replaced by fresh pseudo-normal values with its own mean and
  standard deviation (`pseudo_normal`: PCG64's raw draws and exact float64 arithmetic, so every machine and numpy
  computes the same bits);
- in each variant, every initializer derived from a source, recognised by name and checked bit for bit against
  the variant as built: `copy` (the same float32 tensor), `float16` (its float16 cast), `nbits` (a MatMulNBits
  node's packed weight `<source>_Q<bits>`, `_scales` or `_zero_points`, computed by ONNX Runtime's own block
  quantizer, `DefaultWeightOnlyQuantizer.qbits_block_quant`, at the node's bits and block size; scales cast to
  the initializer's type). A large initializer derived otherwise is refused (UsageError);
- OUT/NAME.onnx (the variant with those initializers removed; everything else inline) and OUT/recipe.json (the
  sources' shapes and statistics, each removed initializer's derivation and the sha256 of its reseeded bytes).
`python -m tools.weightless rebuild OUT DEST [--variant NAME ...]`: DEST/NAME/model.onnx (+ model.onnx.data) for
each variant, every regenerated initializer checked against its sha256 (a mismatch is an error: the rebuild is
then not the model that was stripped).

OUT and DEST follow the stages' rules (core.staging): written beside, published only when every variant is done,
an existing folder replaced only when this tool wrote it (`--force`, `--clobber` as for a stage); each holds a
report.json that lists its files.

The rebuilt variants are the stripped ones with reseeded weights: same graph, same quantization recipe and float16
plan, same weight statistics; their accuracy is measured again wherever they run, never taken from the stages'
reports.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

from vlm_vision_onnx.core import staging
from vlm_vision_onnx.core.errors import UsageError

#: Float32 initializers with at least this many elements are sources (reseeded and regenerated).
MIN_ELEMENTS = 65536
#: Uniform 32-bit halves summed per value (Irwin-Hall): 8 gives tails to 4.9 sigma, kurtosis -0.15.
UNIFORMS = 8
_CHUNK = 1 << 22
_SCALE = math.sqrt(UNIFORMS / 12.0)
_NBITS_SUFFIXES = {1: "_Q{bits}", 2: "_scales", 3: "_zero_points"}
_PART = {1: "B", 2: "scales", 3: "zero_points"}
#: The `stage` of the folders `strip` and `rebuild` write (core.staging: what they may replace).
STRIP_STAGE, REBUILD_STAGE = "weightless-strip", "weightless-rebuild"


def pseudo_normal(key: str, count: int) -> np.ndarray:
    """[count] float64, mean 0 and standard deviation 1, the same bits on every machine: the sum of UNIFORMS
    uniform 32-bit integers from PCG64 (seeded by sha256 of `key`), exact in integers and float64, centred and
    divided by its standard deviation (one correctly rounded division)."""
    seed = int.from_bytes(hashlib.sha256(key.encode()).digest()[:16], "little")
    bits = np.random.PCG64(seed)
    out = np.empty(count, np.float64)
    draws = UNIFORMS // 2
    for start in range(0, count, _CHUNK):
        n = min(_CHUNK, count - start)
        halves = bits.random_raw(n * draws).view(np.uint32).reshape(n, UNIFORMS)
        total = halves.sum(axis=1, dtype=np.uint64).astype(np.float64)
        total *= 2.0 ** -32
        total -= UNIFORMS / 2
        total /= _SCALE
        out[start:start + n] = total
    return out


def source_values(name: str, stats: dict, seed: int) -> np.ndarray:
    """The reseeded float32 tensor of source `name` (stats: shape, mean, std)."""
    z = pseudo_normal(f"{seed}:{name}", int(np.prod(stats["shape"], dtype=np.int64)))
    return (z * stats["std"] + stats["mean"]).astype(np.float32).reshape(stats["shape"])


def nbits_parts(weight: np.ndarray, bits: int, block_size: int, symmetric: bool) -> dict[str, np.ndarray]:
    """{"B": packed [N, k_blocks, blob] uint8, "scales": [N, k_blocks] float32, "zero_points": [N, ...] uint8} of a
    MatMul weight [K, N], by ONNX Runtime's block quantizer (what MatMulNBitsQuantizer writes)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import (
        DefaultWeightOnlyQuantConfig,
        DefaultWeightOnlyQuantizer,
    )

    config = DefaultWeightOnlyQuantConfig(block_size=block_size, is_symmetric=symmetric, bits=bits)
    packed, scales, zero_points = DefaultWeightOnlyQuantizer(config).qbits_block_quant(np.ascontiguousarray(weight))
    return {"B": packed, "scales": scales, "zero_points": zero_points}


def derive(entry: dict, weight: np.ndarray, cache: dict) -> np.ndarray:
    """The initializer `entry` describes, computed from its source's float32 `weight` (cache: nbits parts by
    source, so B, scales and zero points quantize once)."""
    op = entry["op"]
    if op == "copy":
        value = weight
    elif op == "float16":
        value = weight.astype(np.float16)
    elif op == "nbits":
        key = (entry["source"], entry["bits"], entry["block_size"], entry["symmetric"])
        if key not in cache:
            cache.clear()  # one source at a time: the parts of a 4096 x 4096 weight are not kept past it
            cache[key] = nbits_parts(weight, entry["bits"], entry["block_size"], entry["symmetric"])
        value = cache[key][entry["part"]]
    else:
        raise UsageError(f"recipe: unknown derivation {op!r} of {entry['name']}")
    dtype = onnx.helper.tensor_dtype_to_np_dtype(entry["dtype"])
    value = value.astype(dtype, copy=False)
    if value.size != int(np.prod(entry["dims"], dtype=np.int64)):
        raise UsageError(f"recipe: {entry['name']} derives {value.size} values for dims {entry['dims']}")
    return np.ascontiguousarray(value).reshape(entry["dims"])


def reseeded(names: list[str], stats: dict, seed: int) -> dict[str, np.ndarray]:
    """{source: its reseeded tensor} for `names`, one thread per core (numpy releases the GIL)."""
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        return dict(zip(names, pool.map(lambda n: source_values(n, stats[n], seed), names)))


def derived(entries: list[dict], sources: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Each entry's initializer (in order), computed from `sources`; the entries of one source in one task."""
    groups: dict[str, list[int]] = {}
    for i, entry in enumerate(entries):
        groups.setdefault(entry["source"], []).append(i)

    def one(indices: list[int]) -> list[tuple[int, np.ndarray]]:
        cache: dict = {}
        return [(i, derive(entries[i], sources[entries[i]["source"]], cache)) for i in indices]

    values: list = [None] * len(entries)
    with ThreadPoolExecutor(os.cpu_count()) as pool:
        for part in pool.map(one, groups.values()):
            for i, value in part:
                values[i] = value
    return values


def _digest(value: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(value).tobytes()).hexdigest()


def _nbits_uses(graph: onnx.GraphProto) -> dict[str, dict]:
    """{initializer name: its derivation} for the inputs 1-3 of every MatMulNBits node of `graph`."""
    uses = {}
    for node in graph.node:
        if node.op_type != "MatMulNBits":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        bits, block_size = int(attrs.get("bits", 4)), int(attrs["block_size"])
        inputs = list(node.input) + [""] * 4
        suffix = _NBITS_SUFFIXES[1].format(bits=bits)
        if not inputs[1].endswith(suffix):
            continue
        source = inputs[1][: -len(suffix)]
        for index in (1, 2, 3):
            if inputs[index]:
                uses[inputs[index]] = {"op": "nbits", "source": source, "part": _PART[index], "bits": bits,
                                       "block_size": block_size, "symmetric": not inputs[3]}
    return uses


def _recipe(model: onnx.ModelProto, sources: dict[str, np.ndarray], label: str, min_elements: int) -> list[dict]:
    """Each initializer of `model` derived from a source: its derivation, checked against the model's bytes."""
    uses = _nbits_uses(model.graph)
    entries, cache = [], {}
    for init in model.graph.initializer:
        value = numpy_helper.to_array(init)
        entry = None
        if init.name in uses and uses[init.name]["source"] in sources:
            entry = uses[init.name]
        elif init.name in sources:
            entry = {"op": "copy" if init.data_type == onnx.TensorProto.FLOAT else "float16", "source": init.name}
        if entry is None:
            if value.size >= min_elements:
                raise UsageError(f"{label}: initializer {init.name} {list(value.shape)} is large and derives from no "
                                 "source by a known rule (copy, float16, MatMulNBits): cannot strip it")
            continue
        entry = {"name": init.name, "dtype": init.data_type, "dims": list(init.dims), **entry}
        built = derive(entry, sources[entry["source"]], cache)
        if built.dtype != value.dtype or not np.array_equal(built.view(np.uint8), value.view(np.uint8)):
            raise UsageError(f"{label}: {init.name} is not what its derivation ({entry['op']} of {entry['source']}) "
                             "gives from the fp32 weights: the recipe would not rebuild this model")
        entries.append(entry)
    return entries


def strip(fp32: Path, out: Path, variants: dict[str, Path], seed: int = 0, min_elements: int = MIN_ELEMENTS,
          force=False) -> dict:
    """The module docstring's `strip`, staged (core.staging; `force`: False, True or staging.CLOBBER): OUT/NAME.onnx
    per variant, OUT/recipe.json and OUT/report.json; returns the recipe."""
    with staging.staged_folder(out, STRIP_STAGE, [fp32, *variants.values()], force) as folder:
        recipe = strip_into(fp32, folder, variants, seed, min_elements)
        write_report(folder, STRIP_STAGE, fp32=str(fp32), variants=sorted(variants))
    return recipe


def strip_into(fp32: Path, out: Path, variants: dict[str, Path], seed: int = 0,
               min_elements: int = MIN_ELEMENTS) -> dict:
    """`strip`'s work into the existing folder `out` (a staged folder of the caller's): OUT/NAME.onnx per variant and
    OUT/recipe.json; returns the recipe."""
    base = onnx.load(str(fp32))
    sources = {i.name: numpy_helper.to_array(i) for i in base.graph.initializer
               if i.data_type == onnx.TensorProto.FLOAT and int(np.prod(i.dims, dtype=np.int64)) >= min_elements}
    stats = {n: {"shape": list(v.shape), "mean": float(v.mean(dtype=np.float64)),
                 "std": float(v.std(dtype=np.float64))} for n, v in sources.items()}
    del base
    recipe = {"format": 1, "seed": seed, "uniforms": UNIFORMS, "min_elements": min_elements, "sources": stats,
              "variants": {}}
    fresh = reseeded(list(stats), stats, seed)
    for name, path in variants.items():
        model = onnx.load(str(path))
        entries = _recipe(model, sources, f"{name} ({path})", min_elements)
        for entry, value in zip(entries, derived(entries, fresh)):
            entry["sha256"] = _digest(value)
        removed = {e["name"] for e in entries}
        kept = [i for i in model.graph.initializer if i.name not in removed]
        del model.graph.initializer[:]
        model.graph.initializer.extend(kept)
        onnx.save(model, str(out / f"{name}.onnx"))
        recipe["variants"][name] = {"graph": f"{name}.onnx", "from": str(path), "initializers": entries}
        print(f"{name}: {len(entries)} initializers derived from {len({e['source'] for e in entries})} sources, "
              f"checked bit for bit against {path}", file=sys.stderr)
    (out / "recipe.json").write_text(json.dumps(recipe, indent=1) + "\n")
    return recipe


def write_report(folder: Path, stage: str, **fields) -> None:
    """folder/report.json: the stage's name (core.staging lists the folder's files in it on publishing)."""
    (folder / staging.REPORT).write_text(json.dumps({"stage": stage, **fields}, indent=1) + "\n")


def rebuild(folder: Path, dest: Path, names: list[str] | None = None, force=False) -> dict[str, Path]:
    """The module docstring's `rebuild`, staged like `strip`: {variant: DEST/NAME/model.onnx}, each regenerated
    initializer checked; nothing appears in DEST unless every variant was rebuilt."""
    with staging.staged_folder(dest, REBUILD_STAGE, [folder], force) as staged:
        built = _rebuild_into(folder, staged, names)
        write_report(staged, REBUILD_STAGE, stripped=str(folder), variants=sorted(built))
    return {name: Path(os.path.abspath(dest)) / name / "model.onnx" for name in built}


def _rebuild_into(folder: Path, dest: Path, names: list[str] | None) -> dict[str, Path]:
    """`rebuild`'s work into the existing folder `dest`."""
    recipe = json.loads((folder / "recipe.json").read_text())
    seed, stats = recipe["seed"], recipe["sources"]
    if recipe.get("uniforms") != UNIFORMS:
        raise UsageError(f"{folder}/recipe.json was written with {recipe.get('uniforms')} uniforms per value, "
                         f"this code draws {UNIFORMS}")
    chosen = names or list(recipe["variants"])
    unknown = sorted(set(chosen) - set(recipe["variants"]))
    if unknown:
        raise UsageError(f"no variant {', '.join(unknown)} in {folder}/recipe.json")
    needed = sorted({e["source"] for name in chosen for e in recipe["variants"][name]["initializers"]})
    fresh, written = reseeded(needed, stats, seed), {}
    for name in chosen:
        variant = recipe["variants"][name]
        model = onnx.load(str(folder / variant["graph"]))
        for entry, value in zip(variant["initializers"], derived(variant["initializers"], fresh)):
            if _digest(value) != entry["sha256"]:
                raise UsageError(f"{name}: rebuilt {entry['name']} differs from the stripped one (sha256): this "
                                 "machine's numpy or ONNX Runtime quantizer computes other bits")
            model.graph.initializer.append(numpy_helper.from_array(value, entry["name"]))
        target = dest / name
        target.mkdir()
        onnx.save_model(model, str(target / "model.onnx"), save_as_external_data=True,
                        all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=1024)
        written[name] = target / "model.onnx"
        print(f"{name}: {len(variant['initializers'])} initializers rebuilt and checked",
              file=sys.stderr)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.weightless", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("strip")
    s.add_argument("fp32", type=Path)
    s.add_argument("out", type=Path)
    s.add_argument("--variant", action="append", default=[], metavar="NAME=MODEL", required=True)
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--min-elements", type=int, default=MIN_ELEMENTS)
    s.add_argument("--force", action="store_true", help="replace an OUT this tool wrote (any stage's)")
    staging.add_clobber_argument(s)
    r = sub.add_parser("rebuild")
    r.add_argument("folder", type=Path)
    r.add_argument("dest", type=Path)
    r.add_argument("--variant", action="append", default=[], metavar="NAME")
    r.add_argument("--force", action="store_true", help="replace a DEST this tool wrote (any stage's)")
    staging.add_clobber_argument(r)
    args = parser.parse_args(argv)
    try:
        if args.command == "strip":
            bad = [v for v in args.variant if "=" not in v or not v.split("=", 1)[0]]
            if bad:
                raise UsageError(f"--variant {bad[0]}: give NAME=MODEL")
            pairs = dict(v.split("=", 1) for v in args.variant)
            strip(args.fp32, args.out, {k: Path(v) for k, v in pairs.items()}, args.seed, args.min_elements,
                  args.force)
        else:
            rebuild(args.folder, args.dest, args.variant or None, args.force)
    except UsageError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
