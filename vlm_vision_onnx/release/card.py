"""The model card `README.md` of a release package, generated from its manifest alone.

Sections: what it is (family, model, weights, export path), variants (file, size, speed, accuracy
against fp32), inputs and outputs (dtypes, dims, what each symbol means), validation per stage, the
smoke shapes, how to run and verify it, versions, checksums.
"""

from __future__ import annotations

from vlm_vision_onnx.families import family
from vlm_vision_onnx.families.base import FEATURES
from vlm_vision_onnx.release.variants import VARIANTS
from vlm_vision_onnx.runtime import buckets
from vlm_vision_onnx.runtime.buckets import KEY
from vlm_vision_onnx.runtime.path_choice import describe_per_cpu


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f}"


def _num(value, digits: int = 4) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def _dims(dims: list) -> str:
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def _weights(manifest: dict) -> str:
    weights = manifest["weights"]
    if weights["source"] == "checkpoint":
        return (f"trained weights from the checkpoint `{weights['checkpoint']}` "
                f"({len(weights['files'])} safetensors file(s); sha256 in `manifest.json`)")
    return (f"**RANDOM weights** (seed {weights.get('seed')}) at the dimensions of `{manifest['model']}`: "
            "this package shows the export, it does not compute meaningful embeddings")


def _speed(manifest: dict, variant: dict) -> str:
    speed = manifest.get("speed", {}).get("variants", {}).get(variant["name"])
    return f"{speed['median_s']:.3f}" if speed else "–"


def _accuracy(variant: dict) -> tuple[str, str, str]:
    """(min per-token cosine, min cosine, max abs diff) against fp32, as text."""
    acc = variant.get("accuracy_vs_fp32")
    if acc is None:
        return "reference", "reference", "0"
    return _num(acc.get("min_token_cosine"), 5), _num(acc.get("min_cosine"), 5), _num(acc.get("max_abs"), 3)


def variants_table(manifest: dict) -> list[str]:
    lines = [("| variant | file | MiB | s per image | min per-token cosine vs fp32 | min cosine vs fp32 | "
             "max abs diff vs fp32 | quantization |"), "|---|---|---:|---:|---:|---:|---:|---|"]
    for v in manifest["variants"]:
        token_cosine, cosine, max_abs = _accuracy(v)
        quant = ", ".join(f"{k} {val}" for k, val in v.get("quantization", {}).items()) or "–"
        lines.append(f"| {v['name']} | `{v['file']}` | {_mib(v['size'])} | {_speed(manifest, v)} | {token_cosine} | "
                     f"{cosine} | {max_abs} | {quant} |")
    lines += ["", ("Accuracy: worst over every validation layout and output (`manifest.json`: `variants`); "
                  "min cosine is of each whole output, per-token of each row.")]
    speed = manifest.get("speed")
    if speed:
        lines += ["", (f"Speed: seconds per {speed['size']} image, median of {speed['reps']} runs, "
                      f"{speed['threads']} thread(s), on {speed['machine']} (`python -m release speed`).")]
    else:
        lines += ["", "Speed was not measured for this package (`python -m release speed BUILD` before packaging)."]
    lines += ["", ("`python -m runtime embed` with no engine or variant option runs the fastest path of this "
                   "package that keeps a min per-token cosine of 0.998 against fp32, per CPU (`--engine auto`, "
                   "vlm-vision-onnx's docs/runtimes.md): "
                   + describe_per_cpu(manifest) + ".")]
    return lines


def io_table(values: list[dict]) -> list[str]:
    lines = ["| name | dtype | dims |", "|---|---|---|"]
    lines += [f"| `{v['name']}` | {v['dtype']} | {_dims(v['dims'])} |" for v in values]
    return lines


