"""PyTorch's side of `bench.cpu_race`'s process race: what a user runs instead of exporting.

`python -m bench.cpu_race_torch save CONFIG SEED OUT.safetensors`: the random weights of `builders.vision --model
CONFIG --seed SEED` (the export's) as a safetensors file, the stand-in for a checkpoint.
`python -m bench.cpu_race_torch embed CONFIG WEIGHTS PACKAGE THREADS PHOTO ...`: one process as a user writes it:
transformers' tower of CONFIG built on the meta device, its weights loaded from WEIGHTS, cast to bf16, sdpa
attention; the photos through transformers' Qwen2VLImageProcessor configured from PACKAGE's
preprocessor_config.json (the processor the package ships); one call on all photos as one pack. Each stage's wall
time goes to stderr as `[torch] STAGE: S s` (`core.progress.step`; STAGE: import, load, preprocess, forward), which
`bench.cpu_race` reads to say where a process's time goes.
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


def embed(config: str, weights: str, package: str, threads: int, photos: list[str]) -> None:
    with step("import", tag=TAG):  # torch, transformers' tower and processor
        import numpy as np
        import torch
        from PIL import Image
        from safetensors.torch import load_file
        from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

        from builders.config import load_config
        from builders.qwen_vl.generations import TORCH_GENERATIONS
        from builders.qwen_vl.model import vision_config

    torch.set_num_threads(threads)
    with step("load", tag=TAG):  # the tower on the meta device, its weights read, cast to bf16
        cfg = load_config(config)
        generation = TORCH_GENERATIONS[cfg.family]
        vision = vision_config(generation, cfg.vision, cfg.path)
        vision._attn_implementation = "sdpa"
        with torch.device("meta"):
            model = generation.vision_model(vision)
        model.load_state_dict(load_file(weights), assign=True)
        inv_freq, _ = generation.rotary_embedding.compute_axial_rope_parameters(vision)
        model.rotary_pos_emb.inv_freq = inv_freq
        model = model.to(torch.bfloat16).eval()
    with step("preprocess", tag=TAG):
        processor = Qwen2VLImageProcessorPil.from_pretrained(package)
        inputs = processor(images=[Image.open(p).convert("RGB") for p in photos], return_tensors="np")
    with step("forward", tag=TAG), torch.inference_mode():
        out = model(torch.from_numpy(np.asarray(inputs["pixel_values"])).to(torch.bfloat16),
                    grid_thw=torch.from_numpy(np.asarray(inputs["image_grid_thw"])), return_dict=True)
    print(f"embedded {len(photos)} photos: {tuple(out.pooler_output.shape)}", file=sys.stderr)


if __name__ == "__main__":
    command, *rest = sys.argv[1:]
    if command == "save":
        save(rest[0], int(rest[1]), rest[2])
    else:
        embed(rest[0], rest[1], rest[2], int(rest[3]), rest[4:])
