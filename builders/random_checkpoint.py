"""`python -m builders.random_checkpoint --out CKPT [--dims tiny|2b]`: a random full Qwen3-VL checkpoint.

What `python -m release genai` needs and no model hub is reached for: a `save_pretrained` folder of
`Qwen3VLForConditionalGeneration` with random weights (seeded), its tokenizer and its image processor:

- vision tower: `configs/qwen3-vl-tiny.yaml` (`--dims tiny`) or `configs/qwen3-vl-2b.yaml` (`--dims 2b`);
- text model: `TEXT[dims]`: two layers of width 96 (tiny), or Qwen3-VL-2B-Instruct's text dimensions
  (28 layers, width 2048, 151,936 tokens; weights saved in bfloat16 as that checkpoint's are);
- tokenizer: a byte-level BPE (`Qwen2Tokenizer`, Qwen's pre-tokenizer) of 300 tokens learnt from `CORPUS`,
  plus Qwen's special tokens (`SPECIAL`: `<|im_start|>`, `<|vision_start|>`, `<|image_pad|>`, ...);
  config.json's image, video and vision start/end token ids are theirs;
- preprocessor_config.json: Qwen3-VL's image processor settings (families/qwen_vl/preprocess.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from transformers import Qwen2Tokenizer, Qwen3VLConfig, Qwen3VLForConditionalGeneration

from builders.config import load_config
from core.errors import Parser, main_wrapper
from core.progress import say
from core.staging import staged_folder
from families.qwen_vl import preprocess

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
VISION = {"tiny": "qwen3-vl-tiny", "2b": "qwen3-vl-2b"}
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


def model(dims: str, tok: Qwen2Tokenizer, seed: int) -> Qwen3VLForConditionalGeneration:
    """The random model (`seed`) with the tokenizer's vision token ids."""
    ids = {key: tok.convert_tokens_to_ids(token) for key, token in (
        ("image_token_id", "<|image_pad|>"), ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"), ("vision_end_token_id", "<|vision_end|>"))}
    text = {**TEXT[dims], "eos_token_id": tok.convert_tokens_to_ids("<|im_end|>"), "pad_token_id": tok.pad_token_id,
            "bos_token_id": None}
    tied = text.pop("tie_word_embeddings", False)
    config = Qwen3VLConfig(vision_config=load_config(VISION[dims]).vision, text_config=text, tie_word_embeddings=tied,
                           **ids)
    torch.manual_seed(seed)
    return Qwen3VLForConditionalGeneration(config).eval().to(DTYPE[dims])


def write(out: str | Path, dims: str = "tiny", seed: int = 0, force: bool = False) -> Path:
    """Write the checkpoint folder `out` (config.json, model.safetensors, tokenizer, preprocessor_config.json)."""
    tok = tokenizer()
    with staged_folder(out, STAGE, force=force) as tmp:
        vlm = model(dims, tok, seed)
        vlm.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        vision = vlm.config.vision_config
        preprocess.save_config(tmp, patch_size=vision.patch_size, temporal_patch_size=vision.temporal_patch_size,
                               merge_size=vision.spatial_merge_size)
        del vlm
    say(f"wrote {out}/: random Qwen3VLForConditionalGeneration ({dims} dims, seed {seed}) with its tokenizer")
    return Path(out)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m builders.random_checkpoint", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="the checkpoint folder to write")
    parser.add_argument("--dims", choices=sorted(TEXT), default="tiny", help="tiny (default) or 2b")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights (default 0)")
    parser.add_argument("--force", action="store_true", help="replace an existing --out folder")

    def run() -> int:
        args = parser.parse_args(argv)
        write(args.out, args.dims, args.seed, args.force)
        return 0

    return main_wrapper(run)


if __name__ == "__main__":
    sys.exit(main())
