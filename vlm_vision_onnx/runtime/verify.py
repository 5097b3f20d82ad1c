"""`python -m runtime verify dist/NAME | dist/NAME.tar.gz`: prove a release package intact and runnable.

Checks, in order (the first failure ends the run with exit 1 and one `error: FILE: reason` line):
1. the tarball (if given) unpacks safely (runtime/unpack.py);
2. checksums: every file listed in SHA256SUMS exists and matches, and no file is unlisted;
3. the manifest: its format, its `files` (sha256 and size) against SHA256SUMS, every variant's file
   and sizes; per variant, the model's metadata (family, model), I/O names, dtypes and dims, and opset
   against the manifest; config.json against the model's metadata; neither config asks for code of its own
   (an `auto_map`: refused, nothing of the package ever runs); preprocessor_config.json loads as the family's
   processor by its explicit class (transformers' torch-free PIL backend; never AutoImageProcessor);
4. every variant loads in ONNX Runtime and runs at the smoke sizes (runtime/smoke.py: random pixels,
   as the processor grids an image of that size); every output has the shape the manifest recorded
   for that size and only finite values;
5. when the openvino package is installed (the openvino extra): the fp32 variant runs in OpenVINO at the smoke
   sizes, in f32 within the export's tolerance of ONNX Runtime's outputs and, where the CPU has bf16, in bf16
   at a min per-token cosine of at least `core.engine.BF16_FLOOR` against them (what `--engine openvino`
   runs by default there); each OpenVINO IR variant (ov-int8) runs there at its own floor
   (runtime/verify_openvino.py; without OpenVINO an IR is checked by its checksums only, steps 1-3);
6. static buckets (a package of a build with `static-WxH/` folders, runtime/buckets.py): each file's metadata and I/O
   against its bucket, config.json's list, and a run at its own size only (runtime/verify_static.py).
Exit 2 (bad input) when the path is not a package at all.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from vlm_vision_onnx.core import session
from vlm_vision_onnx.core.errors import CheckFailed, UsageError
from vlm_vision_onnx.core.progress import say
from vlm_vision_onnx.families import family
from vlm_vision_onnx.families.base import FEATURES
from vlm_vision_onnx.families.untrusted import refuse_code
from vlm_vision_onnx.runtime import smoke, unpack
from vlm_vision_onnx.runtime.package_records import (
    check_file_records,
    check_run,
    fail,
    io_records,
    opsets,
    read_package_model,
)
from vlm_vision_onnx.runtime.unpack import sha256

TAG = "verify"
MANIFEST, SUMS, CARD = unpack.MANIFEST, unpack.SUMS, unpack.CARD
FORMAT = "vlm-vision-onnx-package/1"


def check_sums(folder: Path) -> dict[str, str]:
    """{path: sha256} of SHA256SUMS, after checking every listed file and that none is unlisted."""
    sums_file = folder / SUMS
    if not sums_file.is_file():
        fail(SUMS, "missing: a package lists the sha256 of every file in SHA256SUMS")
    sums = {}
    for number, line in enumerate(sums_file.read_text(errors="replace").splitlines(), 1):
        match = re.fullmatch(r"([0-9a-f]{64})  (\S.*)", line)
        if not match:
            fail(SUMS, f"line {number} is not `SHA256  PATH`: {line[:80]!r}")
        sums[match.group(2)] = match.group(1)
    for link in (p for p in folder.rglob("*") if p.is_symlink()):
        fail(link.relative_to(folder).as_posix(), "is a symbolic link; a package holds regular files only")
    for path, digest in sums.items():
        file = folder / path
        if Path(path).is_absolute() or ".." in Path(path).parts:
            fail(SUMS, f"lists {path!r}, outside the package")
        if not file.is_file():
            fail(path, "missing (listed in SHA256SUMS)")
        actual = sha256(file)
        if actual != digest:
            fail(path, f"sha256 {actual} does not match SHA256SUMS ({digest}): the file was changed or corrupted")
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if not p.is_dir())
    for path in on_disk:
        if path != SUMS and path not in sums:
            fail(path, "is not listed in SHA256SUMS (a file added to the package)")
    return sums


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        fail(MANIFEST, "missing")
    try:
        manifest = json.loads(path.read_text())
    except ValueError as err:
        fail(MANIFEST, f"is not valid JSON ({err})")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        fail(MANIFEST, f"format is not {FORMAT!r}")
    for key in ("name", "family", "model", "inputs", "outputs", "opset", "variants", "smoke", "files"):
        if key not in manifest:
            fail(MANIFEST, f"lacks the key {key!r}")
    return manifest


def check_manifest_files(manifest: dict, sums: dict[str, str], folder: Path) -> None:
    """The manifest's file records agree with SHA256SUMS and the files; every payload file is recorded."""
    for path, record in manifest["files"].items():
        if path not in sums:
            fail(path, "recorded in manifest.json but missing from SHA256SUMS and the package")
        if record.get("sha256") != sums[path]:
            fail(MANIFEST, f"records sha256 {record.get('sha256')} for {path}, SHA256SUMS {sums[path]}")
        size = (folder / path).stat().st_size
        if record.get("size") != size:
            fail(MANIFEST, f"records {record.get('size')} bytes for {path}, the file has {size}")
    for path in sums:
        if path not in manifest["files"] and path not in (MANIFEST, CARD):
            fail(path, "is not recorded in manifest.json")


