"""Static buckets in a release package (issue 36, item 4): `release package` ships `build/MODEL/static-WxH/`'s
export, qnn and fp16 stages as `onnx/vision_encoder_static_WxH[_qdq|_fp16].onnx`, lists them in config.json and the
manifest (not in `onnx_variants`, not in `--engine auto`'s ranking), `runtime verify` checks each at its own size,
and `runtime embed --engine qnn` runs photos at the bucket that fits them on the QNN EP's HTP (simulator on x86).

The build: the tiny Qwen3-VL export (conftest `tiny_exports`) with the static buckets 64x64 (export, qnn, fp16) and
96x64 (export, qnn: no fp16, "where present") of conftest's `tiny_static`. The embed tests skip with the reason where
onnxruntime-qnn or its HTP backend is missing.
"""

import json
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from tests import builds
from tests.conftest import single_error
from vlm_vision_onnx.core import onnx_io, session
from vlm_vision_onnx.core import parity as metrics
from vlm_vision_onnx.core.errors import UsageError
from vlm_vision_onnx.release import stages
from vlm_vision_onnx.release.package import package, sums_text
from vlm_vision_onnx.runtime import __main__ as runtime_cli
from vlm_vision_onnx.runtime import buckets, npu, path_choice
from vlm_vision_onnx.runtime.verify import sha256

NAME = "qwen3-vl-tiny"
QNN_REASON = npu.unavailable()
needs_qnn = pytest.mark.skipif(QNN_REASON is not None, reason=f"QNN EP HTP backend unavailable: {QNN_REASON}")
STATIC = {"64x64": ("export", "qnn", "fp16"), "96x64": ("export", "qnn")}
FILES = {"onnx/vision_encoder_static_64x64.onnx", "onnx/vision_encoder_static_64x64_qdq.onnx",
         "onnx/vision_encoder_static_64x64_fp16.onnx", "onnx/vision_encoder_static_96x64.onnx",
         "onnx/vision_encoder_static_96x64_qdq.onnx"}


def static_recipes() -> dict:
    """{stage folder: Recipe} of build/qwen3-vl-tiny/{export, static-64x64/{export, qnn, fp16},
    static-96x64/{export, qnn}}: the commands of `make export` and `make export STATIC=64x64,96x64`."""
    found = {"export": builds.QWEN3_VL}
    for size, stage_names in STATIC.items():
        export = found[f"static-{size}/export"] = builds.export(NAME, "--static", size)
        found[f"static-{size}/qnn"] = builds.stage(export, "qnn")
        if "fp16" in stage_names:
            found[f"static-{size}/fp16"] = builds.stage(export, "fp16", "--outliers", "off")
    return found


@pytest.fixture(scope="module")
def static_build(tmp_path_factory) -> Path:
    """build/qwen3-vl-tiny/ of `static_recipes` (a copy: tests write beside it)."""
    return builds.assemble(static_recipes(), tmp_path_factory.mktemp("static-build") / NAME)


@pytest.fixture(scope="module")
def static_dist() -> Path:
    """dist/qwen3-vl-tiny/ of `static_build`, made through `python -m release package`. Read-only."""
    return builds.path(builds.package(NAME, static_recipes())) / NAME


