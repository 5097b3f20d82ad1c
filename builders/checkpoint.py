"""Load a sub-module's weights (e.g. the vision tower) from a `save_pretrained` folder or a hub id.

Safetensors only (never pickle); only the shards that hold the wanted prefix are read.
"""

import json
import re
import struct
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open

from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.report import read_json_object
from vlm_vision_onnx.families.untrusted import refuse_code

INDEX = "model.safetensors.index.json"


#: A model hub id: ORG/NAME of letters, digits, '-', '_' and '.' (the hub's own rule, without its length limits).
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def looks_local(checkpoint: str) -> bool:
    """Whether CHECKPOINT is meant as a local path, never to be looked up on the hub: anything but ORG/NAME, and an
    ORG/NAME whose ORG is a folder here (`ckpts/qwen3-vl` with a mistyped name) or that ends in '/'."""
    if not HUB_ID.fullmatch(checkpoint):
        return True
    try:
        return Path(checkpoint.split("/", 1)[0]).is_dir()
    except (OSError, ValueError):
        return True


def resolve_checkpoint(checkpoint: str, prefixes: tuple[str, ...]) -> Path:
    """A local folder as is; otherwise a hub id, fetching config.json and only the needed shards. A CHECKPOINT
    that looks like a local path (`looks_local`) and is not a folder is one error line, never a hub lookup."""
    path = Path(checkpoint)
    try:
        if path.is_dir():
            return path
        exists = path.exists()
    except (OSError, ValueError) as err:
        raise UsageError(f"checkpoint {checkpoint[:200]!r} cannot be read ({getattr(err, 'strerror', None) or err}); "
                         "give the folder of a save_pretrained checkpoint") from None
    if exists:
        raise UsageError(f"checkpoint {checkpoint!r} is a file, not a folder: give the folder of a save_pretrained "
                         "checkpoint")
    if looks_local(checkpoint):
        raise UsageError(f"checkpoint folder {checkpoint!r} does not exist (a local path; a hub id looks like "
                         "'Qwen/Qwen3-VL-2B-Instruct'); check the path")
    return _fetch_from_hub(checkpoint, prefixes)


def _fetch_from_hub(repo_id: str, prefixes: tuple[str, ...]) -> Path:
    from huggingface_hub import hf_hub_download

    try:
        config = Path(hf_hub_download(repo_id, "config.json"))
        try:
            index = json.loads(Path(hf_hub_download(repo_id, INDEX)).read_text())
            shards = sorted({f for k, f in index["weight_map"].items() if k.startswith(prefixes)})
        except Exception:  # noqa: BLE001 -- no index: a single-file checkpoint
            shards = ["model.safetensors"]
        for shard in shards:
            hf_hub_download(repo_id, shard)
    except Exception as err:  # noqa: BLE001 -- offline, unknown repo, gated: all mean "not served"
        raise UsageError(
            f"checkpoint {repo_id!r} is not a local folder and the hub could not serve it "
            f"({type(err).__name__}); download it and pass the folder"
        ) from None
    return config.parent


def checkpoint_config(checkpoint: str, prefixes: tuple[str, ...]) -> tuple[Path, dict]:
    """(the checkpoint folder, its config.json as a dict); UsageError when it has none or it is bad."""
    folder = resolve_checkpoint(checkpoint, prefixes)
    config_path = folder / "config.json"
    if not config_path.exists():
        raise UsageError(f"checkpoint folder {folder} has no config.json")
    config = read_config_json(config_path)
    refuse_code(config, config_path)  # nothing of a checkpoint ever runs (families/untrusted.py)
    return folder, config


def read_config_json(path: Path) -> dict:
    """A checkpoint's JSON file (config.json, the shard index) as a dict; UsageError naming the file."""
    return read_json_object(path, "checkpoint file", "save the checkpoint again")


#: The most bytes a safetensors header may declare (the format's own limit is 100 MB).
HEADER_LIMIT = 100 * 10**6


def _shards(folder: Path, prefixes: tuple[str, ...]) -> list[Path]:
    """The safetensors files that may hold tensors of `prefixes` (all of them without a shard index)."""
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        pickles = [p.name for p in folder.glob("*.bin")] + [p.name for p in folder.glob("*.pt")]
        hint = f" (found {pickles[0]}: pickle files are never loaded; save with safe_serialization)" if pickles else ""
        raise UsageError(f"checkpoint folder {folder} has no *.safetensors files{hint}")
    index_path = folder / INDEX
    if index_path.exists():
        weight_map = read_config_json(index_path).get("weight_map")
        if not isinstance(weight_map, dict):
            raise UsageError(f"checkpoint {index_path} has no weight_map; save the checkpoint again")
        wanted = {folder / f for k, f in weight_map.items() if isinstance(f, str) and k.startswith(prefixes)}
        files = [f for f in files if f in wanted]
    return files