def validation_lines(manifest: dict) -> list[str]:
    lines = ["| stage | reference | cases | passed | worst max abs diff | worst min cosine |",
             "|---|---|---:|---:|---:|---:|"]
    for stage in manifest["stages"]:
        if "verification" in stage:
            ver = stage["verification"] or {}
            lines.append(f"| {stage['stage']} | {len(ver.get('lines', []))} runs at other grids | – | "
                         f"{'yes' if ver.get('ok') else 'no'} | – | – |")
            continue
        val = stage.get("validation", {})
        cases = val.get("cases", [])
        max_abs = max((c["max_abs"] for c in cases if "max_abs" in c), default=None)
        cosine = min((c["min_cosine"] for c in cases if "min_cosine" in c), default=None)
        passed = sum(1 for c in cases if c.get("ok"))
        lines.append(f"| {stage['stage']} | {val.get('reference', '–')} | {len(cases)} | {passed} | "
                     f"{_num(max_abs, 3)} | {_num(cosine, 6)} |")
    return lines


def smoke_lines(manifest: dict) -> list[str]:
    names = [o["name"] for o in manifest["outputs"]]
    lines = ["| image (h x w) | " + " | ".join(i["name"] for i in manifest["inputs"]) + " | " +
             " | ".join(names) + " |", "|---" * (1 + len(manifest["inputs"]) + len(names)) + "|"]
    for case in manifest["smoke"]:
        values = case.get("values", {})
        ins = [str(values[i["name"]]) if i["name"] in values else _dims(case["inputs"][i["name"]])
               for i in manifest["inputs"]]
        outs = [_dims(case["outputs"][n]) for n in names]
        lines.append(f"| {case['size']} | " + " | ".join(ins + outs) + " |")
    return lines


def webgpu_lines(manifest: dict) -> list[str]:
    """What was verified on WebGPU: the check users can run, what the project's tests run it on."""
    names = [v["name"] for v in manifest["variants"]]
    webgpu = [n for n in names if n in VARIANTS and VARIANTS[n].made_for == "webgpu"]
    which = (f"The {' and '.join(f'`{n}`' for n in webgpu)} variant{'s are' if len(webgpu) > 1 else ' is'} made for "
             "WebGPU (transformers.js `dtype`, `device: 'webgpu'`). " if webgpu else
             "This package has no fp16 or q4f16 variant (`make export FP16=1` builds them). ")
    return [which + (
        f"`python -m runtime webgpu-check {manifest['name']}` runs every variant on ONNX Runtime's WebGPU execution "
        "provider (onnxruntime-webgpu, installed by `make webgpu`) at every validation layout against the CPU EP's "
        "fp32, checks that the outputs are finite and within each variant's floor, and lists the nodes that fall "
        "back to the CPU. vlm-vision-onnx's tests run it on tiny packages of both families with every variant, on "
        "a software Vulkan adapter (Mesa lavapipe); this package itself was not run on a GPU where it was made. "
        "Known: ONNX Runtime's WebGPU attention computed wrong on lavapipe while its `subgroups` feature was on "
        "(docs/webgpu.md of vlm-vision-onnx).")]


def static_lines(manifest: dict) -> list[str]:
    """The static buckets for NPUs (`runtime.buckets.KEY`), one row per file; nothing when the package has none."""
    if not manifest.get(KEY):
        return []
    lines = ["## Static buckets (NPUs)", "",
             ("One size each, for NPUs that compile static graphs only (Qualcomm's HTP through ONNX Runtime's QNN "
              "EP): input `pixel_values` of that size only, its layout (grid or crops) the model's own. Not in "
              "`onnx_variants`. "
              f"`python -m runtime embed photo.jpg --package {manifest['name']} --engine qnn --out embeddings.npz` "
              "resizes each image to the bucket of the closest aspect ratio and runs the QDQ file (`--variant fp16`: "
              "the fp16 one) on the HTP. Accuracy as each file's stage measured it: fp32 against the eager model, "
              "qdq and fp16 against the bucket's fp32 (qdq on real photos)."), "",
             "| size (w x h) | layout | variant | file | MiB | min per-token cosine | reference |",
             "|---|---|---|---|---:|---:|---|"]
    keys = buckets.layout_keys(manifest)
    for bucket in manifest[KEY]:
        size = "x".join(map(str, ([bucket["frames"]] if bucket.get("frames") else []) + bucket["size"]))
        layout = buckets.layout_text({k: bucket[k] for k in keys})
        for v in bucket["variants"]:
            accuracy = v.get("accuracy_vs_fp32") or v.get("accuracy_vs_eager") or {}
            cosine = accuracy.get("min_token_cosine", min((c["min_token_cosine"] for c in accuracy.get("cases", [])
                                                           if isinstance(c, dict) and "min_token_cosine" in c),
                                                          default=None))
            lines.append(f"| {size} | {layout} | {v['name']} | `{v['file']}` | "
                         f"{_mib(v['size'])} | {_num(cosine, 5)} | "
                         f"{accuracy.get('reference', '–')} |")
    return [*lines, ""]