def verify(path, capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = runtime_cli.main(["verify", str(path), "--threads", "1"])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def reseal(folder: Path) -> None:
    """Record every file's sha256 and size in the manifest again and rewrite SHA256SUMS, as a forger would, so that
    only the deeper checks can object."""
    manifest = json.loads((folder / "manifest.json").read_text())
    for path, record in manifest["files"].items():
        record.update(sha256=sha256(folder / path), size=(folder / path).stat().st_size)
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    (folder / "SHA256SUMS").write_text(sums_text(folder))


# --- the bucket rule (pure) ---------------------------------------------------------------------------------------

SIZES = [(448, 448), (448, 336), (336, 448), (896, 896)]


@pytest.mark.parametrize("image, bucket", [
    ((512, 512), (448, 448)),    # square: the square bucket of the nearer pixel count (512^2 is 1.31x 448^2)
    ((1000, 1000), (896, 896)),  # 896^2 is 1.25x under 1000^2, 448^2 4.98x
    ((640, 480), (448, 336)),    # 4:3 landscape
    ((480, 640), (336, 448)),    # 3:4 portrait
    ((1000, 500), (448, 336)),   # 2:1: 4:3 is the closest ratio (1.5x off), 1:1 is 2x off
    ((451, 300), (448, 336)),    # chelsea: 1.503 -> 4:3 (1.13x off) before 1:1 (1.5x off)
    ((300, 1000), (336, 448)),   # tall: 3:4
])
def test_bucket_rule(image, bucket):
    assert SIZES[buckets.choose(*image, SIZES)] == bucket


def test_bucket_rule_ties():
    # the same ratio and the image's pixel count halfway (x4 either way): the larger area
    assert buckets.choose(200, 200, [(100, 100), (400, 400)]) == 1
    assert buckets.choose(200, 200, [(400, 400), (100, 100)]) == 0
    # 2:1 and 1:2 are as far from a square, at the same area: the earlier bucket
    assert buckets.choose(300, 300, [(448, 224), (224, 448)]) == 0
    # ratios compared exactly: 3:2 is nearer 1.5 than 1:1 by any rounding
    assert buckets.choose(96, 64, [(64, 64), (96, 64)]) == 1
    with pytest.raises(ValueError):
        buckets.choose(10, 10, [])


def test_a_bucket_record_without_its_layout_is_refused():
    """A bucket records the facts of its family's layout (a Qwen grid_thw, Phi-4's image_size and num_crops)."""
    record = {"size": [64, 64], "variants": [{"name": "fp32", "file": "onnx/a.onnx"}]}
    with pytest.raises(UsageError, match=r"static_buckets\[0\] lacks its layout's grid_thw"):
        buckets.read({"family": "qwen3-vl", buckets.KEY: [record]})
    with pytest.raises(UsageError, match="lacks its layout's num_crops"):
        buckets.read({"family": "phi-4-mm", buckets.KEY: [{**record, "image_size": [448, 896], "num_crops": 0}]})
    (bucket,) = buckets.read({"family": "phi-4-mm", buckets.KEY: [{**record, "image_size": [448, 896],
                                                                    "num_crops": 3}]})
    assert bucket.layout == {"image_size": [448, 896], "num_crops": 3}
    assert buckets.layout_text(bucket.layout) == "HD 448x896, 3 crops"
    assert buckets.layout_text({"grid_thw": [1, 4, 6]}) == "grid 1x4x6"


# --- package and verify -------------------------------------------------------------------------------------------

def test_package_ships_the_static_buckets(static_dist, static_build):
    files = {p.relative_to(static_dist).as_posix() for p in static_dist.rglob("*") if p.is_file()}
    assert FILES <= files and "onnx/vision_encoder_static_96x64_fp16.onnx" not in files
    sums = {line.split("  ", 1)[1] for line in (static_dist / "SHA256SUMS").read_text().splitlines()}
    assert FILES <= sums
    config = json.loads((static_dist / "config.json").read_text())
    assert config[stages.CONFIG_KEY] == {"fp32": "onnx/vision_encoder.onnx"}  # transformers.js's list: no static
    assert config[buckets.KEY] == [
        {"size": [64, 64], "grid_thw": [1, 4, 4],
         "files": {"fp32": "onnx/vision_encoder_static_64x64.onnx", "qdq": "onnx/vision_encoder_static_64x64_qdq.onnx",
                   "fp16": "onnx/vision_encoder_static_64x64_fp16.onnx"}},
        {"size": [96, 64], "grid_thw": [1, 4, 6],
         "files": {"fp32": "onnx/vision_encoder_static_96x64.onnx",
                   "qdq": "onnx/vision_encoder_static_96x64_qdq.onnx"}}]
    manifest = json.loads((static_dist / "manifest.json").read_text())
    assert [v["name"] for v in manifest["variants"]] == ["fp32"]
    assert buckets.config_entries(manifest) == config[buckets.KEY]
    for record in manifest[buckets.KEY]:
        size = "x".join(map(str, record["size"]))
        assert [i["name"] for i in record["inputs"]] == ["pixel_values"]  # no grid_thw
        assert all(isinstance(d, int) for io in record["inputs"] + record["outputs"] for d in io["dims"])
        for variant in record["variants"]:
            assert variant["files"] == [variant["file"]] and variant["size"] == manifest["files"][variant["file"]]["size"]
            stage = {"fp32": "export", "qdq": "qnn", "fp16": "fp16"}[variant["name"]]
            assert variant["stage"] == f"static-{size}/{stage}"
            report = json.loads((static_build / f"static-{size}" / stage / "report.json").read_text())
            if variant["name"] == "fp32":
                assert variant["accuracy_vs_eager"]["passed"] is True
            elif variant["name"] == "qdq":  # the qnn stage's gate: photos, against the bucket's fp32
                accuracy = variant["accuracy_vs_fp32"]
                assert accuracy["min_token_cosine"] == report["min_token_cosine"] >= npu.FLOORS["qdq"]
                assert accuracy["photos"]["cases"] == list(npu.PHOTOS)
                assert accuracy["reference"] == f"fp32 (onnx/vision_encoder_static_{size}.onnx)"
            else:
                assert variant["accuracy_vs_fp32"]["min_token_cosine"] == report["validation"]["min_token_cosine"]
                assert variant["accuracy_vs_fp32_cpu_ep"]["min_token_cosine"] == \
                    report["cpu_execution_provider"]["min_token_cosine"]
    assert "## Static buckets (NPUs)" in (static_dist / "README.md").read_text()


def test_static_buckets_stay_out_of_engine_auto(static_dist):
    manifest = json.loads((static_dist / "manifest.json").read_text())
    without = {k: v for k, v in manifest.items() if k != buckets.KEY}
    assert {k: c.path for k, c in path_choice.per_cpu(manifest).items()} == \
        {k: c.path for k, c in path_choice.per_cpu(without).items()}
    assert all(c.variant == "fp32" for c in path_choice.per_cpu(manifest).values())


def test_verify_checks_each_static_file_at_its_size(static_dist, tmp_path, capsys):
    code, out = verify(static_dist, capsys)
    assert code == 0, out
    assert "2 static bucket(s): all checks passed" in out
    assert "static bucket 64x64 (fp32, qdq, fp16): runs at its size" in out
    code, out = verify(static_dist.with_name(f"{NAME}.tar.gz"), capsys)
    assert code == 0, out


def test_verify_fails_on_a_corrupted_static_file(static_dist, tmp_path, capsys):
    folder = Path(shutil.copytree(static_dist, tmp_path / NAME))
    model = folder / "onnx/vision_encoder_static_96x64_qdq.onnx"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0x01
    model.write_bytes(bytes(data))
    code, err = verify(folder, capsys)
    assert code == 1
    assert single_error(err).startswith("error: onnx/vision_encoder_static_96x64_qdq.onnx: sha256")


def test_verify_fails_on_a_swapped_static_file(static_dist, tmp_path, capsys):
    """The 96x64 model under the 64x64 bucket's name, every checksum forged: its metadata gives it away."""
    folder = Path(shutil.copytree(static_dist, tmp_path / NAME))
    shutil.copyfile(folder / "onnx/vision_encoder_static_96x64.onnx", folder / "onnx/vision_encoder_static_64x64.onnx")
    manifest = json.loads((folder / "manifest.json").read_text())
    size = (folder / "onnx/vision_encoder_static_64x64.onnx").stat().st_size
    manifest[buckets.KEY][0]["variants"][0]["size"] = size
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    reseal(folder)
    code, err = verify(folder, capsys)
    assert code == 1
    line = single_error(err)
    assert line.startswith("error: onnx/vision_encoder_static_64x64.onnx: is the static model of 96x64"), line


def test_verify_fails_when_config_drops_the_buckets(static_dist, tmp_path, capsys):
    folder = Path(shutil.copytree(static_dist, tmp_path / NAME))
    config = json.loads((folder / "config.json").read_text())
    del config[buckets.KEY]
    (folder / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    reseal(folder)
    code, err = verify(folder, capsys)
    assert code == 1
    assert single_error(err).startswith(f"error: config.json: {buckets.KEY} None differ from manifest.json's")


def test_npu_check_reads_the_buckets_of_a_package(static_dist):
    """npu-check on a package: every static file, each compared with its bucket's fp32 file."""
    pairs = [(m.name, r.name if r else None) for m, r in npu.models_in(static_dist)]
    assert pairs == [("vision_encoder_static_64x64.onnx", None),
                     ("vision_encoder_static_64x64_qdq.onnx", "vision_encoder_static_64x64.onnx"),
                     ("vision_encoder_static_64x64_fp16.onnx", "vision_encoder_static_64x64.onnx"),
                     ("vision_encoder_static_96x64.onnx", None),
                     ("vision_encoder_static_96x64_qdq.onnx", "vision_encoder_static_96x64.onnx")]


def test_a_static_folder_of_another_size_is_refused(static_build, tmp_path):
    build = tmp_path / NAME
    shutil.copytree(static_build / "export", build / "export")
    shutil.copytree(static_build / "static-64x64" / "export", build / "static-128x64" / "export")
    export = stages.read_build(build)["export"]
    with pytest.raises(UsageError, match="is the static export of 64x64, not of its folder's 128x64"):
        stages.read_static(build, export)
    shutil.rmtree(build / "static-128x64")
    (build / "static-big" / "export").mkdir(parents=True)
    with pytest.raises(UsageError, match="static-big is not a static bucket folder"):
        stages.read_static(build, export)
    shutil.rmtree(build / "export")
    with pytest.raises(UsageError, match="run it without STATIC too"):
        stages.read_build(build)


def test_a_static_variant_older_than_its_export_is_refused(static_build, tmp_path):
    build = tmp_path / NAME
    shutil.copytree(static_build / "export", build / "export")
    shutil.copytree(static_build / "static-96x64", build / "static-96x64")
    report = build / "static-96x64" / "qnn" / "report.json"
    data = json.loads(report.read_text())
    data["created"] = "2000-01-01T00:00:00"
    report.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="qnn .*is older than its static export"):
        package(build, tmp_path / "dist", threads=1)


# --- embed --engine qnn -------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def photo_files(tmp_path_factory) -> list[Path]:
    """astronaut (512x512) and chelsea (451x300) from scikit-image's sample photos, as PNG."""
    skimage_data = pytest.importorskip("skimage.data")
    from PIL import Image

    folder = tmp_path_factory.mktemp("static-photos")
    paths = []
    for name in ("astronaut", "chelsea"):
        Image.fromarray(getattr(skimage_data, name)()).save(folder / f"{name}.png")
        paths.append(folder / f"{name}.png")
    return paths


def embed(args, capsys, cache: Path | None = None) -> tuple[int, str, str]:
    """`runtime embed ARGS`; --engine qnn keeps no compiled graph unless `cache` is given (never in the user's)."""
    capsys.readouterr()
    keep = ["--context-cache", str(cache)] if cache else ["--no-context-cache"]
    code = runtime_cli.main(["embed", *map(str, args), *(keep if "qnn" in map(str, args) else [])])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@needs_qnn
def test_embed_qnn_keeps_the_compiled_graph_for_the_next_run(static_dist, photo_files, tmp_path, capsys):
    """The first run compiles the bucket and keeps its EP context in the cache; the second loads it and gives the
    same embeddings; an entry that no longer loads is compiled again."""
    cache, first, second = tmp_path / "cache", tmp_path / "first.npz", tmp_path / "second.npz"
    args = [photo_files[0], "--package", static_dist, "--engine", "qnn"]
    code, _, err = embed([*args, "--out", first], capsys, cache)
    assert code == 0, err
    assert "compiled and kept in" in err
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert (entry / "model_ctx.onnx").is_file() and any(entry.glob("*.bin"))
    code, _, err = embed([*args, "--out", second], capsys, cache)
    assert code == 0, err
    assert "loaded the compiled graph kept in" in err and "compiled and kept" not in err
    with np.load(first) as a, np.load(second) as b:
        assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
    for binary in entry.glob("*.bin"):
        binary.write_bytes(b"not a context binary")
    code, _, err = embed([*args, "--out", tmp_path / "third.npz"], capsys, cache)
    assert code == 0, err
    assert "compiled and kept in" in err


@needs_qnn
def test_embed_qnn_equals_the_cpu_ep_on_photos(static_dist, photo_files, tmp_path, capsys):
    """Each photo at its bucket on the HTP (QDQ) against the CPU EP's run of the same file on the same resized pixels:
    within the QDQ floor (the simulator computes what the quantized graph says: in practice equal to 1e-4)."""
    from vlm_vision_onnx.families.qwen_vl import static_inputs
    from vlm_vision_onnx.runtime.images import load_rgb

    out = tmp_path / "emb.npz"
    code, stdout, err = embed([*photo_files, "--package", static_dist, "--engine", "qnn", "--out", out], capsys)
    assert code == 0, err
    paths = [line for line in err.splitlines() if "path:" in line]
    assert len(paths) == 1 and "path: qnn" in paths[0] and "variant qdq" in paths[0]
    assert "64x64 for image_0" in paths[0] and "96x64 for image_1" in paths[0]
    assert "image_1: " in stdout and "bucket 96x64" in stdout
    manifest = json.loads((static_dist / "manifest.json").read_text())
    found = buckets.read(manifest)
    with np.load(out) as data:
        result = {k: data[k] for k in data.files}
    assert list(result["entries"]) == ["image_0", "image_1"]
    for entry, path in zip(["image_0", "image_1"], photo_files):
        rgb = load_rgb(path)
        bucket = found[buckets.choose(rgb.shape[1], rgb.shape[0], [(b.width, b.height) for b in found])]
        assert result[f"{entry}.bucket"].tolist() == [bucket.width, bucket.height]
        assert result[f"{entry}.grid_thw"].tolist() == bucket.layout["grid_thw"]
        assert result[f"{entry}.source"].tolist() == [str(path)]
        model = static_dist / bucket.files["qdq"]  # the CPU EP's run of the same file on the same resized pixels
        sess = session.open_session(model, 1)
        want = session.run(sess, {"pixel_values": static_inputs.pixels(rgb, onnx_io.metadata(model))})
        for name, value in want.items():
            got = result[f"{entry}.{name}"]
            assert got.shape == value.shape
            assert metrics.min_token_cosine(got, value) >= npu.FLOORS["qdq"], (entry, name)


@needs_qnn
def test_embed_qnn_fp16_runs_the_buckets_that_have_it(static_dist, photo_files, tmp_path, capsys):
    out = tmp_path / "fp16.npz"
    code, _, err = embed([photo_files[1], "--package", static_dist, "--engine", "qnn", "--variant", "fp16",
                          "--out", out], capsys)
    assert code == 0, err
    assert "variant fp16; bucket 64x64 for image_0" in err  # 96x64 ships no fp16 file
    with np.load(out) as data:
        assert data["image_0.bucket"].tolist() == [64, 64]


def test_embed_qnn_bad_input(static_dist, photo_files, tmp_path, capsys, monkeypatch):
    out = tmp_path / "bad.npz"
    base = [photo_files[0], "--package", static_dist, "--engine", "qnn", "--out", out]
    for extra, message in ((["--variant", "int8"], "not --variant int8"),
                           (["--video", photo_files[0], photo_files[1]], "runs images only"),
                           (["--precision", "f32"], "--precision is OpenVINO's")):
        code, _, err = embed([*base, *extra], capsys)
        assert code == 2 and message in single_error(err), err
    monkeypatch.setitem(sys.modules, "onnxruntime_qnn", None)  # as where it is not installed
    code, _, err = embed(base, capsys)
    assert code == 2
    assert single_error(err) == f"error: onnxruntime-qnn is not installed: {npu.INSTALL_HINT}"
    assert not out.exists()


@needs_qnn
def test_embed_qnn_refuses_a_package_without_buckets(static_build, photo_files, tmp_path, capsys):
    build = tmp_path / NAME
    shutil.copytree(static_build / "export", build / "export")
    folder, _ = package(build, tmp_path / "dist", threads=1)
    code, _, err = embed([photo_files[0], "--package", folder, "--engine", "qnn", "--out", tmp_path / "x.npz"],
                         capsys)
    assert code == 2
    assert "has no static image buckets" in single_error(err)
    assert not (tmp_path / "x.npz").exists()


def test_a_static_file_with_external_data_ships_beside_it(static_build, tmp_path, capsys):
    """A static export with external weights (as at 2B dims) ships as ..._WxH.onnx + ..._WxH.onnx_data, verified."""
    import onnx

    build = tmp_path / "build" / NAME
    shutil.copytree(static_build / "export", build / "export")
    folder = build / "static-64x64" / "export"
    folder.mkdir(parents=True)
    shutil.copyfile(static_build / "static-64x64" / "export" / "report.json", folder / "report.json")
    proto = onnx.load(str(static_build / "static-64x64" / "export" / "model.onnx"))
    onnx.save_model(proto, str(folder / "model.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="model.onnx.data", size_threshold=1024)
    dist, _ = package(build, tmp_path / "dist", threads=1)
    manifest = json.loads((dist / "manifest.json").read_text())
    (record,) = manifest[buckets.KEY]
    assert [v["files"] for v in record["variants"]] == [["onnx/vision_encoder_static_64x64.onnx",
                                                          "onnx/vision_encoder_static_64x64.onnx_data"]]
    code, out = verify(dist, capsys)
    assert code == 0, out
    (dist / "onnx/vision_encoder_static_64x64.onnx_data").unlink()
    code, err = verify(dist, capsys)
    assert code == 1
    assert single_error(err) == "error: onnx/vision_encoder_static_64x64.onnx_data: missing (listed in SHA256SUMS)"
