"""The full checkpoint an onnxruntime-genai package is made from, read and checked without torch.

A checkpoint is a `save_pretrained` folder of the family's `*ForConditionalGeneration` (`Generation.architecture`:
Qwen3-VL, Qwen2.5-VL or Qwen3.5): `config.json` (with
`text_config`, `vision_config` and the special token ids), `*.safetensors` (+ the shard index) and the
tokenizer (`tokenizer.json`, which genai's processor reads). `read` refuses, with one line naming the cause
and the fix, a folder that is not such a checkpoint, one whose vision tower is not the one BUILD exported
(other dimensions, other weights, random weights), and a tokenizer without Qwen's vision tokens at the
config's ids. `tensor` reads one tensor of the safetensors files as float32 numpy (F32, F16 or BF16), the
only weight the package takes from the checkpoint itself (the token embedding).
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.report import read_json_object
from vlm_vision_onnx.families import export_facts
from vlm_vision_onnx.families.untrusted import refuse_code
from vlm_vision_onnx.release.manifest import file_record

INDEX = "model.safetensors.index.json"
#: Where the token embedding lives in a Qwen VLM's state dict: transformers 5 layout first, then the older one.
EMBED_NAMES = ("model.language_model.embed_tokens.weight", "model.embed_tokens.weight")
#: The special tokens genai's Qwen processor writes into the prompt (their literal text), and the config key
#: holding each one's id.
VISION_TOKENS = {"<|vision_start|>": "vision_start_token_id", "<|image_pad|>": "image_token_id",
                 "<|vision_end|>": "vision_end_token_id"}
_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}


@dataclass(frozen=True)
class Checkpoint:
    """A checked checkpoint: its folder, `config.json` as a dict and its text config (dict)."""

    folder: Path
    config: dict
    text: dict

    def token_id(self, key: str) -> int:
        return int(self.config[key])


def _config(folder: Path, architecture: str) -> dict:
    if not folder.is_dir():
        raise UsageError(f"checkpoint {folder} is not a folder; give the save_pretrained folder of the full "
                         f"{architecture} (config.json, *.safetensors, tokenizer.json)")
    path = folder / "config.json"
    if not path.is_file():
        raise UsageError(f"checkpoint {folder} has no config.json; give the save_pretrained folder of the full "
                         f"{architecture}")
    config = read_json_object(path, "checkpoint file", "save the checkpoint again")
    for name in ("config.json", "tokenizer_config.json", "preprocessor_config.json"):
        if (folder / name).is_file():  # genai's builder reads them with transformers' Auto* classes
            refuse_code(config if name == "config.json" else
                        read_json_object(folder / name, "checkpoint file", "save the checkpoint again"), folder / name)
    architectures = config.get("architectures") or []
    if architecture not in architectures:
        raise UsageError(f"checkpoint {folder} is a {', '.join(architectures) or config.get('model_type', '?')} "
                         f"checkpoint, not {architecture}: give the full checkpoint BUILD's encoder was exported "
                         "from (the decoder and the token embedding come from it)")
    for key in ("text_config", "vision_config", *VISION_TOKENS.values()):
        if key not in config:
            raise UsageError(f"checkpoint {path} lacks {key!r}; save the checkpoint again with transformers")
    return config


def _check_vision(config: dict, metadata: dict, path: Path) -> None:
    """The checkpoint's vision tower has the dimensions of the exported one, and feeds its text model."""
    vision, text = config["vision_config"], config["text_config"]
    patch_dim = vision.get("in_channels", 3) * vision.get("temporal_patch_size", 2) * vision.get("patch_size", 16) ** 2
    export_facts.check_against_metadata({
        "spatial_merge_size": vision.get("spatial_merge_size"), "out_hidden_size": vision.get("out_hidden_size"),
        "patch_dim": patch_dim,
        "deepstack_visual_indexes": json.dumps(list(vision.get("deepstack_visual_indexes", []))),
    }, metadata, f"checkpoint {path}")
    if vision.get("out_hidden_size") != text.get("hidden_size"):
        raise UsageError(f"checkpoint {path}: vision out_hidden_size {vision.get('out_hidden_size')} differs from the "
                         f"text hidden_size {text.get('hidden_size')}; the checkpoint is inconsistent")


