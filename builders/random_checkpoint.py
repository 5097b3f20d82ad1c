"""`python -m builders.random_checkpoint --out CKPT [--dims tiny|2b] [--family F]`: a random full Qwen checkpoint.

What `python -m release genai` needs and no model hub is reached for: a `save_pretrained` folder of
`Qwen3VLForConditionalGeneration` with random weights (seeded), its tokenizer and its image processor:

- vision tower: `configs/qwen3-vl-tiny.yaml` (`--dims tiny`) or `configs/qwen3-vl-2b.yaml` (`--dims 2b`);
- text model: `TEXT[dims]`: two layers of width 96 (tiny), or Qwen3-VL-2B-Instruct's text dimensions
  (28 layers, width 2048, 151,936 tokens; weights saved in bfloat16 as that checkpoint's are);
- tokenizer: a byte-level BPE (`Qwen2Tokenizer`, Qwen's pre-tokenizer) of 300 tokens learnt from `CORPUS`,
  plus Qwen's special tokens (`SPECIAL`: `<|im_start|>`, `<|vision_start|>`, `<|image_pad|>`, ...);
  config.json's image, video and vision start/end token ids are theirs;
- preprocessor_config.json: Qwen3-VL's image processor settings (families/qwen_vl/processor_files.py).
`--family qwen2.5-vl` / `qwen3.5` (tiny only): `Qwen2_5_VLForConditionalGeneration` / `Qwen3_5ForConditionalGeneration`
with that family's tiny tower (its declared `Shipping.tiny_config`), a tiny text model of its kind (`FAMILY_TEXT`), the same tokenizer and the
generation's processor settings.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import Qwen2Tokenizer, Qwen3VLConfig, Qwen3VLForConditionalGeneration

from builders.config import load_config
from vlm_vision_onnx.core.errors import Parser, UsageError, main_wrapper
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.core.staging import add_clobber_argument, staged_folder
from vlm_vision_onnx.families.qwen_vl import processor_files
from vlm_vision_onnx.families.qwen_vl.generations import GENERATIONS

STAGE = "random-checkpoint"
#: Text model dimensions. `2b`: Qwen/Qwen3-VL-2B-Instruct's text_config as recalled (Qwen3-1.7B: GQA 16/8 heads
#: of 128, interleaved mRoPE sections 24/20/20, tied embeddings); no hub is reachable here to check it.
TEXT = {
    "tiny": {"vocab_size": 320, "hidden_size": 96, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 48, "max_position_embeddings": 4096,
             "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [8, 8, 8],
                                 "mrope_interleaved": True}},
    "2b": {"vocab_size": 151936, "hidden_size": 2048, "intermediate_size": 6144, "num_hidden_layers": 28,
           "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128, "max_position_embeddings": 262144,
           "tie_word_embeddings": True,
           "rope_parameters": {"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20],
                               "mrope_interleaved": True}},
}
VISION = {"tiny": GENERATIONS["qwen3-vl"].shipping.tiny_config, "2b": "qwen3-vl-2b"}
#: The other families' tiny checkpoints (`--family`): their tiny vision config (declared) and a two- or four-layer text model
#: of width 96 (the tiny towers' out_hidden_size). Qwen2.5-VL: 2 heads of 48, mRoPE sections 8/8/8. Qwen3.5: its
#: hybrid decoder, three Gated DeltaNet layers and one attention layer (heads of 16, a quarter rotated), the
#: smallest onnxruntime-genai 0.18's builder writes for CPU.
FAMILY_TEXT = {
    "qwen2.5-vl": {
        "vocab_size": 320, "hidden_size": 96, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 2, "num_key_value_heads": 1, "max_position_embeddings": 4096,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [8, 8, 8]}},
    "qwen3.5": {
        "vocab_size": 320, "hidden_size": 96, "intermediate_size": 128, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "linear_conv_kernel_dim": 4,
        "linear_key_head_dim": 16, "linear_value_head_dim": 16, "linear_num_key_heads": 2,
        "linear_num_value_heads": 4, "max_position_embeddings": 4096,
        "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25,
                            "mrope_section": [1, 1, 0], "mrope_interleaved": True}},
}
DTYPE = {"tiny": torch.float32, "2b": torch.bfloat16}
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]
CORPUS = ["Describe this image.", "What is in these pictures? A cat, a cup of coffee, a rocket and an astronaut.",
          "The quick brown fox jumps over the lazy dog, 0123456789 times.", "<|im_start|>user\n", "<|im_end|>\n"]
BPE_VOCAB = 300


def tokenizer() -> Qwen2Tokenizer:
    """A byte-level BPE of BPE_VOCAB tokens learnt from CORPUS with Qwen's pre-tokenizer, plus SPECIAL
    (and `<|endoftext|>`, Qwen2Tokenizer's end of text), as ids BPE_VOCAB and up."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.train_from_iterator(CORPUS * 4, trainers.BpeTrainer(vocab_size=BPE_VOCAB, show_progress=False,
                                                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in json.loads(bpe.to_str())["model"]["merges"]]
    tok = Qwen2Tokenizer(vocab=bpe.get_vocab(), merges=merges)
    tok.add_special_tokens({"additional_special_tokens": SPECIAL})
    return tok


