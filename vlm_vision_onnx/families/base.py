"""The family protocol: one declared `Family` object per model family, torch-free.

Every stage after the export (surgery, quantize, release, the product runtime, bench) reads what it
needs of a model from its family's object, found by the `family` key of the ONNX metadata or of the
release manifest. The torch side of a family (eager model, patcher, checkpoint loading, export module)
lives in `builders/<family>/` and is named by `builder`.

Inputs always travel as `{name: array}` in `input_names` order, never as model-specific tuples.
A *layout* is the JSON facts of one validation case from which inputs of the same shapes and structure
are rebuilt with random pixels (Qwen3-VL: `grid_thw`; Phi-4-multimodal: each image's crop grid and
valid patches); stage reports record it per case, so each stage's report carries its own layouts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from vlm_vision_onnx.families.shipping import Shipping

Inputs = dict[str, np.ndarray]
Metadata = dict[str, str]  # ONNX metadata_props as written by the export stage

#: The consumers' contract: the name of every family's first output, the image (and video) features the
#: language model takes. transformers.js (4.3.1: `encode_image` reads `.image_features` of the `vision_encoder`
#: session) and onnxruntime-genai (the vision model's `image_features`) read it by this name; every stage and
#: every package variant carries it. Extra outputs (Qwen3-VL's DeepStack features) follow it.
FEATURES = "image_features"


@dataclass
class Pack:
    """One model run: the feeds by input name, and per entry its name, source files, facts and token count."""

    feeds: dict[str, np.ndarray]
    names: list[str] = field(default_factory=list)
    sources: list[list[str]] = field(default_factory=list)
    facts: list[dict[str, np.ndarray]] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Release:
    """What a release package needs: `write_config` / `write_processor` take (export report, ONNX
    metadata, destination folder), write `config.json` / `preprocessor_config.json` and return it;
    `accepts` is what one call takes (model card); `usage` is Python running the package on a photo
    (PACKAGE and FILE stand for the folder and model file)."""

    write_config: Callable[[dict, Metadata, Path], dict]
    write_processor: Callable[[dict, Metadata, Path], dict]
    accepts: str
    usage: str


@dataclass(frozen=True)
class Processing:
    """The product runtime's preprocessing from a package folder (numpy + pillow, no torch):
    `processor(folder)` -> the processor (or its settings) from preprocessor_config.json;
    `image_inputs(image, processor)` -> {name: array} for one RGB uint8 image [H, W, 3];
    `load_processor(folder)` raises UsageError unless preprocessor_config.json loads as the model's processor;
    `embed_pack(folder, images, frames)` -> `Pack`: images [(path, RGB uint8 [H, W, 3])] and the frames of
    one video (same form; [] for none) preprocessed and packed for one model run;
    `max_pixels(folder)` -> the most pixels the processor keeps of one image (larger ones it downsizes): the base
    of the runtime's pixel budget (`runtime.images.pixel_budget`).
    No loader runs code from the package: processors are built by their explicit class, a config with an
    `auto_map` is refused (`families.untrusted`)."""

    processor: Callable[[Path], object]
    image_inputs: Callable[[np.ndarray, object], Inputs]
    load_processor: Callable[[Path], object]
    embed_pack: Callable[[Path, list, list], object]
    max_pixels: Callable[[Path], int]


@dataclass(frozen=True)
class StaticForm:
    """What the torch-free stages need of a family's static models (`builders.vision --static`, metadata
    `static_size`: one layout, every dim numeric; docs/npu.md).

    `feeds(rgb, metadata)` -> the inputs of a static model for one RGB uint8 image [H, W, 3] of any size, resized to
    the model's one size. `layout(metadata)` -> the JSON facts of its one layout, keys `layout_keys` (Qwen:
    {grid_thw: [t, h, w]}; Phi-4: {image_size: [H, W] of the HD canvas, num_crops: C with the global crop}): what a
    package's static bucket records (runtime/buckets.py) and what `runtime embed` writes per entry, under the names
    the dynamic engines write them.
    """

    layout_keys: tuple[str, ...]
    layout: Callable[[Metadata], dict]
    feeds: Callable[[np.ndarray, Metadata], Inputs]


@dataclass(frozen=True)
class Family:
    """One model family as the torch-free stages see it.

    I/O contract: `input_names` (in order), `input_types` ({input: (dtype, rank)}), `output_names(metadata)`, `dims` {symbolic dim: what it
    counts}, `check_inputs(inputs, metadata)` (UsageError saying what the processor could not have made).
    Metadata: `metadata_keys`, written by the export and read by later stages.
    Layouts: `case_layout(inputs)` -> JSON facts (`layout_keys` among them), `layout_inputs(layout,
    metadata, rng)` -> random inputs of that layout, `default_layouts(metadata)` -> [(case, layout)] for a
    model whose report lists none (same-size-other-layout cases included), `layout_pixels(layout, metadata)` ->
    the pixels of the layout's largest image or video frame as the model sees it (the processor's resize done):
    how large the images were that a variant's gates measured (`runtime.path_choice`).
    Stages: `optimize_passes` (names of quantize.optimize.PASSES, in order) and `optimize_options(metadata)`
    (keyword options of the ORT transformer-optimizer pass); `surgery_checks` (what `python -m surgery
    stage` runs: "debake", "audit", "claims").
    Shipping: `shipping` (`families.shipping.Shipping`: tiny config, quantize flags, sweep points, genai type).
    Static models: `static` (`StaticForm`: their inputs for a photo and the facts of their one layout).
    """

    name: str
    title: str
    builder: str
    input_names: tuple[str, ...]
    input_types: dict[str, tuple[str, int]]
    output_names: Callable[[Metadata], list[str]]
    dims: dict[str, str]
    check_inputs: Callable[[Inputs, Metadata], None]
    metadata_keys: tuple[str, ...]
    layout_keys: tuple[str, ...]
    case_layout: Callable[[Inputs], dict]
    layout_inputs: Callable[[dict, Metadata, np.random.Generator], Inputs]
    default_layouts: Callable[[Metadata], list[tuple[str, dict]]]
    layout_pixels: Callable[[dict, Metadata], int]
    optimize_passes: tuple[str, ...]
    optimize_options: Callable[[Metadata], dict]
    surgery_checks: tuple[str, ...]
    release: Release
    processing: Processing
    shipping: Shipping
    static: StaticForm
