"""`python -m runtime embed-collection` on 50 real photos of ten sizes plus one corrupt file, from the tiny Qwen3-VL
package (tests/conftest.py's `qwen_dist`).

What is bit-equal to what: every image's `embedding` and DeepStack features from `--scheduler ray` (2 actors on a
2-CPU Ray cluster, packs of several images) are the same float32 bits as from `--scheduler local` (one session in
this process, same chunks and packs) and as `python -m runtime embed IMAGE` run on that image alone (a pack of
one). The last holds because ONNX Runtime's outputs for an image do not depend on the other images of the pack
(measured: tiny package, ORT 1.31.1, 1-3 threads; `test_chunks_are_packed_up_to_the_budget` proves the packs
here hold several images, so this is not a comparison of single runs with single runs).

One Ray cluster for the module (`ray_head`: a head started by a helper process, 2 CPUs), which the commands join
with `--address`, as on an existing cluster; `test_lists_on_a_cluster_started_for_the_run` starts its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import single_error, snapshot
from tests.support import QWEN
from tools.photos import write_photos
from vlm_vision_onnx.runtime import __main__ as runtime_cli
from vlm_vision_onnx.runtime import collection_embedder, collection_io, sample_photos
from vlm_vision_onnx.runtime.verify import sha256

# The test cluster keeps Ray's default token authentication (its token in ~/.ray/auth_token); a driver that joins
# a cluster by address uses the token only in this mode (set before ray is imported: Ray reads it once).
os.environ.setdefault("RAY_AUTH_MODE", "token")
pa = pytest.importorskip("pyarrow", reason="embed-collection needs the ray extra (pyarrow, ray)")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("ray", reason="embed-collection --scheduler ray needs the ray extra")

ROOT = Path(__file__).resolve().parents[1]
HELPER = """
import sys, ray
ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()  # until the test closes stdin
"""


@pytest.fixture(scope="module")
def package(qwen_dist) -> Path:
    return qwen_dist / QWEN


@pytest.fixture(scope="module")
def photos(tmp_path_factory) -> Path:
    """50 photos (`tools.photos.write_photos`: 5 from skimage.data x 10 sizes, PNG and JPEG; 10 of them in a
    subfolder), `broken.jpg` (the first half of a JPEG) and a hidden file."""
    pytest.importorskip("skimage.data", reason="scikit-image (dev extra) ships the sample photos")
    folder = tmp_path_factory.mktemp("collection") / "photos"
    jpegs = [p for p in write_photos(folder, 40) if p.suffix == ".jpg"]
    write_photos(folder / "more", 10, first=40)
    whole = jpegs[0].read_bytes()
    (folder / "broken.jpg").write_bytes(whole[: len(whole) // 2])
    (folder / ".hidden.png").write_bytes(b"skipped: hidden")
    return folder


@pytest.fixture(scope="module")
def ray_head():
    """The GCS address of a 2-CPU Ray cluster kept by a helper process for the module (stopped by closing its
    stdin: its ray.shutdown stops the cluster's processes)."""
    helper = subprocess.Popen([sys.executable, "-c", HELPER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    try:
        address = helper.stdout.readline().strip()
        assert address, "the Ray head did not start"
        yield address
    finally:
        helper.stdin.close()
        try:
            helper.wait(timeout=60)
        except subprocess.TimeoutExpired:
            helper.kill()
            helper.wait()


def run(argv: list, capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = runtime_cli.main(["embed-collection", *map(str, argv)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def rows(out: Path) -> dict[str, dict]:
    """{path: row} of OUT, read as one table; asserts every path is there once."""
    table = pq.read_table(out)
    paths = table.column("path").to_pylist()
    assert len(paths) == len(set(paths)), "duplicate rows"
    return dict(zip(paths, table.to_pylist()))


def features(row: dict, column: str = "embedding") -> np.ndarray:
    return np.asarray(row[column], dtype=np.float32).reshape(row["shape"])


def images_of(folder: Path) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.suffix in (".png", ".jpg") and not p.name.startswith("."))


@pytest.fixture(scope="module")
def local_out(package, photos, tmp_path_factory) -> Path:
    """OUT of `--scheduler local` on the folder (with DeepStack): the reference of the other runs."""
    out = tmp_path_factory.mktemp("local") / "out"
    code = runtime_cli.main(["embed-collection", str(package), str(photos), str(out), "--scheduler", "local",
                             "--threads", "1", "--batch", "4", "--deepstack"])
    assert code == 1  # the broken file
    return out


def test_local_engine_one_row_per_image_and_one_error(local_out, photos, package):
    found = rows(local_out)
    assert sorted(found) == sorted(str(p) for p in images_of(photos))  # recursive, hidden file skipped
    errors = {p: r for p, r in found.items() if r["status"] == "error"}
    assert list(errors) == [str(photos / "broken.jpg")]
    assert "broken.jpg is not a readable image" in errors[str(photos / "broken.jpg")]["error"]
    assert errors[str(photos / "broken.jpg")]["embedding"] is None
    digest = sha256(package / "onnx/vision_encoder.onnx")
    grids = set()
    for row in found.values():
        assert (row["variant"], row["checksum"]) == ("fp32", digest)
        if row["status"] == "ok":
            assert row["error"] is None and row["shape"][0] * 4 == np.prod(row["grid"])  # 2x2 patches per token
            assert features(row).shape == features(row, "deepstack_embeds_1").shape == (row["shape"][0], 96)
            grids.add(tuple(row["grid"]))
    assert len(grids) >= 8  # several sizes


def test_chunks_are_packed_up_to_the_budget(package, photos, monkeypatch):
    """The engines' `Embedder` runs several images per encoder call, never past --max-tokens (unless one image
    is larger alone), and its rows equal the local run's."""
    calls = []
    real = collection_embedder.session.run

    def spy(sess, feeds):
        calls.append(feeds["grid_thw"].copy())
        return real(sess, feeds)

    monkeypatch.setattr(collection_embedder.session, "run", spy)
    files = [str(p) for p in images_of(photos) if p.name != "broken.jpg"][:12]
    embedder = collection_embedder.Embedder(str(package), "fp32", 1, 600, ["embedding"], "x")
    table = embedder.rows(files, files)
    tokens = [int(np.prod(grid, axis=1).sum()) // 4 for grid in calls]
    assert sum(len(grid) for grid in calls) == 12 and max(len(grid) for grid in calls) >= 3
    assert all(t <= 600 or len(grid) == 1 for t, grid in zip(tokens, calls))
    assert table.column("status").to_pylist() == ["ok"] * 12


def test_ray_equals_local_equals_single_image_embed(package, photos, local_out, ray_head, tmp_path, capsys):
    out = tmp_path / "ray"
    code, stdout, stderr = run([package, photos, out, "--scheduler", "ray", "--address", ray_head, "--actors", 2,
                                "--threads", 1, "--batch", 4, "--deepstack"], capsys)
    assert code == 1 and "51 rows, 50 ok, 1 error" in stdout
    assert "51/51 images, 1 error" in stderr and "images/s" in stderr  # the progress bar's last line
    assert single_error(stderr).startswith("error: 1 of 51 entries could not be embedded")
    ray_rows, local_rows = rows(out), rows(local_out)
    assert sorted(ray_rows) == sorted(local_rows)
    columns = ["embedding", "deepstack_embeds_0", "deepstack_embeds_1"]
    for path, row in ray_rows.items():
        assert (row["status"], row["grid"], row["shape"]) == (local_rows[path]["status"], local_rows[path]["grid"],
                                                               local_rows[path]["shape"])
        if row["status"] == "ok":
            for column in columns:
                np.testing.assert_array_equal(features(row, column), features(local_rows[path], column))
    for path, row in ray_rows.items():  # each image alone through `python -m runtime embed`
        if row["status"] != "ok":
            continue
        npz = tmp_path / "one.npz"
        assert runtime_cli.main(["embed", path, "--package", str(package), "--out", str(npz), "--threads", "1"]) == 0
        with np.load(npz) as alone:
            np.testing.assert_array_equal(alone["image_0.grid_thw"], row["grid"])
            for column, output in zip(columns, ["image_features", *columns[1:]]):
                np.testing.assert_array_equal(features(row, column), alone[f"image_0.{output}"])


def test_killed_run_resumes_without_duplicates(package, photos, local_out, ray_head, tmp_path, capsys):
    """SIGKILL the command (`--scheduler local`: its own process does all the work) once parts appear; a rerun on the
    Ray cluster finishes it: each path once, the same bits as the uninterrupted local run."""
    out = tmp_path / "out"
    command = [sys.executable, "-m", "vlm_vision_onnx.runtime", "embed-collection", str(package), str(photos),
               str(out),
               "--scheduler", "local", "--threads", "1", "--batch", "2"]
    proc = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while len(list(out.glob("part-*.parquet"))) < 2 and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    before = len(pq.read_table(out)) if out.exists() else 0
    assert 0 < before < 51, f"the kill did not land midway ({before} rows written)"
    (out / ".part-from-a-killed-write.parquet.tmp").write_bytes(b"half a part")
    code, stdout, stderr = run([package, photos, out, "--address", ray_head, "--actors", 2, "--threads", 1,
                                "--batch", 2], capsys)
    assert code == 1 and "51 rows, 50 ok, 1 error" in stdout
    assert f"OUT already holds {before} entries; {51 - before} to go" in stderr
    assert not list(out.glob(".*.tmp"))
    resumed, local_rows = rows(out), rows(local_out)
    assert sorted(resumed) == sorted(local_rows)
    for path, row in resumed.items():
        if row["status"] == "ok":
            np.testing.assert_array_equal(features(row), features(local_rows[path]))
    code, stdout, stderr = run([package, photos, out, "--scheduler", "local"], capsys)  # done: nothing to run
    assert code == 1 and "OUT already holds 51 entries; 0 to go" in stderr and len(pq.read_table(out)) == 51


def test_lists_on_a_cluster_started_for_the_run(package, photos, local_out, tmp_path, capsys):
    """A Parquet list (with a video folder and a repeated path) on a local cluster started by the command (the
    default engine), then a CSV list and a glob locally; the video equals `embed --video` on its frames."""
    frames = sample_photos.write(tmp_path / "sample")
    video = tmp_path / "sample" / "pan"
    listed = [str(p) for p in images_of(photos)[:6]] + [str(video), str(images_of(photos)[0])]
    pq.write_table(pa.table({"path": listed, "label": list(range(len(listed)))}), tmp_path / "list.parquet")
    out = tmp_path / "from-parquet"
    code, stdout, _ = run([package, tmp_path / "list.parquet", out, "--threads", 1, "--batch", 3], capsys)
    assert code == 0 and "7 rows, 7 ok, 0 errors" in stdout
    found, local_rows = rows(out), rows(local_out)
    for path in listed[:6]:
        np.testing.assert_array_equal(features(found[path]), features(local_rows[path]))
    assert found[str(video)]["grid"][0] == 2  # 4 frames, temporal patch 2
    assert runtime_cli.main(["embed", "--video", str(video), "--package", str(package), "--out",
                             str(tmp_path / "video.npz"), "--threads", "1"]) == 0
    with np.load(tmp_path / "video.npz") as alone:
        np.testing.assert_array_equal(features(found[str(video)]), alone["video.image_features"])
    assert len([f for f in frames if f.parent == video]) == 4

    (tmp_path / "list.csv").write_text("label,path\n" + "".join(f"{i},{p}\n" for i, p in enumerate(listed[:3])))
    code, stdout, _ = run([package, tmp_path / "list.csv", tmp_path / "from-csv", "--scheduler", "local"], capsys)
    assert code == 0 and sorted(rows(tmp_path / "from-csv")) == sorted(listed[:3])
    code, stdout, _ = run([package, f"{photos}/**/*.jpg", tmp_path / "from-glob", "--scheduler", "local"], capsys)
    jpgs = [str(p) for p in images_of(photos) if p.suffix == ".jpg"]
    assert code == 1 and sorted(rows(tmp_path / "from-glob")) == sorted(jpgs)  # broken.jpg among them


@pytest.mark.parametrize("case", ["missing package", "OUT is a file", "OUT is another folder", "corrupt part",
                                  "other variant", "no path column", "no input", "unknown address",
                                  "address with local engine", "bad batch"])
def test_bad_input_is_one_line_and_writes_nothing(case, package, photos, local_out, tmp_path, capsys):
    out = tmp_path / "out"
    argv = [package, photos, out, "--scheduler", "local"]
    expected = {"missing package": "does not exist", "OUT is a file": "is a file", "OUT is another folder":
                "not an embed-collection output", "corrupt part": "is unreadable", "other variant":
                "holds embeddings of another run", "no path column": "has no `path` column", "no input":
                "does not exist", "unknown address": "no Ray cluster there", "address with local engine":
                "are for --scheduler ray", "bad batch": "--batch must be >= 1"}[case]
    if case == "missing package":
        argv[0] = tmp_path / "dist" / "nothing"
    elif case == "OUT is a file":
        out.write_text("mine")
    elif case == "OUT is another folder":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    elif case in ("corrupt part", "other variant"):  # an earlier OUT (with DeepStack columns)
        out.mkdir()
        for part in local_out.iterdir():
            (out / part.name).write_bytes(part.read_bytes())
        if case == "corrupt part":
            (out / "part-0.parquet").write_bytes(b"PAR1 not really")
            argv.append("--deepstack")
    elif case == "no path column":
        pq.write_table(pa.table({"file": ["a.png"]}), tmp_path / "list.parquet")
        argv[1] = tmp_path / "list.parquet"
    elif case == "no input":
        argv[1] = tmp_path / "nowhere"
    elif case == "unknown address":
        with __import__("socket").socket() as free:
            free.bind(("127.0.0.1", 0))
            port = free.getsockname()[1]  # closed again: nothing listens there
        argv[3:5] = ["--scheduler", "ray", "--address", f"127.0.0.1:{port}"]
    elif case == "address with local engine":
        argv += ["--address", "auto"]
    elif case == "bad batch":
        argv += ["--batch", "0"]
    before = snapshot(tmp_path)
    code, stdout, stderr = run(argv, capsys)
    assert code == 2 and expected in single_error(stderr), stderr
    assert snapshot(tmp_path) == before and stdout == ""


def test_shares_leave_room_beside_the_actors():
    """On any CPU count the actors' fractional reservations leave head-room, so a Ray Data task always fits."""
    from vlm_vision_onnx.runtime.collection_ray import pool, shares

    for cpus in (1, 2, 3, 4, 8, 64):
        for actors in (1, 2, cpus, 2 * cpus):
            each, reserve = shares(cpus, actors)
            assert reserve > 0 and actors * each + reserve == pytest.approx(cpus)
    assert pool(2, None, None) == (1, 2) and pool(2, 2, None) == (2, 1) and pool(64, None, None) == (32, 2)


def test_rows_table_reads_back_flattened(tmp_path):
    rows_in = [{"path": "a", "grid": [1, 2, 2], "features": [np.arange(6, dtype=np.float32).reshape(1, 6)]},
               {"path": "b", "error": "b is not an image"},
               {"path": "c", "grid": [1, 4, 2], "features": [np.ones((2, 6), np.float32)]}]
    collection_io.write_part(tmp_path, collection_io.rows_table(rows_in, ["embedding"], "fp32", "abc"))
    back = rows(tmp_path)
    np.testing.assert_array_equal(features(back["a"]), rows_in[0]["features"][0])
    np.testing.assert_array_equal(features(back["c"]), rows_in[2]["features"][0])
    assert back["b"]["status"] == "error" and back["b"]["embedding"] is None and back["b"]["shape"] is None


def test_an_actors_usage_error_is_one_line():
    """Ray hands an actor's exception over as text in its own error types: the UsageError's message is found."""
    from vlm_vision_onnx.runtime.collection_ray import ray_error_line

    wrapped = RuntimeError("The actor died because of an error raised in its creation task\n  File ...\n"
                           "vlm_vision_onnx.core.errors.UsageError: /pkg is not a release package: manifest.json is missing")
    assert ray_error_line(wrapped) == (True, "/pkg is not a release package: manifest.json is missing")
    assert ray_error_line(OSError("disk full\nmore")) == (False, "OSError: disk full")
