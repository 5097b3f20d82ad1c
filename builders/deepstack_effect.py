"""`python -m builders.deepstack_effect --checkpoint CKPT IMAGE [IMAGE ...]`: what leaving DeepStack out changes.

onnxruntime-genai 0.18 feeds Qwen3-VL's decoder the image features at the image tokens and nothing else; the
model as trained also adds each DeepStack feature (the merger of vision layer `deepstack_visual_indexes[k]`) to
the hidden states of decoder layer k at the image positions (docs/genai.md). `builders.genai_parity` shows, on the
tiny model, that genai equals transformers with DeepStack left out; this command measures, in transformers alone
(float32, so it runs at full dims without building a genai package), how far that is from the model as it is:

- features: per DeepStack level k, the mean over image tokens of |deepstack_k| / |image_features| (row norms),
  i.e. how large the dropped input is beside the one genai keeps;
- first-step logits (at the prompt's last position): max abs difference off vs on, beside max |logit|; whether the
  greedy token agrees; cosine of the two logit vectors;
- final hidden states (the decoder's output after its norm, [S, hidden]): min per-token cosine off vs on over the
  image tokens and over the text tokens after them.

Prompt as `builders.genai_parity`'s (one `<|vision_start|><|image_pad|><|vision_end|>` per image, then TEXT), fed
by transformers' own processor and tokenizer. `--json FILE` writes the result. Needs torch and transformers; a
2B-dims checkpoint takes about 9 GB in float32.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch

from builders.genai_parity import load_model, reference_inputs, vision_outputs, without_deepstack
from vlm_vision_onnx.core.errors import Parser, UsageError, main_wrapper
from vlm_vision_onnx.core.onnx_io import write_json
from vlm_vision_onnx.core.parity import token_cosines
from vlm_vision_onnx.core.progress import say


@torch.no_grad()
def _first_step(model, inputs: dict[str, torch.Tensor], features) -> tuple[np.ndarray, np.ndarray]:
    """Logits [vocab] at the prompt's last position and final hidden states [S, hidden] of one prefill."""
    out = model(input_ids=inputs["input_ids"], mm_token_type_ids=inputs["mm_token_type_ids"],
                image_grid_thw=inputs["image_grid_thw"], mm_encoder_outputs={"image": features},
                output_hidden_states=True)
    return out.logits[0, -1].float().numpy(), out.hidden_states[-1][0].float().numpy()


def measure(checkpoint: Path, paths: list[Path], text: str, model=None) -> dict:
    """The figures of the module docstring for one prompt of `paths` and `text`, as a dict."""
    ref = reference_inputs(checkpoint, paths, text)
    model = model if model is not None else load_model(checkpoint)
    features = vision_outputs(model, ref)
    image = torch.cat(list(features.pooler_output)).float().numpy()  # [image tokens, hidden]
    image_norm = np.linalg.norm(image, axis=-1)
    levels = [float((np.linalg.norm(torch.cat(list(level)).float().numpy(), axis=-1) / image_norm).mean())
              for level in features.deepstack_features]  # each level split per image, as pooler_output
    logits_off, hidden_off = _first_step(model, ref, without_deepstack(features))
    logits_on, hidden_on = _first_step(model, ref, features)
    is_image = ref["mm_token_type_ids"][0].numpy().astype(bool)
    after_images = np.arange(len(is_image)) > np.flatnonzero(is_image).max()
    cosine = token_cosines(hidden_off, hidden_on)
    return {
        "checkpoint": str(checkpoint), "images": [str(p) for p in paths], "text": text,
        "grid": ref["image_grid_thw"].tolist(), "prompt_tokens": len(is_image),
        "image_tokens": int(is_image.sum()),
        "deepstack_layers": list(model.config.vision_config.deepstack_visual_indexes),
        "text_layers": int(model.config.text_config.num_hidden_layers),
        "hidden_size": int(model.config.text_config.hidden_size),
        "deepstack_to_image_norm": levels,
        "logits_max_abs": float(np.abs(logits_off - logits_on).max()),
        "logits_max_abs_reference": float(np.abs(logits_on).max()),
        "logits_cosine": float(token_cosines(logits_off[None], logits_on[None])[0]),
        "greedy_token_equal": bool(logits_off.argmax() == logits_on.argmax()),
        "hidden_min_token_cosine_image": float(cosine[is_image].min()),
        "hidden_min_token_cosine_text": float(cosine[after_images].min()),
    }


def describe(result: dict) -> list[str]:
    """Report lines of `measure`'s result."""
    names = ", ".join(Path(p).name for p in result["images"])
    levels = ", ".join(f"{r:.3g}" for r in result["deepstack_to_image_norm"])
    return [
        (f"{names}: grid {result['grid']}, {result['image_tokens']} image tokens of {result['prompt_tokens']}; "
         f"text model {result['text_layers']} layers of {result['hidden_size']}"),
        (f"DeepStack features (vision layers {result['deepstack_layers']}) beside image_features, mean row-norm "
         f"ratio: {levels}"),
        (f"first-step logits DeepStack off vs on: max abs diff {result['logits_max_abs']:.3g} (max |logit| "
         f"{result['logits_max_abs_reference']:.3g}), cosine {result['logits_cosine']:.5f}, greedy token "
         f"{'equal' if result['greedy_token_equal'] else 'differs'}"),
        (f"final hidden states off vs on, min per-token cosine: image tokens "
         f"{result['hidden_min_token_cosine_image']:.5f}, text tokens {result['hidden_min_token_cosine_text']:.5f}"),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m builders.deepstack_effect", description=__doc__.splitlines()[0])
    parser.add_argument("images", type=Path, nargs="+", metavar="IMAGE", help="image files, in prompt order")
    parser.add_argument("--checkpoint", type=Path, required=True,
                        help="a full Qwen3-VL checkpoint folder (e.g. `python -m builders.random_checkpoint`'s)")
    parser.add_argument("--text", default="Describe the image.", help="text after the images")
    parser.add_argument("--json", type=Path, help="also write the result as JSON")

    def run() -> int:
        args = parser.parse_args(argv)
        missing = [p for p in [args.checkpoint / "config.json", *args.images] if not p.is_file()]
        if missing:
            raise UsageError(f"{missing[0]} does not exist")
        result = measure(args.checkpoint, args.images, args.text)
        for line in describe(result):
            say(line)
        if args.json:
            write_json(args.json, result)
        return 0

    return main_wrapper(run)


if __name__ == "__main__":
    sys.exit(main())
