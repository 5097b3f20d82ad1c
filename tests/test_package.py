"""Release packages (`python -m release package`) and `python -m runtime verify` on the tiny encoder.

The build is the tiny TorchScript export (conftest) + the optimize and int4 stages run through the
quantize CLI. verify must pass on a fresh package (folder and tarball) and fail, naming the file, on one
flipped byte, a missing file, a tampered manifest and a package claiming the other family; the
tarball must be byte-identical across runs; crafted tarballs must be refused with nothing written.
"""

import io
import json
import shutil
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest

from tests import builds
from tests.conftest import single_error
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.release import __main__ as release_cli
from vlm_vision_onnx.release import stages
from vlm_vision_onnx.release.package import package, sums_text
from vlm_vision_onnx.runtime import __main__ as runtime_cli
from vlm_vision_onnx.runtime import unpack

NAME = "qwen3-vl-tiny"


@pytest.fixture(scope="module")
def build(tmp_path_factory) -> Path:
    """build/qwen3-vl-tiny/{export, surgery, optimized, int4} from the tiny TorchScript export, through the
    commands of `make export` (builds.QWEN3_VL_STAGES; a copy: tests write beside it)."""
    return builds.assemble(builds.QWEN3_VL_STAGES, tmp_path_factory.mktemp("build") / NAME)


@pytest.fixture(scope="module")
def dist() -> Path:
    """dist/ holding the package of `build`, made through the command line (builds.package). Read-only."""
    return builds.path(builds.package(NAME, builds.QWEN3_VL_STAGES))


def verify(path, capsys) -> tuple[int, str]:
    """Exit code and stderr of `python -m runtime verify PATH`."""
    capsys.readouterr()
    code = runtime_cli.main(["verify", str(path), "--threads", "1"])
    return code, capsys.readouterr().err


def copy_package(dist: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(dist / NAME, tmp_path / NAME))


def resign(folder: Path) -> None:
    """Rewrite SHA256SUMS after an edit, as a forger would, so that only deeper checks can object."""
    (folder / "SHA256SUMS").write_text(sums_text(folder))


