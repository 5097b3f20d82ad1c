"""The stage folders of one build (`build/NAME/<stage>/`: model.onnx [+ data] and report.json) and
which of them become the package's variants.

fp32: the optimized stage when present (the fastest fp32 graph, validated against its input), else
surgery, else the raw export. Other variants: every fp16 or quantized stage present, as the table of variants says
(`release.variants.VARIANTS`: stage, file, runtime); `config.json` lists the ONNX ones (`CONFIG_KEY`,
`list_in_config`); the OpenVINO IR (`ov-int8`) is not listed there (CONFIG_KEY is an ONNX list).

Static buckets (`make export STATIC=WxH`, docs/npu.md): each `static-WxH/` folder of the build (`STATIC_PREFIX`) with
its stages export, qnn and fp16 (`STATIC_STAGES`) becomes `onnx/vision_encoder_static_WxH.onnx` (fp32),
`..._WxH_qdq.onnx` and `..._WxH_fp16.onnx` (`StaticVariant`, the one place that names them), listed under
`runtime.buckets.KEY` (not CONFIG_KEY: a static file takes one size only).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from vlm_vision_onnx.core import onnx_io
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.report import read_json_object
from vlm_vision_onnx.families import family
from vlm_vision_onnx.families.static_size import StaticSize
from vlm_vision_onnx.release.variants import BASE_NAME, BY_STAGE, VARIANTS
from vlm_vision_onnx.runtime import buckets

#: Stage folders: the export and surgery stages, then each variant's in the package's order (the variants' stages
#: each read the optimized stage; q4f16 reads it and int4's recipe).
STAGES = ("export", "surgery", *(v.stage for v in VARIANTS.values()))
#: fp32 candidates, preferred first.
FP32_STAGES = ("optimized", "surgery", "export")
#: The key of config.json that lists the package's variants: {dtype: file}.
CONFIG_KEY = "onnx_variants"
#: A static bucket's folder in a build: `static-` + `families.static_size.StaticSize.name` (WxH, FxWxH).
STATIC_PREFIX = "static-"
#: A static bucket's stage folders -> their variant names in the package, in package order (fp32 first).
STATIC_STAGES = {"export": "fp32", "qnn": "qdq", "fp16": "fp16"}
#: Metadata a static export shares with the dynamic export of the same build (else the build mixes models).
SAME_MODEL_KEYS = ("family", "model", "weights", "seed")


@dataclass
class Stage:
    """One stage folder: its name, model file and report."""

    name: str
    folder: Path
    model: Path
    report: dict


@dataclass
class Variant:
    """A model file of the package: `name` (fp32, int8, q4: `release.variants.VARIANTS`), its stage and its file."""

    name: str
    stage: Stage

    @property
    def folder(self) -> str:
        """The package folder of its file: onnx/, or openvino/ for an IR."""
        return VARIANTS[self.name].folder

    @property
    def file(self) -> str:
        return VARIANTS[self.name].file

    @property
    def path(self) -> str:
        """Its file in the package: `onnx/FILE` or `openvino/FILE`."""
        return f"{self.folder}/{self.file}"

    def owns(self, path: str) -> bool:
        """Whether the package file `path` is this variant's (its model, external data, IR weights)."""
        return path.startswith(self.path) or (self.folder == "openvino" and path == self.path[:-4] + ".bin")

    def copy_to(self, package: Path) -> None:
        """Copy its stage's model into the package folder `package` under `path`."""
        folder = package / self.folder
        folder.mkdir(exist_ok=True)
        if self.folder == "openvino":
            for suffix in (".xml", ".bin"):
                shutil.copyfile(self.stage.model.with_suffix(suffix), (folder / self.file).with_suffix(suffix))
        else:
            onnx_io.copy_model(self.stage.model, folder, self.file, data_name=f"{self.file}_data")


def read_stage(folder: Path, name: str) -> Stage | None:
    """The stage in `folder`, or None when the folder does not exist; UsageError when it is incomplete."""
    if not folder.exists():
        return None
    model_file = BY_STAGE[name].model_file if name in BY_STAGE else onnx_io.MODEL_FILE
    model, report = folder / model_file, folder / "report.json"
    if not model.is_file() or not report.is_file():
        raise UsageError(f"stage folder {folder} lacks {model.name if not model.is_file() else 'report.json'}; "
                         f"re-run the {name} stage (make export)")
    data = read_json_object(report, "stage report", f"re-run the {name} stage")
    return Stage(name, folder, model, data)


def read_build(build: str | Path) -> dict[str, Stage]:
    """{stage name: Stage} of the stages present in `build`, in pipeline order; export is required."""
    build = Path(build)
    if not build.is_dir():
        raise UsageError(f"build folder {build} does not exist; run `make export MODEL=...` first")
    stages = {name: s for name in STAGES if (s := read_stage(build / name, name)) is not None}
    if "export" not in stages:
        static = any(p.is_dir() for p in build.glob(f"{STATIC_PREFIX}*"))
        raise UsageError(f"{build} has no export stage (export/model.onnx + report.json); run `make export` first"
                         + ("; a package ships its static buckets beside the dynamic export, so run it without "
                            "STATIC too" if static else ""))
    return stages


