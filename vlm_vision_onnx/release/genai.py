"""`python -m release genai BUILD --checkpoint CKPT --out DIR`: a folder onnxruntime-genai 0.18.0 loads as it is.

    DIR/genai_config.json       genai's builder's config, the family's type (qwen3_vl, qwen2_5_vl, qwen3_5:
                                families/shipping.py), + vision and embedding sections
    DIR/model.onnx[.data]       the text decoder (inputs_embeds), from genai's builder (release/genai_decoder.py)
    DIR/vision.onnx[.data]      BUILD's encoder under genai's I/O names, DeepStack outputs removed
                                (release/genai_vision.py)
    DIR/embedding.onnx[.data]   input_ids + image_features -> inputs_embeds (release/genai_embedding.py)
    DIR/processor_config.json   genai's image pipeline with the model's processor settings
                                (release/genai_config.py)
    DIR/tokenizer.json, tokenizer_config.json   the checkpoint's tokenizer, as genai's builder saved it
    DIR/report.json             what went in (stage, variant, checkpoint, decoder), what was dropped, the load check

BUILD is the stage folders of `make export` made from CKPT (`make export CHECKPOINT=CKPT`): the vision tower
is BUILD's, the decoder and the token embedding are CKPT's. Before anything is written CKPT is checked
(release/genai_checkpoint.py); DIR is written in a temp folder beside it and renamed only after
`og.Model(DIR)` loaded it and ran one step on a generated image (`load_check`). Bad input: one `error:`
line, exit 2, nothing written. torch is imported only by genai's builder, in its own process.

DeepStack: genai 0.18's C++ `qwen3_vl` pipeline feeds the decoder `inputs_embeds` only; the DeepStack
features transformers adds to the first decoder layers' hidden states at the image positions are dropped,
so generation differs from transformers' (docs/genai.md measures by how much).
"""

from __future__ import annotations

import io
import shutil
import tempfile
from pathlib import Path

import numpy as np

from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core import report as report_mod
from vlm_vision_onnx.core.errors import CheckFailed, UsageError
from vlm_vision_onnx.core.progress import say, step
from vlm_vision_onnx.core.staging import staged_folder
from vlm_vision_onnx.families import family
from vlm_vision_onnx.families.qwen_vl.generations import GENERATIONS
from vlm_vision_onnx.release import (
    genai_checkpoint,
    genai_config,
    genai_decoder,
    genai_embedding,
    genai_vision,
    stages,
)

STAGE = "genai"
#: Files of ours in a package folder: never taken from a --decoder folder.
OWN = (genai_vision.FILE, genai_embedding.FILE, genai_config.PROCESSOR, report_mod.REPORT)


def _og():
    try:
        import onnxruntime_genai as og
    except ImportError:
        raise UsageError("onnxruntime-genai is not installed: pip install '.[genai]' (onnxruntime-genai==0.18.0)"
                         ) from None
    return og


def _variant(found: dict[str, stages.Stage], name: str) -> stages.Variant:
    chosen = {v.name: v for v in stages.variants(found)}
    if name not in chosen:
        raise UsageError(f"--variant {name}: BUILD has {', '.join(chosen)} (quantized variants come from its "
                         "int8/ and int4/ stages)")
    return chosen[name]


def processor_settings(export: dict, metadata: dict) -> dict:
    """The model's image processor settings, as the release package's preprocessor_config.json holds them
    (the checkpoint's processor, else the generation's defaults: families/qwen_vl/release.py)."""
    from vlm_vision_onnx.families.qwen_vl import preprocess

    fam = family(export["family"])
    with tempfile.TemporaryDirectory(prefix="genai-processor-") as tmp:
        fam.release.write_config(export, metadata, Path(tmp))
        fam.release.write_processor(export, metadata, Path(tmp))
        return preprocess.load_processor(tmp).to_dict()


def _copy_decoder(folder: Path, dest: Path) -> None:
    for file in sorted(folder.iterdir()):
        if file.is_file() and file.name not in OWN:
            shutil.copyfile(file, dest / file.name)


