"""The text decoder of an onnxruntime-genai package: built by genai's own builder, or a folder it built.

`build` runs `onnxruntime_genai.models.builder -i CKPT -o OUT -p PRECISION -e cpu --extra_options
exclude_embeds=true` in a subprocess: the decoder takes `inputs_embeds` [batch, sequence, hidden] (the
embedding model makes them) and 3-row `position_ids` (mRoPE), and the folder gets genai's tokenizer files and a
`genai_config.json` with the decoder section. The builder needs torch and transformers, in its own process:
this package's code never imports torch.

The builder imports its sibling modules as top-level `builders` and `builder_config` (its package appends its
own folder to the *end* of sys.path). Run as a module from this repository's root, our `builders` package is
found first: "ImportError: cannot import name 'ChatGLMModel' from 'builders'" (and, by the same sys.path
order, wherever this project is installed as a regular package: its `builders` is in site-packages). So the
subprocess puts the builder's folder first on sys.path and runs its module as `__main__`, from a scratch
working folder inside the package's temp folder.

`check` accepts a folder the builder wrote earlier (`--decoder DIR`): genai_config.json with a decoder
section whose model file exists and takes `inputs_embeds` of the checkpoint's hidden size.
"""

from __future__ import annotations

import importlib.machinery
import os
import shutil
import subprocess
import sys
from pathlib import Path

import onnx

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.onnx_io import write_json
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.core.report import read_json_object
from vlm_vision_onnx.release.genai_config import CONFIG

PRECISIONS = ("fp32", "int8", "int4")
#: Runs genai's builder with its own folder first on sys.path (see the module docstring); argv follows.
BOOTSTRAP = ("import os, runpy, sys; import onnxruntime_genai.models as m; "
             "sys.path.insert(0, os.path.dirname(m.__file__)); sys.argv[0] = 'builder'; "
             "runpy.run_module('builder', run_name='__main__')")


def _missing(module: str) -> bool:
    return importlib.machinery.PathFinder.find_spec(module) is None


def build(checkpoint: Path, out: Path, precision: str = "fp32") -> Path:
    """Run genai's builder on `checkpoint` into the existing folder `out`; return `out`."""
    missing = [m for m in ("onnxruntime_genai", "torch", "transformers") if _missing(m)]
    if missing:
        raise UsageError(f"genai's builder needs {', '.join(missing)} (pip install '.[export,genai]'); or build the "
                         "decoder elsewhere and pass its folder with --decoder DIR")
    if precision not in PRECISIONS:
        raise UsageError(f"--precision {precision}: genai's builder makes {', '.join(PRECISIONS)} decoders for CPU")
    scratch = out / ".builder-cwd"  # the builder's working folder (its default cache_dir is relative)
    scratch.mkdir()
    command = [sys.executable, "-c", BOOTSTRAP, "-i", str(checkpoint.resolve()), "-o", str(out.resolve()),
               "-p", precision, "-e", "cpu", "--extra_options", "exclude_embeds=true"]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    say(f"genai's builder: {precision} decoder from {checkpoint} (exclude_embeds=true)")
    try:
        done = subprocess.run(command, cwd=scratch, env=env, capture_output=True, text=True, check=False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if done.returncode != 0:
        lines = [line for line in (done.stderr + done.stdout).splitlines() if line.strip()]
        last = next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else "no output")
        raise UsageError(f"genai's builder failed on {checkpoint} (exit {done.returncode}): {last.strip()}")
    genai_tokenizer_class(out)
    return check(out, None)


#: Tokenizer classes transformers saves that onnxruntime-genai 0.18's tokenizer does not know ("Unsupported
#: tokenizer class"), and the class it runs the same tokenizer.json as: Qwen3.5's is Qwen2's byte-level BPE
#: (its pre-tokenizer, kept in tokenizer.json, only also groups combining marks with letters).
TOKENIZER_CLASSES = {"Qwen3_5Tokenizer": "Qwen2Tokenizer"}


def genai_tokenizer_class(folder: Path) -> None:
    """Rewrite FOLDER/tokenizer_config.json's `tokenizer_class` to one genai 0.18 loads (TOKENIZER_CLASSES)."""
    path = folder / "tokenizer_config.json"
    if not path.is_file():
        return
    config = read_json_object(path, "tokenizer config", "build the decoder again")
    if config.get("tokenizer_class") in TOKENIZER_CLASSES:
        config["tokenizer_class"] = TOKENIZER_CLASSES[config["tokenizer_class"]]
        write_json(path, config)


def check(folder: Path, hidden_size: int | None) -> Path:
    """`folder` holds a decoder genai's builder made with exclude_embeds=true (and, when given, of
    `hidden_size`); return it. UsageError naming what is missing otherwise."""
    if not folder.is_dir():
        raise UsageError(f"--decoder {folder} is not a folder; give a folder genai's builder wrote "
                         "(onnxruntime_genai.models.builder with --extra_options exclude_embeds=true), or leave "
                         "--decoder out to build it from --checkpoint")
    path = folder / CONFIG
    if not path.is_file():
        raise UsageError(f"--decoder {folder} has no {CONFIG}; it is not an output folder of genai's builder")
    config = read_json_object(path, "genai config", "build the decoder again")
    decoder = config.get("model", {}).get("decoder")
    if not isinstance(decoder, dict) or "filename" not in decoder:
        raise UsageError(f"{path} has no model.decoder section; build the decoder again with genai's builder")
    if "inputs_embeds" not in decoder.get("inputs", {}):
        raise UsageError(f"{path}: the decoder takes input_ids, not inputs_embeds: build it with "
                         "--extra_options exclude_embeds=true (the package's embedding model makes inputs_embeds)")
    model = folder / decoder["filename"]
    if not model.is_file():
        raise UsageError(f"{path} names the decoder {decoder['filename']}, which is missing from {folder}")
    if hidden_size is not None and decoder.get("hidden_size") != hidden_size:
        raise UsageError(f"--decoder {folder} has hidden_size {decoder.get('hidden_size')} but the checkpoint's text "
                         f"model has {hidden_size}: it is another model's decoder")
    names = [i.name for i in onnx.load(str(model), load_external_data=False).graph.input]
    if decoder["inputs"]["inputs_embeds"] not in names:
        raise UsageError(f"{model} has no input {decoder['inputs']['inputs_embeds']!r} (inputs: {', '.join(names)})")
    return folder