def check_variant_model(manifest: dict, variant: dict, folder: Path) -> dict[str, str]:
    """One variant's file against the manifest; returns the model's metadata."""
    file = variant.get("file", "?")
    listed = variant.get("files") if isinstance(variant.get("files"), list) else []
    check_file_records(manifest, f"variant {variant.get('name')!r}", file, listed or [file], variant.get("size"))
    if file.endswith(".xml"):  # an OpenVINO IR (the ov-int8 variant): runtime/verify_openvino.py
        from vlm_vision_onnx.runtime import verify_openvino

        return verify_openvino.check_model(manifest, variant, folder)
    proto, meta = read_package_model(manifest, folder, file)
    outputs = [o.name for o in proto.graph.output]
    if not outputs or outputs[0] != FEATURES:
        fail(file, f"its first output is {outputs[0] if outputs else 'missing'!r}, not {FEATURES!r}, the name "
                   "transformers.js and onnxruntime-genai read the features by (families.base.FEATURES): "
                   "rebuild the package from a current export")
    for what in ("inputs", "outputs"):
        actual = io_records(proto.graph.input if what == "inputs" else proto.graph.output)
        if actual != manifest[what]:
            fail(file, f"{what} {actual} differ from manifest.json's {manifest[what]}")
    actual = opsets(proto)
    if variant.get("name") == "fp32" and actual != manifest["opset"]:
        fail(file, f"opsets {actual} differ from manifest.json's {manifest['opset']}")
    if actual.get("ai.onnx") != manifest["opset"].get("ai.onnx"):
        fail(file, f"opset ai.onnx {actual.get('ai.onnx')} differs from manifest.json's "
                   f"{manifest['opset'].get('ai.onnx')}")
    return meta


def check_configs(manifest: dict, meta: dict[str, str], folder: Path) -> None:
    """config.json agrees with the model's metadata; preprocessor_config.json loads as the model's processor."""
    for name in ("config.json", "preprocessor_config.json"):
        if name not in manifest["files"]:
            fail(MANIFEST, f"does not record {name}")
    try:
        config = json.loads((folder / "config.json").read_text())
        processor_config = json.loads((folder / "preprocessor_config.json").read_text())
    except ValueError as err:
        fail("config.json or preprocessor_config.json", f"is not valid JSON ({err})")
    if not isinstance(config, dict):
        fail("config.json", "is not a JSON object")
    for name, values in (("config.json", config), ("preprocessor_config.json", processor_config)):
        try:
            refuse_code(values, name)
        except UsageError as err:
            fail(name, str(err).removeprefix(f"{name} "))
    # a whole model's config (the Qwen generations) holds the tower's facts in vision_config
    nested = config.get("vision_config") if isinstance(config.get("vision_config"), dict) else {}
    for where, values in (("", config), ("vision_config.", nested)):
        for key, value in meta.items():
            if key in values and str(values[key] if not isinstance(values[key], list) else json.dumps(values[key])) \
                    != str(value):
                fail("config.json", f"{where}{key} = {values[key]} but the model records {value}")
    try:
        family(manifest["family"]).processing.load_processor(folder)
    except ImportError as err:
        raise UsageError(f"verify needs {err.name or 'transformers'} to load the processor: "
                         "pip install '.[runtime]'") from None
    except Exception as err:  # noqa: BLE001 -- whatever the loader raises, the file is what failed
        fail("preprocessor_config.json", f"does not load as the model's processor "
                                         f"({type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''})")


def run_smoke(manifest: dict, folder: Path, threads: int | None) -> int:
    """Run every variant at the smoke sizes; check output shapes and finiteness. Returns the runs made."""
    cases = smoke.smoke_cases(manifest["family"], folder)
    recorded = {case.get("size"): case for case in manifest["smoke"]}
    for size, feeds in cases:
        if size not in recorded:
            fail(MANIFEST, f"records no output shapes for the smoke size {size}")
        shapes = {k: list(v.shape) for k, v in feeds.items()}
        if recorded[size].get("inputs") != shapes:
            fail(MANIFEST, f"at {size} records input shapes {recorded[size].get('inputs')}, the processor "
                           f"gives {shapes}")
        values = smoke.integer_values(feeds)
        if recorded[size].get("values") != values:
            fail(MANIFEST, f"at {size} records inputs {recorded[size].get('values')}, the processor gives {values}")
    runs = 0
    for variant in manifest["variants"]:
        file = variant["file"]
        if file.endswith(".xml"):  # an OpenVINO IR: run in OpenVINO (step 5)
            continue
        try:
            sess = session.open_session(folder / file, threads)
        except UsageError as err:
            fail(file, f"ONNX Runtime cannot load it ({err})")
        for size, feeds in cases:
            check_run(sess, feeds, file, f"at {size}", recorded[size].get("outputs", {}))
            runs += 1
        say(f"{file}: runs at {', '.join(s for s, _ in cases)}; output shapes as recorded", TAG)
    return runs


