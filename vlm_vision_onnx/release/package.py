"""Build a release package from the stage folders of one build (torch-free).

`build/NAME/{export,surgery,optimized,int8,int4,fp16}/` -> `dist/PACKAGE/`:

    onnx/vision_encoder.onnx [+ vision_encoder.onnx_data]   fp32 (see release/stages.py for which stage)
    onnx/vision_encoder_fp16.onnx, _int8.onnx, _q4.onnx    one per fp16 / quantized stage present
    config.json, preprocessor_config.json                  the family's `release` (families/<family>/release.py);
                                                           config.json lists the variants (`onnx_variants`)
    manifest.json                                          release/manifest.py
    README.md                                              release/card.py (from the manifest alone)
    SHA256SUMS                                             `sha256sum -c` format, every other file
    onnx/vision_encoder_static_WxH[_qdq|_fp16].onnx        per `static-WxH/` folder of the build (its export, qnn
                                                           and fp16 stages: release/stages.py, docs/npu.md), listed
                                                           under `static_buckets` in config.json and the manifest

and `dist/PACKAGE.tar.gz` (release/tarball.py, reproducible). PACKAGE is the export's model name
(`qwen3-vl-2b` for `build/qwen3-vl`). The folder is written to a temp folder beside it and renamed
when complete; the tarball likewise.
"""

from __future__ import annotations

import json
from pathlib import Path

from vlm_vision_onnx.core import onnx_io, session
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.core.progress import say, step
from vlm_vision_onnx.core.staging import staged_folder
from vlm_vision_onnx.families import family
from vlm_vision_onnx.release import card, stages, tarball
from vlm_vision_onnx.release import manifest as manifest_mod
from vlm_vision_onnx.runtime import smoke
from vlm_vision_onnx.runtime.verify import CARD, FORMAT, MANIFEST, SUMS, sha256

STAGE = "package"
#: Files describing the package, not listed in the manifest's `files` (SHA256SUMS covers them).
DESCRIPTIONS = (MANIFEST, CARD, SUMS)


def smoke_shapes(family_name: str, folder: Path, model: Path, threads: int | None) -> list[dict]:
    """[{size, inputs: {name: shape}, values: {integer input: its values}, outputs: {name: shape}}] of the fp32
    model at the smoke sizes, with the processor of `folder`/preprocessor_config.json."""
    sess = session.open_session(model, threads)
    records = []
    for size, feeds in smoke.smoke_cases(family_name, folder):
        outputs = session.run(sess, feeds)
        records.append({"size": size, "inputs": {k: list(v.shape) for k, v in feeds.items()},
                        "values": smoke.integer_values(feeds),
                        "outputs": {k: list(v.shape) for k, v in outputs.items()}})
    return records


def sums_text(folder: Path, known: dict[str, dict] | None = None) -> str:
    """`sha256  path` lines (sorted) of every file under `folder` but SHA256SUMS itself; files in `known`
    ({path: {sha256}}, the manifest's records) are not hashed again."""
    known = known or {}
    paths = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    lines = [f"{known[p]['sha256'] if p in known else sha256(folder / p)}  {p}" for p in paths if p != SUMS]
    return "\n".join(lines) + "\n"


def is_package(folder: Path) -> bool:
    """Whether `folder` is an earlier package (its manifest says so): replacing it is safe."""
    try:
        return json.loads((folder / MANIFEST).read_text()).get("format") == FORMAT
    except (OSError, ValueError, AttributeError):
        return False


def package_files(folder: Path) -> set[str] | None:
    """The files an earlier package lists as its own (SHA256SUMS's and SHA256SUMS itself); None when `folder` is
    not a package: what `core.staging` may replace there."""
    if not is_package(folder):
        return None
    try:
        lines = (folder / SUMS).read_text(errors="replace").splitlines()
    except OSError:
        return None
    return {line.split("  ", 1)[1] for line in lines if "  " in line} | {SUMS}


def package(build: str | Path, dist: str | Path = "dist", name: str | None = None,
            threads: int | None = None, force=False) -> tuple[Path, Path]:
    """Write `dist/NAME/` and `dist/NAME.tar.gz` from the stage folders in `build`; return both paths.
    An existing `dist/NAME/` is replaced only when it is an earlier package holding only its listed files (or with
    `force` = `core.staging.CLOBBER`)."""
    timings: dict[str, float] = {}
    found = stages.read_build(build)
    manifest_mod.check_reports(found)  # a malformed report is refused before any work
    export = found["export"].report
    fam = family(export.get("family", "?"))
    name = name or export.get("model") or Path(build).name
    chosen = stages.variants(found)
    fp32 = chosen[0]
    static = stages.read_static(build, found["export"])
    static_files = [v for b in static for v in b.variants]
    metadata = onnx_io.metadata(fp32.stage.model)
    out = Path(dist) / name
    archive = Path(dist) / f"{name}.tar.gz"
    earlier = force or (out.is_dir() and is_package(out))
    if archive.exists() and not earlier:
        raise UsageError(f"{archive} exists but {out}/ is not an earlier package beside it; refusing to replace "
                         "it: move it away, give --dist/--name, or --force to replace it")
    say(f"package {name}: fp32 from the {fp32.stage.name} stage"
        + "".join(f", {v.name} from {v.stage.name}" for v in chosen[1:])
        + (f"; static buckets {', '.join(b.size.name for b in static)} ({len(static_files)} files)" if static else ""))
    with staged_folder(out, STAGE, inputs=[build], force=earlier, listed=package_files) as tmp:
        onnx_dir = tmp / "onnx"
        with step(f"copy {len(chosen) + len(static_files)} model(s)", timings, "copy"):
            for v in [*chosen, *static_files]:
                v.copy_to(tmp)
        with step("write config.json and preprocessor_config.json", timings, "configs"):
            fam.release.write_config(export, metadata, tmp)
            stages.list_in_config(tmp / "config.json", chosen, static)
            fam.release.write_processor(export, metadata, tmp)
        with step("run fp32 at the smoke sizes", timings, "smoke"):
            smoke_records = smoke_shapes(fam.name, tmp, onnx_dir / fp32.file, threads)
        with step("checksums, manifest, model card", timings, "manifest"):
            files = {p.relative_to(tmp).as_posix(): manifest_mod.file_record(p)
                     for p in sorted(tmp.rglob("*")) if p.is_file()}
            proto = onnx_io.read_proto(onnx_dir / fp32.file)
            static_protos = [(b, onnx_io.read_proto(onnx_dir / b.variants[0].file)) for b in static]
            with manifest_mod.reports_read(found):
                manifest = manifest_mod.build(name, fam, found, chosen, proto, smoke_records, files, static_protos)
                manifest_mod.add_speed(manifest, Path(build), chosen)
            onnx_io.write_json(tmp / MANIFEST, manifest)
            (tmp / CARD).write_text(card.render(manifest))
            (tmp / SUMS).write_text(sums_text(tmp, files))
    with step(f"write {out}.tar.gz", timings, "tarball"):
        tarball.write(out, archive, top=name)
    size = sum(f["size"] for f in files.values())
    say(f"wrote {out}/ ({len(files) + len(DESCRIPTIONS)} files, {size / 2**20:.1f} MiB) and {archive} "
        f"({archive.stat().st_size / 2**20:.1f} MiB)")
    return out, archive
