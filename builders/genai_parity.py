"""`python -m builders.genai_parity PACKAGE --checkpoint CKPT IMAGE [IMAGE ...]`: a genai package against transformers.

One prompt, `<|vision_start|><|image_pad|><|vision_end|>` per image then TEXT, runs twice:
- onnxruntime-genai: `og.MultiModalProcessor` on the image files, `og.Generator` greedy for `--tokens` steps;
  the logits of step k are `get_logits()` before the k-th `generate_next_token()` (in genai 0.18 `set_inputs`
  runs the prefill: after `generate_next_token` the logits are already those of the next step);
- transformers: `Qwen3VLForConditionalGeneration` of CKPT in float32, fed by transformers' own image processor
  (`Qwen2VLImageProcessorPil` from CKPT's preprocessor_config.json) and tokenizer, the prompt expanded as
  `Qwen3VLProcessor` does (`num_image_tokens` image pads per image), teacher-forced on genai's tokens; once with
  the DeepStack features left out (as genai runs: image features at the image tokens only) and once as the model
  is (DeepStack added to the first decoder layers' hidden states).

Reported: per image the grids of both processors and the max abs difference of their `pixel_values`; whether
the token ids agree; per step the max abs logit difference with DeepStack off and on; both greedy token lists.
`--processors` compares only the processors, each image alone. `--json FILE` writes the same as JSON. Needs
torch, transformers and onnxruntime-genai.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from vlm_vision_onnx.core.errors import Parser, UsageError, main_wrapper
from vlm_vision_onnx.core.onnx_io import write_json
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.runtime import images as image_files

IMAGE = "<|vision_start|><|image_pad|><|vision_end|>"
PAD = "<|image_pad|>"


@dataclass
class GenaiRun:
    """One genai generation: input_ids int64 [1, S], pixel_values float32 [num_patches, 1536] (unpadded),
    image_grid_thw int64 [num_images, 3], logits float32 [steps, vocab] (step k: before the k-th token),
    tokens [steps], padded_rows: the rows of genai's own pixel_values."""

    input_ids: np.ndarray
    pixel_values: np.ndarray
    image_grid_thw: np.ndarray
    logits: np.ndarray
    tokens: list[int] = field(default_factory=list)
    padded_rows: int = 0


def unpad(pixel_values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """genai's processor pads every image's patch rows with zeros to the largest image's count
    ([num_images * max(t*h*w), 1536]); the rows of each image, concatenated: [sum(t*h*w), 1536]."""
    counts = np.prod(grid, axis=1)
    if pixel_values.shape[0] == counts.sum():
        return pixel_values
    block = pixel_values.shape[0] // len(counts)
    return np.concatenate([pixel_values[i * block: i * block + n] for i, n in enumerate(counts)])


def prompt(num_images: int, text: str) -> str:
    return IMAGE * num_images + text


def genai_run(package: Path, paths: list[Path], text: str, steps: int) -> GenaiRun:
    """Greedy generation of `steps` tokens (fewer if genai hits an end token) through onnxruntime-genai."""
    import onnxruntime_genai as og

    model = og.Model(str(package))
    inputs = model.create_multimodal_processor()(prompt(len(paths), text), images=og.Images.open(*map(str, paths)))
    ids = inputs["input_ids"].as_numpy().astype(np.int64)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=int(ids.shape[-1]) + steps, do_sample=False)
    generator = og.Generator(model, params)
    generator.set_inputs(inputs)
    logits, tokens = [], []
    while len(tokens) < steps and not generator.is_done():
        logits.append(np.asarray(generator.get_logits())[0, -1].copy())
        generator.generate_next_token()
        tokens.append(int(generator.get_next_tokens()[0]))
    pixel_values, grid = inputs["pixel_values"].as_numpy(), inputs["image_grid_thw"].as_numpy()
    return GenaiRun(ids, unpad(pixel_values, grid), grid, np.stack(logits), tokens, int(pixel_values.shape[0]))


