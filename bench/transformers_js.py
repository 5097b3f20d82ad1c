"""`python -m bench.transformers_js --package dist/NAME`: transformers.js on a release package, against Python.

A transformers.js user embeds a photo with the library's own image processor (`AutoImageProcessor` on the
package folder) and the package's `onnx/vision_encoder*.onnx`, run by the onnxruntime-node that transformers.js
installs (`bench/node/embed.mjs`; the library's model classes load the vision encoder only together with decoder
files, which a vision package does not have). The same files go through `python -m runtime embed` (transformers'
Python processor, onnxruntime). Per photo and variant: grids, the pixel_values difference (the libraries resize
differently), and the features' min per-token cosine and max abs difference, every output.

The Node side is installed from `bench/node/package-lock.json` (transformers.js 4.3.1) with
`npm ci --ignore-scripts`: onnxruntime-node's post-install step downloads from a host outside the package
registry, and its CPU binary ships inside the package anyway. Writes bench/results/transformers-js.{json,md}.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from PIL import Image

from core import parity
from core.errors import Parser, UsageError, main_wrapper
from core.machine import machine
from core.progress import say

NODE_DIR = Path(__file__).resolve().parent / "node"
RESULTS = Path(__file__).resolve().parent / "results"
NODE_FILES = ("package.json", "package-lock.json", "embed.mjs", "example.mjs")
#: The photos of `runtime.sample_photos` (several sizes, one grayscale) plus astronaut at 300 x 220 (grid 1x14x20).
EXTRA = {"astronaut_300x220": ("astronaut", (300, 220))}


def node_missing() -> str | None:
    """Why the Node side cannot run here (None when node and npm are on PATH)."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    return f"{' and '.join(missing)} not on PATH (Node 20 with npm runs transformers.js)" if missing else None