def _check_same_weights(folder: Path, export: dict) -> None:
    """BUILD's vision encoder was exported from this checkpoint's weights (the same folder, or the same files)."""
    if export.get("weights") != "checkpoint":
        raise UsageError(f"BUILD's vision encoder has random weights (seed {export.get('seed')}), not the vision "
                         f"tower of {folder}: its features would mean nothing to that decoder; export it from the "
                         f"checkpoint first (make export MODEL={export.get('model', '...')} CHECKPOINT={folder})")
    exported = Path(export.get("checkpoint", ""))
    if exported.is_dir() and os.path.samefile(exported, folder):
        return
    mine = {f.name: file_record(f) for f in sorted(folder.glob("*.safetensors"))}
    theirs = {f.name: file_record(f) for f in sorted(exported.glob("*.safetensors"))} if exported.is_dir() else {}
    if not mine or mine != theirs:
        raise UsageError(f"BUILD's vision encoder was exported from the checkpoint {exported}, whose weights are not "
                         f"those of {folder}; give that checkpoint, or export from this one "
                         f"(make export CHECKPOINT={folder})")


def _check_tokenizer(folder: Path, config: dict) -> None:
    """tokenizer.json holds Qwen's vision tokens at the ids config.json gives them (genai's processor writes
    the tokens as text; the embedding model replaces `image_token_id`)."""
    path = folder / "tokenizer.json"
    if not path.is_file():
        raise UsageError(f"checkpoint {folder} has no tokenizer.json, which onnxruntime-genai's tokenizer reads; "
                         "save the model's tokenizer (or processor) into it with save_pretrained")
    added = read_json_object(path, "tokenizer", "save the tokenizer again").get("added_tokens", [])
    ids = {t.get("content"): t.get("id") for t in added if isinstance(t, dict)}
    for token, key in VISION_TOKENS.items():
        if ids.get(token) != config[key]:
            found = "is missing" if token not in ids else f"has id {ids[token]}"
            raise UsageError(f"checkpoint {folder}: tokenizer.json's {token} {found} but config.json's {key} is "
                             f"{config[key]}; the tokenizer is not this model's: save the model's own tokenizer")


def read(checkpoint: str | Path, export: dict, metadata: dict, architecture: str) -> Checkpoint:
    """The checked checkpoint for a package of BUILD (`export`: its export report; `metadata`: the ONNX
    metadata of the vision encoder that goes into the package; `architecture`: the family's checkpoint class,
    `Qwen3VLForConditionalGeneration`)."""
    folder = Path(checkpoint)
    config = _config(folder, architecture)
    _check_vision(config, metadata, folder / "config.json")
    _check_same_weights(folder, export)
    _check_tokenizer(folder, config)
    return Checkpoint(folder, config, dict(config["text_config"]))


def _header(file: Path) -> tuple[dict, int]:
    """(the safetensors JSON header, the byte offset where the tensor data starts)."""
    try:
        with open(file, "rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
    except (OSError, ValueError, struct.error) as err:
        raise UsageError(f"checkpoint file {file} is not a readable safetensors file ({err}); copy it again") from None
    return header, 8 + size


def _shard(folder: Path, names: tuple[str, ...]) -> tuple[Path, str]:
    """The safetensors file holding the first of `names` present, and that name."""
    index = folder / INDEX
    if index.is_file():
        weight_map = read_json_object(index, "checkpoint file", "save the checkpoint again").get("weight_map", {})
        for name in names:
            if name in weight_map:
                return folder / weight_map[name], name
    else:
        for file in sorted(folder.glob("*.safetensors")):
            header, _ = _header(file)
            for name in names:
                if name in header:
                    return file, name
    raise UsageError(f"checkpoint {folder} has no tensor {' or '.join(names)}; is it a full checkpoint of the "
                     "vision-language model (not only its vision tower)?")


def tensor(folder: str | Path, names: tuple[str, ...]) -> np.ndarray:
    """The first of `names` found in the checkpoint's safetensors files, as float32 (bf16 widened exactly)."""
    file, name = _shard(Path(folder), names)
    header, start = _header(file)
    entry = header[name]
    dtype = _DTYPES.get(entry.get("dtype"))
    if dtype is None:
        raise UsageError(f"checkpoint file {file}: {name} is {entry.get('dtype')}; only F32, F16 and BF16 are read")
    begin, end = entry["data_offsets"]
    count = (end - begin) // np.dtype(dtype).itemsize
    data = np.memmap(file, dtype=dtype, mode="r", offset=start + begin, shape=(count,)).reshape(entry["shape"])
    if entry["dtype"] == "BF16":  # bfloat16 is the top half of a float32
        return (data.astype(np.uint32) << 16).view(np.float32)
    return np.asarray(data, dtype=np.float32)