def variants(stages: dict[str, Stage]) -> list[Variant]:
    """fp32 first, then one variant per fp16 or quantized stage present (the order of VARIANTS).

    UsageError when a variant's stage was made before the fp32 stage (`created` in the reports): it was
    made from an earlier build (`make export` without FP16=1 leaves an older `fp16/` as it was)."""
    fp32 = next(stages[name] for name in FP32_STAGES if name in stages)
    chosen = [Variant(v.name, stages[v.stage]) for v in list(VARIANTS.values())[1:] if v.stage in stages]
    for v in chosen:
        if v.stage.report.get("created", "") < fp32.report.get("created", ""):
            raise UsageError(f"{v.stage.folder} ({v.stage.report.get('created')}) is older than the fp32 stage "
                             f"{fp32.folder} ({fp32.report.get('created')}): it was made from an earlier "
                             f"build; re-run the {v.stage.name} stage on it, or remove {v.stage.folder}")
    return [Variant("fp32", fp32)] + chosen


def list_in_config(config_file: Path, chosen: list[Variant], static: list[StaticBucket] = ()) -> dict:
    """Add {dtype: `onnx/FILE`} of every variant to config.json under CONFIG_KEY, and the static buckets (if any)
    under `runtime.buckets.KEY`; return the config."""
    config = json.loads(config_file.read_text())
    config[CONFIG_KEY] = {v.name: v.path for v in chosen if v.folder == "onnx"}
    if static:
        config[buckets.KEY] = buckets.config_entries({"family": static[0].metadata["family"],
                                                      buckets.KEY: [bucket_head(b) for b in static]})
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    return config


@dataclass
class StaticVariant(Variant):
    """A file of a static bucket: `name` fp32 | qdq | fp16 (STATIC_STAGES), its stage, and the bucket's size:
    `onnx/vision_encoder_static_WxH[_qdq|_fp16].onnx`."""

    size: StaticSize | None = None

    @property
    def folder(self) -> str:
        return "onnx"

    @property
    def file(self) -> str:
        suffix = "" if self.name == "fp32" else f"_{self.name}"
        return f"{BASE_NAME}_static_{self.size.name}{suffix}.onnx"


@dataclass
class StaticBucket:
    """One `static-WxH/` folder of a build: its size, its fp32 static export's metadata, and its variants (fp32
    first)."""

    size: StaticSize
    metadata: dict[str, str]
    variants: list[StaticVariant]


def read_static(build: str | Path, dynamic: Stage) -> list[StaticBucket]:
    """The static buckets of `build` (none when it has no `static-*/` folder), ordered by frames, width, height.

    UsageError when a folder's name is not a size, it lacks its export stage, its export is of another size or of
    another model than `dynamic` (the build's export stage), or a variant is older than its export."""
    dynamic_meta = onnx_io.metadata(dynamic.model)
    found = []
    for folder in sorted(p for p in Path(build).glob(f"{STATIC_PREFIX}*") if p.is_dir()):
        try:
            size = StaticSize.parse(folder.name.removeprefix(STATIC_PREFIX))
        except UsageError:
            raise UsageError(f"{folder} is not a static bucket folder ({STATIC_PREFIX}WIDTHxHEIGHT); rename or remove "
                             "it") from None
        present = {name: s for name in STATIC_STAGES if (s := read_stage(folder / name, name)) is not None}
        if "export" not in present:
            raise UsageError(f"{folder} has no export stage; run make export STATIC={size.name}, or remove {folder}")
        export = present["export"]
        metadata = onnx_io.metadata(export.model)
        if metadata.get("static_size") != size.name:
            raise UsageError(f"{export.model} is the static export of {metadata.get('static_size') or 'no size'}, "
                             f"not of its folder's {size.name}; re-run make export STATIC={size.name}")
        for key in SAME_MODEL_KEYS:
            if metadata.get(key) != dynamic_meta.get(key):
                raise UsageError(f"{export.model} has {key} {metadata.get(key)!r}, the build's export "
                                 f"{dynamic.model} {dynamic_meta.get(key)!r}: the build mixes models; re-run make "
                                 f"export STATIC={size.name} with the same model and weights")
        for stage in present.values():
            if stage.report.get("created", "") < export.report.get("created", ""):
                raise UsageError(f"{stage.folder} ({stage.report.get('created')}) is older than its static export "
                                 f"{export.folder} ({export.report.get('created')}): re-run make export "
                                 f"STATIC={size.name}, or remove {stage.folder}")
        variants = [StaticVariant(STATIC_STAGES[name], stage, size) for name, stage in present.items()]
        found.append(StaticBucket(size, metadata, variants))
    return sorted(found, key=lambda b: (b.size.frames, b.size.width, b.size.height))


def bucket_head(bucket: StaticBucket) -> dict:
    """What manifest.json (`runtime.buckets.KEY`) and config.json say first of a bucket: size, frames (a video's),
    the facts of its layout (its family's `StaticForm.layout`: a Qwen grid_thw, Phi-4's image_size and num_crops)
    and each variant's name and file."""
    size = bucket.size
    return {"size": [size.width, size.height], **({"frames": size.frames} if size.frames else {}),
            **family(bucket.metadata["family"]).static.layout(bucket.metadata),
            "variants": [{"name": v.name, "file": v.path} for v in bucket.variants]}