def install(folder: Path) -> Path:
    """`npm ci --ignore-scripts` of bench/node into `folder` (pinned by its lockfile); returns `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in NODE_FILES:
        shutil.copyfile(NODE_DIR / name, folder / name)
    done = subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"], cwd=folder,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise UsageError(f"npm ci in {folder} failed: {(done.stderr or done.stdout).strip().splitlines()[-1]}")
    return folder


def write_photos(folder: Path) -> dict[str, Path]:
    """{name: PNG} of the sample photos and EXTRA, written to `folder`."""
    from runtime import sample_photos

    sample_photos.write(folder / "photos")
    found = {p.stem: p for p in sorted((folder / "photos").glob("*.png"))}
    for name, (source, size) in EXTRA.items():
        path = folder / f"{name}.png"
        Image.open(found[source]).convert("RGB").resize(size, Image.BICUBIC).save(path)
        found[name] = path
    return found


def run_node(node: Path, package: Path, encoder: str, calls: list[list[Path]], out: Path) -> list[dict]:
    """embed.mjs on `calls` (lists of images, one encoder run each); records with the arrays read back."""
    out.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["node", str(node / "embed.mjs"), str(package.resolve()), encoder, str(out),
                           *[",".join(str(p.resolve()) for p in call) for call in calls]],
                          cwd=node, capture_output=True, text=True, check=False)
    if done.returncode:
        raise UsageError(f"transformers.js run failed: {done.stderr.strip().splitlines()[-1] if done.stderr else done.returncode}")
    records = json.loads(done.stdout.strip().splitlines()[-1])
    for k, record in enumerate(records):
        record["pixels"] = np.fromfile(out / f"call_{k}.pixel_values.bin", np.float32).reshape(record["pixel_values"])
        record["arrays"] = {name: np.fromfile(out / f"call_{k}.{name}.bin", np.float32).reshape(shape)
                            for name, shape in record["outputs"].items()}
    return records


def run_python(package: Path, variant: str, call: list[Path], out: Path) -> dict:
    """`python -m runtime embed` of one call's images: {grid_thw: [[t, h, w]...], outputs: {name: rows of all
    entries, in call order}} and the processor's pixel_values (transformers' Python processor)."""
    from runtime import __main__ as runtime_cli

    npz = out / "python.npz"
    code = runtime_cli.main(["embed", *map(str, call), "--package", str(package), "--variant", variant,
                             "--out", str(npz), "--force", "--threads", "1"])
    if code:
        raise UsageError(f"python -m runtime embed exited {code}")
    with np.load(npz) as data:
        entries = list(data["entries"])
        names = sorted({k.split(".", 1)[1] for k in data.files if "." in k and k.split(".", 1)[1] != "grid_thw"
                        and k.split(".", 1)[0] in entries and not k.endswith((".path", ".source"))
                        and data[k].dtype == np.float32 and data[k].ndim == 2})
        grids = [data[f"{e}.grid_thw"].reshape(-1).tolist() for e in entries]
        outputs = {n: np.concatenate([data[f"{e}.{n}"] for e in entries]) for n in names}
    return {"grid_thw": grids, "outputs": outputs, "pixels": python_pixels(package, call)}


def python_pixels(package: Path, call: list[Path]) -> np.ndarray:
    """pixel_values of transformers' Python processor for the call's images, one at a time, concatenated."""
    from transformers import AutoImageProcessor

    processor = AutoImageProcessor.from_pretrained(str(package))
    return np.concatenate([processor(images=[Image.open(p)], return_tensors="np")["pixel_values"] for p in call])


def compare(package: Path, variants: dict[str, str], calls: dict[str, list[Path]], work: Path,
            node: Path) -> list[dict]:
    """One record per (variant, call): grids of both, pixel and feature differences. `variants`: {variant:
    encoder file in PACKAGE/onnx}."""
    records = []
    for variant, encoder in variants.items():
        say(f"transformers.js: {variant} ({encoder}) on {len(calls)} call(s)")
        node_runs = run_node(node, package, encoder, list(calls.values()), work / f"node-{variant}")
        for (label, call), js in zip(calls.items(), node_runs):
            py = run_python(package, variant, call, work)
            same_grid = js["grid_thw"] == py["grid_thw"]
            record = {"variant": variant, "call": label, "images": [p.name for p in call], "grid_thw": js["grid_thw"],
                      "python_grid_thw": py["grid_thw"], "same_grid": same_grid}
            if same_grid:
                pixels = np.abs(js["pixels"] - py["pixels"])
                record["pixel_max_abs"], record["pixel_mean_abs"] = float(pixels.max()), float(pixels.mean())
                record["outputs"] = {name: {"min_token_cosine": parity.min_token_cosine(js["arrays"][name], ref),
                                            "max_abs": float(np.abs(js["arrays"][name] - ref).max())}
                                     for name, ref in py["outputs"].items()}
                record["min_token_cosine"] = min(o["min_token_cosine"] for o in record["outputs"].values())
            records.append(record)
    return records


def default_calls(photos: dict[str, Path]) -> dict[str, list[Path]]:
    """Every photo alone, and one two-image call of two sizes."""
    calls = {name: [path] for name, path in photos.items()}
    calls["astronaut_300x220 + chelsea"] = [photos["astronaut_300x220"], photos["chelsea"]]
    return calls


def markdown(result: dict) -> str:
    m = result["machine"]
    about = (f"Produced by `python -m bench.transformers_js --package {result['package']}`, {result['created']}, "
             f"{m['cpu']}; transformers.js {result['transformers_js']} (bench/node/package-lock.json) with "
             "onnxruntime-node against `python -m runtime embed` (transformers' Python processor, onnxruntime). "
             "Cosine: the worst per-token cosine over every output; pixels: |pixel_values difference| of the two "
             "processors.")
    lines = [f"# transformers.js against Python: {result['package']}", "", about, "",
             "| variant | call | grid | same grid | pixels max | pixels mean | min per-token cosine | max abs diff |",
             "|---|---|---|:---:|---:|---:|---:|---:|"]
    for r in result["records"]:
        worst_abs = max((o["max_abs"] for o in r.get("outputs", {}).values()), default=float("nan"))
        same = "yes" if r["same_grid"] else f"**no** (Python {r['python_grid_thw']})"
        lines.append(f"| {r['variant']} | {r['call']} | {r['grid_thw']} | {same} | "
                     f"{r.get('pixel_max_abs', float('nan')):.4f} | {r.get('pixel_mean_abs', float('nan')):.5f} | "
                     f"{r.get('min_token_cosine', float('nan')):.5f} | {worst_abs:.4f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m bench.transformers_js", description=__doc__.splitlines()[0])
    parser.add_argument("--package", type=Path, required=True, help="a release package folder (dist/NAME)")
    parser.add_argument("--variants", nargs="+", default=["fp32", "int8"], help="variants to run (default fp32 int8)")
    parser.add_argument("--results", type=Path, default=RESULTS, help="folder for transformers-js.{json,md}")

    def body() -> int:
        args = parser.parse_args(argv)
        if (why := node_missing()):
            raise UsageError(why)
        manifest = json.loads((args.package / "manifest.json").read_text())
        files = {v["name"]: Path(v["file"]).name for v in manifest["variants"]}
        unknown = [v for v in args.variants if v not in files]
        if unknown:
            raise UsageError(f"{args.package} has no variant {', '.join(unknown)}; it has {', '.join(files)}")
        with tempfile.TemporaryDirectory(prefix="transformers-js-") as tmp:
            work = Path(tmp)
            node = install(work / "node")
            records = compare(args.package, {v: files[v] for v in args.variants},
                              default_calls(write_photos(work)), work, node)
        version = json.loads((NODE_DIR / "package.json").read_text())["dependencies"]["@huggingface/transformers"]
        import time
        result = {"package": str(args.package), "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": machine(),
                  "transformers_js": version, "records": records}
        args.results.mkdir(parents=True, exist_ok=True)
        (args.results / "transformers-js.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.results / "transformers-js.md").write_text(markdown(result))
        say(f"wrote {args.results}/transformers-js.json and .md")
        return 0

    return main_wrapper(body)


if __name__ == "__main__":
    sys.exit(main())