def edit_manifest(folder: Path, change) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    change(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")


def test_package_layout(dist, build):
    folder = dist / NAME
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert files == ["README.md", "SHA256SUMS", "config.json", "manifest.json", "onnx/vision_encoder.onnx",
                     "onnx/vision_encoder_q4.onnx", "preprocessor_config.json"]
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["family"] == "qwen3-vl" and manifest["model"] == NAME
    assert [(v["name"], v["stage"], v["file"]) for v in manifest["variants"]] == [
        ("fp32", "optimized", "onnx/vision_encoder.onnx"), ("q4", "int4", "onnx/vision_encoder_q4.onnx")]
    assert json.loads((folder / "config.json").read_text())[stages.CONFIG_KEY] == {
        "fp32": "onnx/vision_encoder.onnx", "q4": "onnx/vision_encoder_q4.onnx"}
    # fp32 is the optimized stage's model, byte for byte (no external data to rename)
    assert (folder / "onnx/vision_encoder.onnx").read_bytes() == (build / "optimized/model.onnx").read_bytes()
    assert manifest["inputs"] == [{"name": "pixel_values", "dtype": "float32", "dims": ["num_patches", 1536]},
                                  {"name": "grid_thw", "dtype": "int64", "dims": ["num_images", 3]}]
    assert [o["name"] for o in manifest["outputs"]] == ["image_features", "deepstack_embeds_0", "deepstack_embeds_1"]
    assert all(o["dims"] == ["num_tokens", 96] for o in manifest["outputs"])
    assert manifest["weights"] == {"source": "random", "seed": 0}
    assert manifest["export"]["path"] == "torchscript"
    assert {"torch", "transformers", "onnx", "onnxruntime"} <= set(manifest["versions"])
    int4_report = json.loads((build / "int4/report.json").read_text())
    q4 = manifest["variants"][1]
    assert q4["quantization"] == int4_report["config"]
    assert q4["accuracy_vs_fp32"]["min_cosine"] == int4_report["validation"]["min_cosine"]
    export_cases = json.loads((build / "export/report.json").read_text())["validation"]["cases"]
    assert [c["case"] for c in manifest["stages"][0]["validation"]["cases"]] == [c["case"] for c in export_cases]
    surgery = next(s for s in manifest["stages"] if s["stage"] == "surgery")
    assert surgery["surgery"]["checks"] == ["debake", "audit", "claims"]
    assert [c["case"] for c in surgery["validation"]["cases"]] == [c["case"] for c in export_cases]
    for path, record in manifest["files"].items():
        assert record["size"] == (folder / path).stat().st_size
    card = (folder / "README.md").read_text()
    assert "RANDOM weights" in card and "vision_encoder_q4.onnx" in card and "python -m runtime verify" in card
    assert "first output is `image_features`" in card


def test_preprocessor_loads_and_grids_like_the_smoke_inputs(dist):
    """AutoImageProcessor.from_pretrained(dist/NAME) loads the processor, and it grids each smoke size as
    the manifest (and verify) do."""
    from PIL import Image
    from transformers import AutoConfig, AutoImageProcessor

    folder = dist / NAME
    processor = AutoImageProcessor.from_pretrained(folder)
    assert type(processor).__name__ == "Qwen2VLImageProcessorPil"
    assert (processor.patch_size, processor.merge_size, processor.temporal_patch_size) == (16, 2, 2)
    assert list(processor.image_mean) == [0.5, 0.5, 0.5] and list(processor.image_std) == [0.5, 0.5, 0.5]
    config = AutoConfig.from_pretrained(folder)
    assert type(config).__name__ == "Qwen3VLConfig"  # the whole model's: its model_type names the generation
    assert config.vision_config.depth == 4 and config.vision_config.out_hidden_size == 96
    manifest = json.loads((folder / "manifest.json").read_text())
    assert [case["size"] for case in manifest["smoke"]] == ["224x224", "336x336", "448x448", "512x384"]
    for case in manifest["smoke"]:
        h, w = (int(x) for x in case["size"].split("x"))
        batch = processor(images=[Image.new("RGB", (w, h))], return_tensors="np")
        assert list(batch["pixel_values"].shape) == case["inputs"]["pixel_values"]
        assert batch["image_grid_thw"].tolist() == case["values"]["grid_thw"]
        tokens = int(np.prod(batch["image_grid_thw"])) // 4
        assert all(shape == [tokens, 96] for shape in case["outputs"].values())


def test_verify_passes_on_folder_and_tarball(dist, capsys):
    for path in (dist / NAME, dist / f"{NAME}.tar.gz"):
        code, err = verify(path, capsys)
        assert code == 0, err
        assert "onnx/vision_encoder_q4.onnx: runs at 224x224, 336x336, 448x448, 512x384" in err


def test_tarball_is_reproducible(build, dist, tmp_path):
    """Two more runs give the same bytes; entries are sorted with fixed owner, mode and mtime."""
    again = [package(build, tmp_path / f"d{i}", threads=1)[1].read_bytes() for i in range(2)]
    first = (dist / f"{NAME}.tar.gz").read_bytes()
    assert again[0] == first and again[1] == first
    assert first[4:8] == b"\0\0\0\0"  # gzip header mtime 0
    with tarfile.open(dist / f"{NAME}.tar.gz") as tar:
        members = tar.getmembers()
    assert [m.name for m in members] == sorted(m.name for m in members)
    assert {(m.uid, m.gid, m.uname, m.gname, m.mtime) for m in members} == {(0, 0, "", "", 0)}
    assert {m.mode for m in members if m.isfile()} == {0o644} and {m.mode for m in members if m.isdir()} == {0o755}


def test_verify_fails_on_flipped_byte(dist, tmp_path, capsys):
    folder = copy_package(dist, tmp_path)
    model = folder / "onnx/vision_encoder_q4.onnx"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0x01
    model.write_bytes(bytes(data))
    code, err = verify(folder, capsys)
    assert code == 1
    assert single_error(err).startswith("error: onnx/vision_encoder_q4.onnx: sha256")


def test_verify_fails_on_flipped_byte_in_tarball(dist, tmp_path, capsys):
    data = bytearray((dist / f"{NAME}.tar.gz").read_bytes())
    data[len(data) // 2] ^= 0x01
    archive = tmp_path / f"{NAME}.tar.gz"
    archive.write_bytes(bytes(data))
    code, err = verify(archive, capsys)
    assert code == 1
    line = single_error(err)
    assert str(archive) in line or "sha256" in line


def test_verify_fails_on_missing_file(dist, tmp_path, capsys):
    folder = copy_package(dist, tmp_path)
    (folder / "onnx/vision_encoder_q4.onnx").unlink()
    code, err = verify(folder, capsys)
    assert code == 1
    assert single_error(err) == "error: onnx/vision_encoder_q4.onnx: missing (listed in SHA256SUMS)"


def test_verify_fails_on_added_file(dist, tmp_path, capsys):
    folder = copy_package(dist, tmp_path)
    (folder / "onnx/extra.onnx").write_bytes(b"x")
    code, err = verify(folder, capsys)
    assert code == 1
    assert single_error(err).startswith("error: onnx/extra.onnx: is not listed in SHA256SUMS")


def test_verify_refuses_links_and_paths_outside(dist, tmp_path, capsys):
    folder = copy_package(dist, tmp_path)
    (folder / "onnx/link.onnx").symlink_to("vision_encoder.onnx")
    code, err = verify(folder, capsys)
    assert code == 1
    assert single_error(err) == "error: onnx/link.onnx: is a symbolic link; a package holds regular files only"
    (folder / "onnx/link.onnx").unlink()
    with open(folder / "SHA256SUMS", "a") as sums:
        sums.write(f"{'0' * 64}  /etc/hostname\n")
    code, err = verify(folder, capsys)
    assert code == 1
    assert single_error(err) == "error: SHA256SUMS: lists '/etc/hostname', outside the package"


def test_verify_fails_on_tampered_manifest(dist, tmp_path, capsys):
    folder = copy_package(dist, tmp_path)

    def shrink(manifest):
        manifest["smoke"][0]["outputs"]["image_features"] = [63, 96]

    edit_manifest(folder, shrink)
    code, err = verify(folder, capsys)
    assert code == 1
    assert single_error(err).startswith("error: manifest.json: sha256")
    resign(folder)  # a forger who also rewrites SHA256SUMS is caught by the smoke runs
    code, err = verify(folder, capsys)
    assert code == 1
    line = single_error(err)
    assert line.startswith("error: onnx/vision_encoder.onnx: at 224x224 gives output shapes") and "[63, 96]" in line


def test_verify_fails_on_a_forged_smoke_grid(dist, tmp_path, capsys):
    folder = copy_package(dist, tmp_path)
    edit_manifest(folder, lambda m: m["smoke"][3]["values"].update(grid_thw=[[1, 24, 32]]))
    resign(folder)
    code, err = verify(folder, capsys)
    assert code == 1
    assert single_error(err) == ("error: manifest.json: at 512x384 records inputs {'grid_thw': [[1, 24, 32]]}, "
                                 "the processor gives {'grid_thw': [[1, 32, 24]]}")


def test_verify_fails_on_other_family(dist, tmp_path, capsys):
    """A manifest claiming the other family (Phi-4-multimodal) for a Qwen3-VL model."""
    folder = copy_package(dist, tmp_path)
    edit_manifest(folder, lambda m: m.update(family="phi-4-mm"))
    resign(folder)
    code, err = verify(folder, capsys)
    assert code == 1
    line = single_error(err)
    assert line.startswith("error: onnx/vision_encoder.onnx: the model's metadata says family 'qwen3-vl'")
    assert "'phi-4-mm'" in line


def test_verify_fails_on_swapped_variant_file(dist, tmp_path, capsys):
    """A model file replaced by another model (same I/O) with SHA256SUMS and the manifest made to agree."""
    folder = copy_package(dist, tmp_path)
    shutil.copyfile(folder / "onnx/vision_encoder.onnx", folder / "onnx/vision_encoder_q4.onnx")
    resign(folder)
    code, err = verify(folder, capsys)
    assert code == 1
    assert single_error(err).startswith("error: manifest.json: records sha256")


def test_external_data_is_renamed_and_verified(tiny_exports, tmp_path, capsys):
    """An fp32 model with external weights ships as vision_encoder.onnx + vision_encoder.onnx_data."""
    build = tmp_path / "build" / NAME
    (build / "export").mkdir(parents=True)
    shutil.copyfile(tiny_exports["torchscript"] / "report.json", build / "export/report.json")
    proto = onnx.load(str(tiny_exports["torchscript"] / "model.onnx"))
    onnx.save_model(proto, str(build / "export/model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model.onnx.data", size_threshold=1024)
    folder, _ = package(build, tmp_path / "dist", threads=1)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["variants"][0]["files"] == ["onnx/vision_encoder.onnx", "onnx/vision_encoder.onnx_data"]
    assert manifest["variants"][0]["stage"] == "export"
    code, err = verify(folder, capsys)
    assert code == 0, err
    (folder / "onnx/vision_encoder.onnx_data").unlink()
    code, err = verify(folder, capsys)
    assert code == 1
    assert single_error(err) == "error: onnx/vision_encoder.onnx_data: missing (listed in SHA256SUMS)"


def test_variant_names_follow_the_suffix_convention(tmp_path):
    found = {name: stages.Stage(name, tmp_path, tmp_path / "model.onnx", {})
             for name in ("export", "surgery", "optimized", "int8", "int4", "fp16")}
    assert [(v.name, v.stage.name, v.file) for v in stages.variants(found)] == [
        ("fp32", "optimized", "vision_encoder.onnx"), ("fp16", "fp16", "vision_encoder_fp16.onnx"),
        ("int8", "int8", "vision_encoder_int8.onnx"), ("q4", "int4", "vision_encoder_q4.onnx")]
    del found["optimized"]
    assert stages.variants(found)[0].stage.name == "surgery"


def test_a_variant_older_than_fp32_is_refused(tmp_path):
    """`make export` without FP16=1 leaves an earlier build's fp16/ beside a new optimized/: not packaged."""
    found = {"export": stages.Stage("export", tmp_path, tmp_path / "model.onnx", {"created": "2026-11-25T10:00:00"}),
             "optimized": stages.Stage("optimized", tmp_path / "optimized", tmp_path / "model.onnx",
                                       {"created": "2026-11-25T12:00:00"}),
             "fp16": stages.Stage("fp16", tmp_path / "fp16", tmp_path / "model.onnx",
                                  {"created": "2026-11-25T11:00:00"})}
    with pytest.raises(UsageError, match="fp16 .*is older than the fp32 stage .*optimized"):
        stages.variants(found)
    found["fp16"].report["created"] = "2026-11-25T12:00:01"
    assert [v.name for v in stages.variants(found)] == ["fp32", "fp16"]


def _crafted(path: Path, member: tarfile.TarInfo, data: bytes = b"") -> Path:
    """A tarball with a normal package file and one crafted member."""
    with tarfile.open(path, "w:gz") as tar:
        ok = tarfile.TarInfo(f"{NAME}/manifest.json")
        ok.size = 2
        tar.addfile(ok, io.BytesIO(b"{}"))
        member.size = len(data) if member.isreg() else 0
        tar.addfile(member, io.BytesIO(data) if member.isreg() else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    return info


CRAFTED = {
    "dotdot": (_member(f"{NAME}/../x"), "climbs out of the package"),
    "top-dotdot": (_member("../x"), "climbs out of the package"),
    "absolute": (_member("/tmp/x"), "absolute path"),
    "symlink": (_member(f"{NAME}/onnx", tarfile.SYMTYPE, "/etc"), "symbolic link"),
    "hardlink": (_member(f"{NAME}/x", tarfile.LNKTYPE, "/etc/passwd"), "hard link"),
    "device": (_member(f"{NAME}/x", tarfile.CHRTYPE), "device file"),
    "fifo": (_member(f"{NAME}/x", tarfile.FIFOTYPE), "FIFO"),
}


@pytest.mark.parametrize("kind", sorted(CRAFTED))
def test_crafted_tarball_is_refused_with_nothing_written(kind, tmp_path, capsys):
    member, reason = CRAFTED[kind]
    archive = _crafted(tmp_path / "evil.tar.gz", member, b"pwned")
    dest = tmp_path / "deep" / "dest"
    dest.mkdir(parents=True)
    before = sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*"))
    absolute_existed = Path("/tmp/x").exists()
    with pytest.raises(unpack.ArchiveError, match=reason):
        unpack.unpack(archive, dest)
    assert sorted(p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*")) == before
    assert Path("/tmp/x").exists() == absolute_existed
    code, err = verify(archive, capsys)
    assert code == 1
    line = single_error(err)
    assert str(archive) in line and reason in line


def test_package_bad_input(tmp_path, capsys):
    dist = tmp_path / "dist"
    assert release_cli.main(["package", str(tmp_path / "nope"), "--dist", str(dist)]) == 2
    assert "does not exist" in single_error(capsys.readouterr().err)
    (tmp_path / "empty").mkdir()
    assert release_cli.main(["package", str(tmp_path / "empty"), "--dist", str(dist)]) == 2
    assert "no export stage" in single_error(capsys.readouterr().err)
    assert release_cli.main(["package", str(tmp_path / "empty"), "--name", "../x"]) == 2
    assert "--name" in single_error(capsys.readouterr().err)
    assert not dist.exists()


def test_package_never_replaces_what_it_did_not_write(build, tmp_path, capsys):
    dist = tmp_path / "dist"
    (dist / NAME).mkdir(parents=True)
    (dist / NAME / "notes.txt").write_text("mine")
    assert release_cli.main(["package", str(build), "--dist", str(dist)]) == 2
    assert "refusing to replace" in single_error(capsys.readouterr().err)
    (dist / NAME / "notes.txt").unlink()
    (dist / NAME).rmdir()
    (dist / f"{NAME}.tar.gz").write_text("mine")
    assert release_cli.main(["package", str(build), "--dist", str(dist)]) == 2
    assert "refusing to replace" in single_error(capsys.readouterr().err)
    assert (dist / f"{NAME}.tar.gz").read_text() == "mine" and sorted(dist.iterdir()) == [dist / f"{NAME}.tar.gz"]


def test_verify_bad_input(tmp_path, capsys):
    assert verify(tmp_path / "nope", capsys)[0] == 2
    (tmp_path / "notes.txt").write_text("hello")
    code, err = verify(tmp_path / "notes.txt", capsys)
    assert code == 2 and "not a .tar.gz" in single_error(err)
    code, err = verify(tmp_path, capsys)
    assert code == 2 and "not a release package" in single_error(err)


@pytest.fixture(scope="module")
def phi_package() -> Path:
    """dist/phi-4-mm-tiny/ from a tiny Phi-4-multimodal export (the second family). Read-only."""
    return builds.path(builds.package("phi-4-mm-tiny", {"export": builds.PHI4_MM})) / "phi-4-mm-tiny"


def test_phi4_package_verifies(phi_package, capsys):
    manifest = json.loads((phi_package / "manifest.json").read_text())
    assert manifest["family"] == "phi-4-mm"
    assert [i["name"] for i in manifest["inputs"]] == ["pixel_values", "image_attention_mask", "image_sizes"]
    assert manifest["smoke"][0]["inputs"]["pixel_values"][2:] == [3, 448, 448]
    assert json.loads((phi_package / "preprocessor_config.json").read_text())["image_processor_type"] == \
        "Phi4MultimodalImageProcessor"
    code, err = verify(phi_package, capsys)
    assert code == 0, err


def test_verify_fails_on_model_of_the_other_family(dist, phi_package, tmp_path, capsys):
    """A Qwen3-VL package whose fp32 model is replaced by the Phi-4 one, manifest records and checksums
    forged to match: the model's own metadata gives it away."""
    from vlm_vision_onnx.release.manifest import file_record

    folder = copy_package(dist, tmp_path)
    shutil.copyfile(phi_package / "onnx/vision_encoder.onnx", folder / "onnx/vision_encoder.onnx")
    record = file_record(folder / "onnx/vision_encoder.onnx")

    def forge(manifest):
        manifest["files"]["onnx/vision_encoder.onnx"] = record
        manifest["variants"][0]["size"] = record["size"]

    edit_manifest(folder, forge)
    resign(folder)
    code, err = verify(folder, capsys)
    assert code == 1
    line = single_error(err)
    assert line.startswith("error: onnx/vision_encoder.onnx: the model's metadata says family 'phi-4-mm', "
                           "manifest.json says 'qwen3-vl'")


def test_checkpoint_package_records_the_weights_and_its_processor(tmp_path, capsys):
    """An export from a save_pretrained checkpoint: the manifest has the path and sha256 of each safetensors
    shard, config.json is the checkpoint's vision config, preprocessor_config.json the checkpoint's."""
    import torch
    import yaml
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from builders import vision
    from builders.config import CONFIG_DIR
    from tests.support import TEXT
    from vlm_vision_onnx.families.qwen_vl import processor_files
    from vlm_vision_onnx.release.manifest import sha256

    vision_cfg = yaml.safe_load((CONFIG_DIR / "qwen3-vl-tiny.yaml").read_text())["vision"]
    vision_cfg["out_hidden_size"] = 80  # differs from the config file's 96: config.json must come from here
    torch.manual_seed(3)
    model = Qwen3VLForConditionalGeneration(Qwen3VLConfig(vision_config=vision_cfg, text_config=TEXT))
    checkpoint = tmp_path / "ckpt"
    model.save_pretrained(checkpoint, max_shard_size="200KB")
    processor_files.save_config(checkpoint, max_pixels=1024 * 1024)  # the checkpoint's own processor settings
    build = tmp_path / "build" / NAME
    assert vision.main(["--model", "qwen3-vl-tiny", "--checkpoint", str(checkpoint), "--out",
                        str(build / "export")]) == 0
    folder, _ = package(build, tmp_path / "dist", threads=1)
    manifest = json.loads((folder / "manifest.json").read_text())
    shards = sorted(checkpoint.glob("*.safetensors"))
    assert len(shards) > 1 and manifest["weights"]["source"] == "checkpoint"
    assert manifest["weights"]["checkpoint"] == str(checkpoint)
    assert manifest["weights"]["files"] == {p.name: {"sha256": sha256(p), "size": p.stat().st_size} for p in shards}
    assert json.loads((folder / "config.json").read_text())["vision_config"]["out_hidden_size"] == 80
    assert json.loads((folder / "preprocessor_config.json").read_text())["size"]["longest_edge"] == 1024 * 1024
    assert "trained weights from the checkpoint" in (folder / "README.md").read_text()
    code, err = verify(folder, capsys)
    assert code == 0, err


def test_verify_requires_the_consumers_feature_name(dist, tmp_path, capsys):
    """A package whose encoders name their features as before (image_embeds), made consistent everywhere else
    (manifest I/O, file records, SHA256SUMS): verify names the output transformers.js and genai read."""
    import hashlib

    folder = copy_package(dist, tmp_path)
    for path in sorted((folder / "onnx").glob("*.onnx")):
        proto = onnx.load(str(path))
        for node in proto.graph.node:
            node.output[:] = ["image_embeds" if o == "image_features" else o for o in node.output]
        proto.graph.output[0].name = "image_embeds"
        onnx.save(proto, str(path))

    def forge(manifest):
        manifest["outputs"][0]["name"] = "image_embeds"
        for rel, record in manifest["files"].items():
            data = (folder / rel).read_bytes()
            record.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
        for variant in manifest["variants"]:
            variant["size"] = sum(manifest["files"][p]["size"] for p in variant["files"])

    edit_manifest(folder, forge)
    resign(folder)
    code, err = verify(folder, capsys)
    assert code == 1
    line = single_error(err)
    assert line.startswith("error: onnx/vision_encoder") and "'image_embeds', not 'image_features'" in line


@pytest.mark.parametrize("edit", ["not an object", "outputs a number"])
def test_a_stage_report_of_another_kind_is_one_line_before_any_work(tmp_path, capsys, edit):
    """Found by tools/fuzz: a report.json that is a JSON string, or whose validation case holds a number where the
    stage writes a mapping, ended in an AttributeError traceback."""
    build = builds.assemble({"export": builds.QWEN3_VL}, tmp_path / "build" / NAME)
    report = build / "export" / "report.json"
    data = json.loads(report.read_text())
    if edit == "not an object":
        report.write_text(json.dumps("a string"))
    else:
        data["validation"]["cases"][0]["outputs"] = 2**63
        report.write_text(json.dumps(data))
    capsys.readouterr()
    assert release_cli.main(["package", str(build), "--dist", str(tmp_path / "dist"), "--threads", "1"]) == 2
    line = single_error(capsys.readouterr().err)
    assert "report" in line and str(report) in line
    assert not (tmp_path / "dist").exists() or not any((tmp_path / "dist").iterdir())


def test_openvino_reads_no_package_file_that_is_not_the_packaged_one(tmp_path, capsys):
    """Found by tools/fuzz: OpenVINO's ONNX reader ends the process (segmentation fault) on a graph whose node was
    given another op type; `embed --engine openvino` first checks the file against the package's SHA256SUMS."""
    pytest.importorskip("openvino", reason="the openvino extra")
    folder = tmp_path / NAME
    shutil.copytree(builds.path(builds.package(NAME, {"export": builds.QWEN3_VL})) / NAME, folder)
    model_file = folder / "onnx" / "vision_encoder.onnx"
    model = onnx.load(str(model_file))
    next(n for n in model.graph.node if n.op_type == "Mul").op_type = "Conv"
    onnx.save(model, str(model_file))
    from PIL import Image

    Image.new("RGB", (64, 64), (10, 20, 30)).save(tmp_path / "photo.png")
    capsys.readouterr()
    code = runtime_cli.main(["embed", str(tmp_path / "photo.png"), "--package", str(folder), "--out",
                             str(tmp_path / "out.npz"), "--engine", "openvino", "--threads", "1"])
    assert code == 2 and "is not the file the package recorded" in single_error(capsys.readouterr().err)
    assert not (tmp_path / "out.npz").exists()