def render(manifest: dict) -> str:
    """README.md text for `manifest`."""
    fam = family(manifest["family"])
    name = manifest["name"]
    fp32 = manifest["variants"][0]
    versions = {k: v for k, v in manifest["versions"].items() if k != "by_stage"}
    export = manifest["export"]
    lines = [
        "---",
        "library_name: onnxruntime",
        f"tags: [onnx, vision-encoder, {manifest['family']}]",
        "---",
        "",
        f"# {name}: {manifest['title']} (ONNX)",
        "",
        (f"The vision encoder of `{manifest['model']}` ({manifest['family']} family) as ONNX for ONNX Runtime, "
         f"for {fam.release.accepts}. Weights: {_weights(manifest)}."),
        (f"Exported through {export['path']} (opset {export['opset']}, example pack {export.get('example')}); "
        f"the fp32 model is the `{fp32['stage']}` stage of the pipeline. Made by `make package` "
        "(vlm-vision-onnx); every number below is in `manifest.json`."),
        "",
        "## Variants",
        "",
        *variants_table(manifest),
        "",
        *static_lines(manifest),
        "## Inputs",
        "",
        *io_table(manifest["inputs"]),
        "",
        "## Outputs",
        "",
        *io_table(manifest["outputs"]),
        "",
        (f"Every variant's first output is `{FEATURES}`, the name transformers.js (`encode_image` of the "
         "`vision_encoder` session) and onnxruntime-genai read the features by; `python -m runtime verify` checks "
         "it." + (" The other outputs (DeepStack) are not read by transformers.js 4.3.1, whose decoder takes none."
                  if len(manifest["outputs"]) > 1 else "")),
        "",
        *[f"- `{sym}`: {meaning}" for sym, meaning in manifest["symbols"].items()],
        "",
        "## Validation",
        "",
        *validation_lines(manifest),
        "",
        (f"fp32 tolerance: max abs diff <= {export['tolerance']} x max(1, max |reference|). At the smoke sizes "
         "(a random image of that size through the package's processor; integer inputs by value, the rest by "
         "shape) the outputs have these shapes; `verify` checks every variant:"),
        "",
        *smoke_lines(manifest),
        "",
        "## WebGPU",
        "",
        *webgpu_lines(manifest),
        "",
        "## How to run",
        "",
        ("Needs only onnxruntime, openvino, numpy, pillow and transformers' torch-free image processor "
        "(`pip install .[runtime]` from vlm-vision-onnx), never PyTorch."),
        "",
        "```sh",
        f"python -m runtime verify {name}        # checksums, manifest, every variant at the smoke sizes",
        f"python -m runtime embed photo.jpg --package {name} --out embeddings.npz",
        "```",
        "",
        "```python",
        fam.release.usage.replace("PACKAGE", name).replace("FILE", fp32["file"].removeprefix("onnx/")).rstrip(),
        "```",
        "",
        "## Versions",
        "",
        ", ".join(f"{lib} {version}" for lib, version in versions.items()) + ".",
        "",
        "## Checksums",
        "",
        ("`sha256sum -c SHA256SUMS` checks every file; `manifest.json` records the sha256 and size of each "
        "model, data and config file."),
        "",
    ]
    return "\n".join(lines)