def header_shapes(folder: Path, prefixes: tuple[str, ...]) -> dict[str, list[int]]:
    """{tensor name without its prefix: shape} of the first prefix found, read from the safetensors headers only
    (a few KB; no tensor is loaded, no torch module built). UsageError for an unreadable header."""
    files = _shards(folder, prefixes)
    found: dict[str, dict[str, list[int]]] = {}
    for file in files:
        try:
            with open(file, "rb") as f:
                size = struct.unpack("<Q", f.read(8))[0]
                if size > min(HEADER_LIMIT, file.stat().st_size - 8):
                    raise ValueError(f"header of {size:,} bytes")
                header = json.loads(f.read(size))
            entries = {k: [int(d) for d in v["shape"]] for k, v in header.items() if k != "__metadata__"}
        except (OSError, ValueError, struct.error, TypeError, KeyError, AttributeError) as err:
            raise UsageError(f"checkpoint file {file} is not a readable safetensors file ({err or type(err).__name__}); "
                             "copy it again or save the checkpoint again") from None
        for prefix in prefixes:
            found.setdefault(prefix, {}).update({k[len(prefix):]: v for k, v in entries.items() if k.startswith(prefix)})
    return next((found[p] for p in prefixes if found.get(p)), {})


def check_dims(shapes: dict[str, list[int]], depth: tuple[str, int], widths: dict[str, int], stack: str,
               config_path: Path) -> None:
    """The config's depth and widths against the weights' shapes, before any module is built (so a config cannot
    make the export build more than its weights hold): `depth` (key, value) may not exceed the blocks named
    `STACK.N.` in the header (fewer: the weights left over are reported after loading); each of `widths`
    {key: value} must be a dimension of some weight. UsageError naming the key, the config and the weights."""
    if not shapes:  # no weight of the tower at all: loading says so, naming the prefixes
        return
    pattern = re.compile(rf"(?:^|\.){re.escape(stack)}\.(\d+)\.")
    blocks = {int(m.group(1)) for name in shapes if (m := pattern.search(name))}
    key, value = depth
    if value > len(blocks):
        raise UsageError(f"checkpoint {config_path}: {key} is {value}, but its weights hold {len(blocks)} layers "
                         f"({stack}.N); config.json and weights disagree")
    dims = {d for shape in shapes.values() for d in shape}
    for key, value in widths.items():
        if value not in dims:
            raise UsageError(f"checkpoint {config_path}: {key} is {value}, but no weight has a dimension of that "
                             "size; config.json and weights disagree")


def load_prefixed_state_dict(folder: Path, prefixes: tuple[str, ...]) -> tuple[dict, str]:
    """Tensors whose names start with the first prefix found, with it stripped; and that prefix.

    Raises UsageError when the folder has no safetensors or none of its tensors has the prefix.
    """
    files = _shards(folder, prefixes)
    for prefix in prefixes:
        state = {}
        for file in files:
            try:
                with safe_open(str(file), framework="pt") as reader:
                    for key in reader.keys():  # noqa: SIM118 -- safe_open is not a dict
                        if key.startswith(prefix):
                            state[key[len(prefix):]] = reader.get_tensor(key)
            except (SafetensorError, OSError, ValueError) as err:
                raise UsageError(f"checkpoint file {file} is not a readable safetensors file "
                                 f"({str(err).splitlines()[0] if str(err) else type(err).__name__}); "
                                 "copy it again or save the checkpoint again") from None
        if state:
            return state, prefix
    raise UsageError(
        f"checkpoint folder {folder} holds no vision weights (no tensor named {' or '.join(p + '*' for p in prefixes)})"
    )


def load_into(module: torch.nn.Module, state: dict, folder: Path) -> None:
    """Load `state` into `module` as float32; every parameter must be present (UsageError otherwise)."""
    state = {k: v.float() if v.is_floating_point() else v for k, v in state.items()}
    expected = module.state_dict()
    for key, tensor in state.items():
        if key in expected and tuple(expected[key].shape) != tuple(tensor.shape):
            raise UsageError(f"checkpoint {folder}: weight {key!r} has shape {list(tensor.shape)}, the config's "
                             f"model needs {list(expected[key].shape)}; config.json and weights disagree")
    missing, unexpected = module.load_state_dict(state, strict=False)
    if missing:
        raise UsageError(
            f"checkpoint {folder} lacks {len(missing)} vision weights (e.g. {missing[0]!r}); is it a checkpoint of this model?"
        )
    if unexpected:
        raise UsageError(f"checkpoint {folder} has {len(unexpected)} unexpected vision weights (e.g. {unexpected[0]!r})")


def family_of(checkpoint: str) -> tuple[str, Path]:
    """(the family a checkpoint's config.json names by its `model_type`, the checkpoint folder); UsageError when
    it names none this exporter knows (`families.MODEL_TYPES`)."""
    from vlm_vision_onnx.families import MODEL_TYPES

    folder, config = checkpoint_config(checkpoint, ())
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or model_type not in MODEL_TYPES:
        raise UsageError(f"checkpoint {folder / 'config.json'} has model_type {model_type!r}; this exporter takes "
                         f"{', '.join(sorted(MODEL_TYPES))}")
    return MODEL_TYPES[model_type], folder