def reference_inputs(checkpoint: Path, paths: list[Path], text: str) -> dict[str, torch.Tensor]:
    """transformers' processor output for the prompt: input_ids [1, S], mm_token_type_ids [1, S] (1 at image
    tokens), pixel_values [num_patches, 1536], image_grid_thw [num_images, 3]."""
    from transformers import AutoTokenizer

    from vlm_vision_onnx.families.qwen_vl import preprocess

    processor = preprocess.load_processor(checkpoint)
    pixel_values, grid = preprocess.preprocess(processor, [image_files.load_rgb(p) for p in paths])
    tokenizer = AutoTokenizer.from_pretrained(str(checkpoint), trust_remote_code=False)  # never prompts
    pieces = prompt(len(paths), text).split(PAD)  # Qwen3VLProcessor: each image pad -> that image's token count
    counts = [int(np.prod(g)) // processor.merge_size**2 for g in grid]
    expanded = pieces[0] + "".join(PAD * n + rest for n, rest in zip(counts, pieces[1:], strict=True))
    ids = torch.tensor([tokenizer(expanded)["input_ids"]])
    image_token = tokenizer.convert_tokens_to_ids(PAD)
    return {"input_ids": ids, "mm_token_type_ids": (ids == image_token).int(),
            "pixel_values": torch.from_numpy(pixel_values), "image_grid_thw": torch.from_numpy(grid)}


@torch.no_grad()
def vision_outputs(model, inputs: dict[str, torch.Tensor]):
    """transformers' vision tower on `inputs`: image features and DeepStack features, split per image."""
    return model.model.get_image_features(inputs["pixel_values"], inputs["image_grid_thw"], return_dict=True)


def without_deepstack(features):
    """`vision_outputs`' result with the DeepStack features left out, as genai runs (a shallow copy)."""
    features = copy.copy(features)
    features.deepstack_features = []
    return features


@torch.no_grad()
def reference_logits(model, inputs: dict[str, torch.Tensor], tokens: list[int], features, deepstack: bool
                     ) -> np.ndarray:
    """transformers' logits [len(tokens), vocab] at the prompt's last position and after each of `tokens` but
    the last (teacher forcing), from `vision_outputs(model, inputs)`; `deepstack=False` keeps the image features
    and leaves the DeepStack ones out."""
    if not deepstack:
        features = without_deepstack(features)
    prompt_len = inputs["input_ids"].shape[1]
    ids = torch.cat([inputs["input_ids"], torch.tensor([tokens[:-1]], dtype=torch.long)], dim=1)
    mm_types = torch.cat([inputs["mm_token_type_ids"], torch.zeros((1, len(tokens) - 1), dtype=torch.int32)], dim=1)
    logits = model(input_ids=ids, mm_token_type_ids=mm_types, image_grid_thw=inputs["image_grid_thw"],
                   mm_encoder_outputs={"image": features}).logits
    return logits[0, prompt_len - 1:].float().numpy()


def load_model(checkpoint: Path):
    """The checkpoint's *ForConditionalGeneration (Qwen3-VL, Qwen2.5-VL, Qwen3.5) in float32."""
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(str(checkpoint), dtype=torch.float32,
                                                        trust_remote_code=False).eval()


def compare(package: Path, checkpoint: Path, paths: list[Path], text: str, steps: int = 8, model=None) -> dict:
    """Run both (see the module docstring); return the report as a dict."""
    run = genai_run(package, paths, text, steps)
    ref = reference_inputs(checkpoint, paths, text)
    model = model if model is not None else load_model(checkpoint)
    features = vision_outputs(model, ref)
    off = reference_logits(model, ref, run.tokens, features, deepstack=False)
    on = reference_logits(model, ref, run.tokens, features, deepstack=True)
    grid = ref["image_grid_thw"].numpy()
    same_grid = np.array_equal(grid, run.image_grid_thw)
    pixels = float(np.abs(ref["pixel_values"].numpy() - run.pixel_values).max()) if same_grid else None
    # The model path alone: transformers fed genai's pixel_values, the processors' difference taken out (the
    # same run as `off` when the pixels already agree to 1e-6).
    model_path = None
    if same_grid and pixels <= 1e-6:
        model_path = np.abs(off - run.logits).max(-1)
    elif same_grid:
        same_pixels = {**ref, "pixel_values": torch.from_numpy(run.pixel_values)}
        model_path = np.abs(reference_logits(model, same_pixels, run.tokens, vision_outputs(model, same_pixels),
                                             deepstack=False) - run.logits).max(-1)
    return {"images": [str(p) for p in paths], "text": text,
            "grid_genai": run.image_grid_thw.tolist(), "grid_transformers": grid.tolist(),
            "pixel_max_abs": pixels, "pixel_rows_genai": run.padded_rows,
            "input_ids_equal": bool(np.array_equal(ref["input_ids"].numpy(), run.input_ids)),
            "tokens_genai": run.tokens, "tokens_transformers_no_deepstack": off.argmax(-1).tolist(),
            "logits_max_abs_no_deepstack": np.abs(off - run.logits).max(-1).tolist(),
            "logits_max_abs_deepstack": np.abs(on - run.logits).max(-1).tolist(),
            "logits_max_abs_no_deepstack_genai_pixels": None if model_path is None else model_path.tolist(),
            "logits_max_abs_reference": float(np.abs(on).max())}


def processors(package: Path, checkpoint: Path, paths: list[Path]) -> list[dict]:
    """Each image alone through genai's processor and transformers' (no model run): per image its size
    (w, h), both grids and the max abs difference of pixel_values (None when the grids differ)."""
    import onnxruntime_genai as og
    from PIL import Image

    from vlm_vision_onnx.families.qwen_vl import preprocess

    genai_processor = og.Model(str(package)).create_multimodal_processor()
    processor = preprocess.load_processor(checkpoint)
    rows = []
    for path in paths:
        out = genai_processor(IMAGE, images=og.Images.open(str(path)))
        grid = out["image_grid_thw"].as_numpy()
        pixels = unpad(out["pixel_values"].as_numpy(), grid)
        ref_pixels, ref_grid = preprocess.preprocess(processor, [image_files.load_rgb(path)])
        same = np.array_equal(grid, ref_grid)
        rows.append({"image": str(path), "size": list(Image.open(path).size), "grid_genai": grid.tolist(),
                     "grid_transformers": ref_grid.tolist(),
                     "pixel_max_abs": float(np.abs(pixels - ref_pixels).max()) if same else None})
    return rows


def describe(result: dict) -> list[str]:
    """Report lines of `compare`'s result."""
    off, on = result["logits_max_abs_no_deepstack"], result["logits_max_abs_deepstack"]
    names = ", ".join(Path(p).name for p in result["images"])
    lines = [
        (f"images: {names}; grids genai {result['grid_genai']}, transformers {result['grid_transformers']}; "
         f"pixel_values max abs diff {result['pixel_max_abs']}"),
        f"input_ids equal: {result['input_ids_equal']}; tokens genai {result['tokens_genai']}",
        (f"first-step logits max abs diff: DeepStack off {off[0]:.3g}, on {on[0]:.3g} (max |logit| "
         f"{result['logits_max_abs_reference']:.3g}); over {len(off)} steps: off {max(off):.3g}, on {max(on):.3g}"),
    ]
    same = result["logits_max_abs_no_deepstack_genai_pixels"]
    if same:
        lines.append(f"with genai's pixel_values in transformers too, DeepStack off: first step {same[0]:.3g}, "
                     f"{len(same)} steps {max(same):.3g}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m builders.genai_parity", description=__doc__.splitlines()[0])
    parser.add_argument("package", type=Path, help="a folder of `python -m release genai`")
    parser.add_argument("images", type=Path, nargs="+", metavar="IMAGE", help="image files, in prompt order")
    parser.add_argument("--checkpoint", type=Path, required=True, help="the checkpoint the package was made from")
    parser.add_argument("--text", default="Describe the image.", help="text after the images")
    parser.add_argument("--tokens", type=int, default=8, help="greedy steps (default 8)")
    parser.add_argument("--json", type=Path, help="also write the result as JSON")
    parser.add_argument("--processors", action="store_true",
                        help="only compare the processors, each image alone (no model run, no torch model)")

    def run() -> int:
        args = parser.parse_args(argv)
        missing = [p for p in [args.package / "genai_config.json", *args.images] if not p.is_file()]
        if missing:
            raise UsageError(f"{missing[0]} does not exist")
        if args.processors:
            result = {"processors": processors(args.package, args.checkpoint, args.images)}
            for row in result["processors"]:
                say(f"{Path(row['image']).name} {row['size'][0]}x{row['size'][1]}: grid genai {row['grid_genai']}, "
                    f"transformers {row['grid_transformers']}; pixel_values max abs diff {row['pixel_max_abs']}")
        else:
            result = compare(args.package, args.checkpoint, args.images, args.text, args.tokens)
            for line in describe(result):
                say(line)
        if args.json:
            write_json(args.json, result)
        return 0

    return main_wrapper(run)


if __name__ == "__main__":
    sys.exit(main())
