"""PyTorch's side of `bench.cpu_race`'s process race: what a user runs instead of exporting.

`python -m bench.cpu_race_torch save CONFIG SEED OUT.safetensors`: the random weights of `builders.vision --model
CONFIG --seed SEED` (the export's) as a safetensors file, the stand-in for a checkpoint.
`python -m bench.cpu_race_torch embed CONFIG WEIGHTS PACKAGE THREADS PHOTO ...`: one process as a user writes it:
transformers' tower of CONFIG built on the meta device, its weights loaded from WEIGHTS, cast to bf16, sdpa
attention; the photos through transformers' Qwen2VLImageProcessor configured from PACKAGE's
preprocessor_config.json (the processor the package ships); one call on all photos as one pack. Each stage's wall
time goes to stderr as `[torch] STAGE: S s` (`core.progress.step`; STAGE: import, load, preprocess, forward), which
`bench.cpu_race` reads to say where a process's time goes.
`python -m bench.cpu_race_torch reference CONFIG WEIGHTS PACKAGE OUT.npz PHOTO ...`: the accuracy reference, not
timed: the same tower in float32, each photo alone, its outputs in OUT.npz under the names `runtime embed` writes
(`image_K.image_features` [tokens, out_hidden], `image_K.deepstack_embeds_J`).
"""

import sys

from vlm_vision_onnx.core.progress import step

TAG = "torch"


def save(config: str, seed: int, out: str) -> None:
    from safetensors.torch import save_file

    from builders.config import load_config
    from builders.qwen_vl.model import build_random

    model = build_random(load_config(config), seed)
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, out)


def _tower(config: str, weights: str, dtype):
    """transformers' vision tower of `config` built on the meta device, its weights read from `weights`, in `dtype`
    (sdpa attention)."""
    import torch
    from safetensors.torch import load_file

    from builders.config import load_config
    from builders.qwen_vl.generations import TORCH_GENERATIONS
    from builders.qwen_vl.model import vision_config

    cfg = load_config(config)
    generation = TORCH_GENERATIONS[cfg.family]
    vision = vision_config(generation, cfg.vision, cfg.path)
    vision._attn_implementation = "sdpa"
    with torch.device("meta"):
        model = generation.vision_model(vision)
    model.load_state_dict(load_file(weights), assign=True)
    inv_freq, _ = generation.rotary_embedding.compute_axial_rope_parameters(vision)
    model.rotary_pos_emb.inv_freq = inv_freq
    return model.to(dtype).eval()


def _processor(package: str):
    """transformers' Qwen2VLImageProcessorPil configured from `package`'s preprocessor_config.json."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    return Qwen2VLImageProcessorPil.from_pretrained(package)


def _processed(processor, photos: list[str]) -> dict:
    """The photos through `processor` (numpy pixel_values, image_grid_thw)."""
    from PIL import Image

    return processor(images=[Image.open(p).convert("RGB") for p in photos], return_tensors="np")


def _run(model, inputs: dict, dtype):
    import numpy as np
    import torch

    with torch.inference_mode():
        return model(torch.from_numpy(np.asarray(inputs["pixel_values"])).to(dtype),
                     grid_thw=torch.from_numpy(np.asarray(inputs["image_grid_thw"])), return_dict=True)


def embed(config: str, weights: str, package: str, threads: int, photos: list[str]) -> None:
    with step("import", tag=TAG):  # torch, transformers' tower and processor (what the stages below use)
        import numpy  # noqa: F401
        import PIL.Image  # noqa: F401
        import safetensors.torch  # noqa: F401
        import torch
        import transformers.models.qwen2_vl.image_processing_pil_qwen2_vl  # noqa: F401

        import builders.config
        import builders.qwen_vl.generations
        import builders.qwen_vl.model  # noqa: F401

    torch.set_num_threads(threads)
    with step("load", tag=TAG):  # the tower on the meta device, its weights read, cast to bf16
        model = _tower(config, weights, torch.bfloat16)
    with step("preprocess", tag=TAG):
        inputs = _processed(_processor(package), photos)
    with step("forward", tag=TAG):
        out = _run(model, inputs, torch.bfloat16)
    print(f"embedded {len(photos)} photos: {tuple(out.pooler_output.shape)}", file=sys.stderr)


def reference(config: str, weights: str, package: str, out: str, photos: list[str]) -> None:
    """OUT.npz: each photo's float32 outputs alone, under `runtime embed`'s names."""
    import numpy as np
    import torch

    model, processor = _tower(config, weights, torch.float32), _processor(package)
    found = {}
    for i, photo in enumerate(photos):
        result = _run(model, _processed(processor, [photo]), torch.float32)
        found[f"image_{i}.image_features"] = result.pooler_output.numpy()
        for j, deep in enumerate(getattr(result, "deepstack_features", None) or ()):
            found[f"image_{i}.deepstack_embeds_{j}"] = deep.numpy()
    np.savez(out, **found)


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "save":
        save(rest[0], int(rest[1]), rest[2])
    elif command == "reference":
        reference(rest[0], rest[1], rest[2], rest[3], rest[4:])
    else:
        embed(rest[0], rest[1], rest[2], int(rest[3]), rest[4:])