def run_openvino(manifest: dict, folder: Path, threads: int | None) -> str:
    """Step 5 (see the module docstring); returns what was checked, or why nothing was."""
    from vlm_vision_onnx.core import engine, openvino_session
    from vlm_vision_onnx.core.parity import compare

    if not openvino_session.available():
        ir = [v["file"] for v in manifest["variants"] if v["file"].endswith(".xml")]
        line = "OpenVINO not installed: not checked" + (f" ({', '.join(ir)}: checksums only)" if ir else "")
        say(line, TAG)
        return line
    fp32 = folder / manifest["variants"][0]["file"]
    tolerance = float(manifest.get("export", {}).get("tolerance") or 1e-4)
    sess = session.open_session(fp32, threads)
    cases = [(size, feeds, session.run(sess, feeds)) for size, feeds in smoke.smoke_cases(manifest["family"], folder)]
    del sess
    precisions = ["f32", *(["bf16"] if openvino_session.bf16_supported() else [])]
    worst_cosine = {}
    for precision in precisions:
        try:
            ov = openvino_session.OpenVINOSession(fp32, threads, precision)
        except UsageError as err:
            fail(manifest["variants"][0]["file"], str(err))
        worst_cosine[precision] = 1.0
        for size, feeds, expected in cases:
            got = dict(zip(session.output_names(ov), ov.run(None, feeds)))
            for name, ref in expected.items():
                metrics = compare(got[name], ref, tolerance)
                worst_cosine[precision] = min(worst_cosine[precision], metrics.get("min_token_cosine", -1.0))
                if precision == "f32" and not metrics["ok"]:
                    fail(manifest["variants"][0]["file"], f"OpenVINO f32 at {size}: {name} differs from ONNX Runtime "
                                                          f"by {metrics.get('max_abs')} (limit {metrics.get('limit')})")
                if precision == "bf16" and metrics.get("min_token_cosine", -1.0) < engine.BF16_FLOOR:
                    fail(manifest["variants"][0]["file"], f"OpenVINO bf16 at {size}: {name} min per-token cosine "
                                                          f"{metrics.get('min_token_cosine'):.5f} < {engine.BF16_FLOOR}; "
                                                          "run it with --precision f32")
    shown = ", ".join(f"{p} min per-token cosine {c:.5f}" for p, c in worst_cosine.items())
    line = f"{manifest['variants'][0]['file']}: OpenVINO at {', '.join(s for s, _, _ in cases)}: {shown}"
    say(line, TAG)
    from vlm_vision_onnx.runtime import verify_openvino

    for ir_line in verify_openvino.run_variants(manifest, folder, threads, cases):
        say(ir_line, TAG)
        line += f"; {ir_line}"
    return line


def verify_folder(folder: Path, threads: int | None = None) -> str:
    """All checks on an unpacked package folder; returns a one-line summary or raises CheckFailed."""
    if not (folder / MANIFEST).exists() and not (folder / SUMS).exists():
        raise UsageError(f"{folder} is not a release package (no manifest.json, no SHA256SUMS); "
                         "give dist/NAME or dist/NAME.tar.gz from `make package`")
    sums = check_sums(folder)
    say(f"checksums: {len(sums)} files match SHA256SUMS", TAG)
    manifest = read_manifest(folder)
    check_manifest_files(manifest, sums, folder)
    if not manifest["variants"] or manifest["variants"][0].get("name") != "fp32":
        fail(MANIFEST, "the first variant must be fp32")
    metas = [check_variant_model(manifest, v, folder) for v in manifest["variants"]]
    check_configs(manifest, metas[0], folder)
    say(f"manifest: {manifest['family']} {manifest['model']}, {len(manifest['variants'])} variant(s) agree "
        "with their models and configs", TAG)
    runs = run_smoke(manifest, folder, threads)
    run_openvino(manifest, folder, threads)
    from vlm_vision_onnx.runtime import verify_static

    static = verify_static.check(manifest, folder, threads, fail)
    for line in static:
        say(line, TAG)
    return (f"{manifest['name']}: {len(sums)} files, {len(manifest['variants'])} variant(s) "
            f"({', '.join(v['name'] for v in manifest['variants'])}), {runs} smoke runs"
            + (f", {len(static)} static bucket(s)" if static else "") + ": all checks passed")


def verify(path: str | Path, threads: int | None = None) -> str:
    """Verify a package folder or tarball (see the module docstring)."""
    try:
        with unpack.opened(path) as folder:
            return verify_folder(folder, threads)
    except unpack.ArchiveError as err:
        raise CheckFailed(str(err)) from None


def add_arguments(parser) -> None:
    parser.add_argument("package", type=Path, help="dist/NAME or dist/NAME.tar.gz")
    parser.add_argument("--threads", type=int, help="ONNX Runtime intra-op threads (default: all cores)")


def run(args) -> int:
    """The `verify` subcommand: print the summary on success (failures raise)."""
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be >= 1, got {args.threads}")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")  # no "PyTorch was not found" notice
    print(f"ok: {verify(args.package, args.threads)}")
    return 0
