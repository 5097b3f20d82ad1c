"""`python -m bench.transformers_js --package dist/NAME`: transformers.js on a release package, against Python.

Per photo and variant (tools.transformers_js's drivers: transformers.js 4.3.1 in Node from tools/node's lockfile, and
`python -m runtime embed`): grids, the pixel_values difference (the libraries resize differently), and the
features' min per-token cosine and max abs difference, every output. Writes bench/results/transformers-js.{json,md}.
"""

import json
import tempfile
import time
from pathlib import Path

from tools.transformers_js import NODE_DIR, compare, default_calls, install, node_missing, write_photos
from vlm_vision_onnx.core.errors import Parser, UsageError, main_wrapper
from vlm_vision_onnx.core.machine import machine
from vlm_vision_onnx.core.progress import say

RESULTS = Path(__file__).resolve().parent / "results"


def markdown(result: dict) -> str:
    m = result["machine"]
    about = (f"Produced by `python -m bench.transformers_js --package {result['package']}`, {result['created']}, "
             f"{m['cpu']}; transformers.js {result['transformers_js']} (tools/node/package-lock.json) with "
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
        result = {"package": str(args.package), "created": time.strftime("%Y-%m-%dT%H:%M:%S"), "machine": machine(),
                  "transformers_js": version, "records": records}
        args.results.mkdir(parents=True, exist_ok=True)
        (args.results / "transformers-js.json").write_text(json.dumps(result, indent=1) + "\n")
        (args.results / "transformers-js.md").write_text(markdown(result))
        say(f"wrote {args.results}/transformers-js.json and .md")
        return 0

    return main_wrapper(body)


if __name__ == "__main__":
    raise SystemExit(main())