def _probe_png() -> bytes:
    """A 96x128 RGB gradient as PNG bytes: the load check's image."""
    from PIL import Image

    y, x = np.mgrid[0:96, 0:128]
    rgb = np.stack([x * 2, y * 2, (x + y) % 256], axis=-1).astype(np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(rgb).save(buffer, format="PNG")
    return buffer.getvalue()


def load_check(folder: Path) -> dict:
    """Load `folder` with onnxruntime-genai (`og.Model`), run its processor on a generated image and the prefill
    (vision, embedding and decoder models); return {grid_thw, prompt_tokens, image_tokens, logits_shape}.
    CheckFailed when genai refuses the folder, the prompt's image tokens are not the grid's merged patches, or
    the logits are not finite."""
    og = _og()
    model_config = report_mod.read_json_object(folder / genai_config.CONFIG, "genai config", "write it again")["model"]
    try:
        model = og.Model(str(folder))
        processor = model.create_multimodal_processor()
        inputs = processor("<|vision_start|><|image_pad|><|vision_end|>", images=og.Images.open_bytes(_probe_png()))
        ids = inputs["input_ids"].as_numpy()
        grid = inputs["image_grid_thw"].as_numpy()
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=int(ids.shape[-1]) + 1, do_sample=False)
        generator = og.Generator(model, params)
        generator.set_inputs(inputs)
        logits = np.asarray(generator.get_logits())
    except RuntimeError as err:
        raise CheckFailed(f"onnxruntime-genai {og.__version__} does not run the package: {err}") from None
    if not np.isfinite(logits).all():
        raise CheckFailed("onnxruntime-genai ran the package but its first-step logits are not finite")
    image_tokens = int((ids == model_config["image_token_id"]).sum())
    merged = int(np.prod(grid, axis=1).sum()) // model_config["vision"]["spatial_merge_size"] ** 2
    if image_tokens != merged:
        raise CheckFailed(f"onnxruntime-genai's processor wrote {image_tokens} image tokens for the grid "
                          f"{grid.tolist()}, which has {merged} merged patches")
    return {"grid_thw": grid.tolist(), "prompt_tokens": int(ids.shape[-1]), "image_tokens": image_tokens,
            "logits_shape": list(logits.shape)}


def genai(build: str | Path, checkpoint: str | Path, out: str | Path, decoder: str | Path | None = None,
          variant: str = "fp32", precision: str = "fp32", force: bool = False) -> Path:
    """Write the onnxruntime-genai package of BUILD + CKPT into `out` (see the module docstring); return `out`."""
    timings: dict[str, float] = {}
    og = _og()
    found = stages.read_build(build)
    export = found["export"].report
    declared = family(export.get("family"), f"{build}/export/report.json")
    kind = declared.shipping.genai_type
    if kind is None:
        raise UsageError(f"BUILD {build} holds a {declared.name} encoder: {declared.shipping.genai}")
    chosen = _variant(found, variant)
    metadata = onnx_io.metadata(chosen.stage.model)
    ckpt = genai_checkpoint.read(checkpoint, export, metadata, GENERATIONS[declared.name].architecture)
    hidden = int(ckpt.text["hidden_size"])
    if decoder is not None:
        genai_decoder.check(Path(decoder), hidden)
    settings = processor_settings(export, metadata)
    processor = genai_config.processor_config(settings, kind)  # refuses what genai cannot express, before any work
    inputs = [build, checkpoint] + ([decoder] if decoder is not None else [])
    with staged_folder(out, STAGE, inputs=inputs, force=force) as tmp:
        with step("decoder" + (f" from {decoder}" if decoder else f" ({precision}, genai's builder)"), timings,
                  "decoder"):
            if decoder is not None:
                _copy_decoder(Path(decoder), tmp)
            else:
                genai_decoder.build(ckpt.folder, tmp, precision)
            genai_decoder.check(tmp, hidden)
        decoder_config = report_mod.read_json_object(tmp / genai_config.CONFIG, "genai config", "build it again")
        with step(f"vision model from the {chosen.stage.name} stage ({variant})", timings, "vision"):
            vision = genai_vision.write(chosen.stage.model, tmp)
        with step("embedding model", timings, "embedding"):
            embed_tokens = genai_checkpoint.tensor(ckpt.folder, genai_checkpoint.EMBED_NAMES)
            embedding = genai_embedding.write(embed_tokens, ckpt.token_id("image_token_id"), tmp)
            del embed_tokens
        tokens = {key: ckpt.token_id(key) for key in genai_config.TOKEN_KEYS}
        config = genai_config.genai_config(decoder_config, tokens, vision, embedding, ckpt.config["vision_config"],
                                           kind)
        onnx_io.write_json(tmp / genai_config.CONFIG, config)
        onnx_io.write_json(tmp / genai_config.PROCESSOR, processor)
        with step("load in onnxruntime-genai and run one step", timings, "check"):
            check = load_check(tmp)
        report_mod.write(tmp, {
            "stage": STAGE, "family": declared.name, "type": kind.type, "model": export.get("model"),
            "onnxruntime_genai": og.__version__,
            "checkpoint": str(ckpt.folder), "vision": {"stage": chosen.stage.name, "variant": variant, **vision},
            "embedding": embedding,
            "decoder": {"source": str(decoder) if decoder is not None else "genai's builder",
                        "precision": None if decoder is not None else precision},
            "deepstack": ("dropped: onnxruntime-genai's qwen3_vl pipeline feeds the decoder inputs_embeds only, "
                          "so the DeepStack features are not added to its first layers (docs/genai.md)")
                         if vision["dropped_outputs"] else "none: the model has no DeepStack",
            "load_check": check, **report_mod.footer(timings)})
    dropped = f"; DeepStack dropped ({', '.join(vision['dropped_outputs'])})" if vision["dropped_outputs"] else ""
    say(f"wrote {out}/: onnxruntime-genai {og.__version__} loads it as {kind.type} (og.Model){dropped}")
    return Path(out)
