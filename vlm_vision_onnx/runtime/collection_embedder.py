"""The work of one chunk of `embed-collection` under either scheduler: `Embedder` reads, packs and embeds
entries into rows (runtime/collection.py describes the packing; runtime/collection_ray.py runs it on Ray actors).
Its own module, so that both schedulers import it and neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vlm_vision_onnx.core import engine as engines
from vlm_vision_onnx.core import session
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.families import family
from vlm_vision_onnx.families.base import Pack
from vlm_vision_onnx.runtime import collection_io, embed, images

#: The tag of the command's progress lines (both schedulers).
TAG = "embed-collection"


@dataclass
class Prepared:
    """One entry read and preprocessed alone: its files, decoded pixels (RGB uint8 [H, W, 3] per image or
    frame) and its one-entry `Pack` (feeds, facts, token count)."""

    path: str
    file: Path
    video: bool
    pixels: list[tuple[Path, np.ndarray]]
    pack: Pack

    @property
    def tokens(self) -> int:
        return self.pack.tokens[0]


class Embedder:
    """One session of a package variant (`engine`: ONNX Runtime or OpenVINO; `threads` intra-op); `rows` embeds
    one chunk.

    `folder`: the unpacked package; `columns`: 'embedding' (the first output, image_features
    [tokens, hidden]) then the DeepStack output names to keep (each [tokens, hidden])."""

    def __init__(self, folder: str, variant: str, threads: int | None, max_tokens: int, columns: list[str],
                 checksum: str, engine: engines.Engine = engines.DEFAULT, max_pixels: int | None = None):
        self.folder = Path(folder)
        manifest = embed.read_manifest(self.folder)
        self.family = manifest["family"]
        self.processing = family(self.family).processing
        self.model = embed.model_file(self.folder, manifest, variant)
        self.session = engine.open(self.model, threads)
        self.outputs = session.output_names(self.session)[: len(columns)]
        self.variant, self.max_tokens, self.columns, self.checksum = variant, max_tokens, columns, checksum
        self.max_pixels = max_pixels  # the pixel budget of one image or frame (runtime.images.pixel_budget)
        # OpenVINO runs each entry alone, as `runtime embed` does (`Engine.one_entry_per_run`); so every entry runs
        # on the model compiled for one image or one video (core.openvino_branches) and equals `embed` bit for bit
        self.one_entry = engine.one_entry_per_run

    def prepare(self, path: str, file: Path) -> Prepared:
        """Read and preprocess one entry alone; UsageError (naming the file) when it cannot be."""
        try:
            folder = file.is_dir()
        except (OSError, ValueError):  # a name too long, a NUL byte: reading it as a file says so
            folder = False
        if folder:
            frames = [(p, images.load_rgb(p, self.max_pixels)) for p in images.expand([file])]
            return Prepared(path, file, True, frames, self.processing.embed_pack(self.folder, [], frames))
        pixels = [(file, images.load_rgb(file, self.max_pixels))]
        return Prepared(path, file, False, pixels, self.processing.embed_pack(self.folder, pixels, []))

    def groups(self, prepared):
        """Consecutive entries in packs of at most `max_tokens` tokens and one video (generator of lists); one
        entry per pack on an engine that runs each entry alone (OpenVINO)."""
        group: list[Prepared] = []
        for entry in prepared:
            full = group and (self.one_entry or sum(p.tokens for p in group) + entry.tokens > self.max_tokens
                              or (entry.video and any(p.video for p in group)))
            if full:
                yield group
                group = []
            group.append(entry)
        if group:
            yield group

    def run_group(self, group: list[Prepared]) -> list[dict]:
        """Rows of one pack: images in order, then the video (the order `embed_pack` names them)."""
        members = [p for p in group if not p.video] + [p for p in group if p.video]
        try:
            pack = members[0].pack if len(members) == 1 else self.processing.embed_pack(
                self.folder, [px for p in members if not p.video for px in p.pixels],
                next((p.pixels for p in members if p.video), []))
        except UsageError:  # each entry preprocessed alone; a pack of them should too
            return [row for p in members for row in self.run_group([p])]
        feeds = embed.cast_feeds(self.session, pack.feeds, self.model.relative_to(self.folder), self.family)
        try:
            outputs = session.run(self.session, feeds)
        except (*session.ORT_ERRORS, MemoryError) as err:
            if len(members) > 1:
                return [row for p in members for row in self.run_group([p])]
            reason = "out of memory" if isinstance(err, MemoryError) else session.ort_error_line(err)
            return [{"path": members[0].path, "error": f"ONNX Runtime failed on {members[0].file}: {reason}"}]
        split = embed.split({name: outputs[name] for name in self.outputs}, pack)
        return [{"path": p.path, "grid": np.concatenate([np.ravel(v) for v in facts.values()]),
                 "features": [split[f"{name}.{output}"] for output in self.outputs]}
                for p, name, facts in zip(members, pack.names, pack.facts)]

    def rows(self, paths: list[str], files: list[str]):
        """A pyarrow Table of the chunk's rows (`collection_io.SCHEMA_DOC`), one per entry, errors included."""
        rows: list[dict] = []

        def prepared():
            for path, file in zip(paths, files):
                try:
                    yield self.prepare(path, Path(file))
                except UsageError as err:
                    rows.append({"path": path, "error": str(err)})

        for group in self.groups(prepared()):
            rows.extend(self.run_group(group))
        return collection_io.rows_table(rows, self.columns, self.variant, self.checksum)