def model(dims: str, tok: Qwen2Tokenizer, seed: int, family: str = "qwen3-vl"):
    """The random model (`seed`) of `family` with the tokenizer's vision token ids (float32 for the other
    families' tiny checkpoints)."""
    ids = {key: tok.convert_tokens_to_ids(token) for key, token in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    special = {"eos_token_id": tok.convert_tokens_to_ids("<|im_end|>"), "pad_token_id": tok.pad_token_id,
               "bos_token_id": None}
    if family != "qwen3-vl":
        from transformers import AutoModelForImageTextToText

        generation = GENERATIONS[family]
        config = generation.model_config_class()(
            vision_config=load_config(generation.shipping.tiny_config).vision,
            text_config={**FAMILY_TEXT[family], **special}, **ids)
        config.architectures = [generation.architecture]
        torch.manual_seed(seed)
        return AutoModelForImageTextToText.from_config(config).eval().float()
    text = {**TEXT[dims], **special}
    tied = text.pop("tie_word_embeddings", False)
    config = Qwen3VLConfig(vision_config=load_config(VISION[dims]).vision, text_config=text, tie_word_embeddings=tied,
                           **ids)
    torch.manual_seed(seed)
    return Qwen3VLForConditionalGeneration(config).eval().to(DTYPE[dims])


def write(out: str | Path, dims: str = "tiny", seed: int = 0, force: bool = False, family: str = "qwen3-vl") -> Path:
    """Write the checkpoint folder `out` (config.json, model.safetensors, tokenizer, preprocessor_config.json, and
    report.json listing them)."""
    if family != "qwen3-vl" and dims != "tiny":
        raise UsageError(f"--family {family} makes tiny checkpoints only (--dims tiny)")
    tok = tokenizer()
    with staged_folder(out, STAGE, force=force) as tmp:
        vlm = model(dims, tok, seed, family)
        vlm.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        vision = vlm.config.vision_config
        processor_files.save_config(tmp, GENERATIONS[family].processor, patch_size=vision.patch_size,
                                    temporal_patch_size=vision.temporal_patch_size,
                                    merge_size=vision.spatial_merge_size)
        name = type(vlm).__name__
        del vlm
        # the stage's report: a rerun (or --force) replaces only the files it lists (core.staging)
        (tmp / "report.json").write_text(json.dumps({"stage": STAGE, "dims": dims, "seed": seed, "family": family},
                                                    indent=2) + "\n")
    say(f"wrote {out}/: random {name} ({dims} dims, seed {seed}) with its tokenizer")
    return Path(out)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m builders.random_checkpoint", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the checkpoint folder to write")
    parser.add_argument("--dims", choices=sorted(TEXT), default="tiny", help="tiny (default) or 2b")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    parser.add_argument("--force", action="store_true", help="replace an existing --out folder this tool wrote")
    add_clobber_argument(parser)
    parser.add_argument("--family", choices=["qwen3-vl", *FAMILY_TEXT], default="qwen3-vl",
                        help="the model (default qwen3-vl; the others tiny only)")

    def run() -> int:
        args = parser.parse_args(argv)
        write(args.out, args.dims, args.seed, args.force, args.family)
        return 0

    return main_wrapper(run)


if __name__ == "__main__":
    sys.exit(main())
