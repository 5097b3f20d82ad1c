"""The fuzz harness (tools/fuzz, docs/errors.md "Fuzzing"): a short fixed-seed run in `make test` through the
commands that answer in under a second or two (every surgery command, runtime verify / embed / encode, release
package, quantize optimize), and checks of the harness itself. The long run (bench/results/fuzz.md) adds the
quantize stages, builders.vision, embed-collection and npu-check.

Each finding the fuzzer made has its own test beside the code that now refuses it (tests/test_graph_check.py,
test_onnx_light.py, test_openvino.py, test_package.py, test_npu.py)."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import onnx
import pytest

from tests import builds
from tools.fuzz import cases, mutate_bytes, mutate_onnx, runner

ROOT = Path(__file__).resolve().parents[1]
#: The short run's commands and size: 200 cases, about a minute on 2 cores.
SHORT = ["surgery doctor", "surgery audit", "surgery fix-dims", "surgery set-batch", "surgery freeze",
         "surgery debake", "runtime verify", "runtime verify (tarball)", "runtime embed (package)",
         "runtime embed (image)", "runtime embed (video)", "runtime encode", "release package", "quantize optimize"]
SHORT_CASES = 200


@pytest.fixture(scope="module")
def seeds() -> Path:
    return builds.path(builds.fuzz_seeds())


def test_short_run_has_no_finding(seeds, tmp_path):
    """Seed 0, cases 0-199: no traceback, hang, run over the memory limit, crash, refusal of more than one line, or
    file written or removed outside OUT (exit 0), and the mix reaches most commands and both done and refused."""
    out = tmp_path / "fuzz.json"
    command = [sys.executable, "-m", "tools.fuzz", "run", "--seeds", str(seeds), "--work", str(tmp_path / "work"),
               "--seed", "0", "--cases", str(SHORT_CASES), "--timeout", "60", "--json", str(out),
               *(arg for label in SHORT for arg in ("--command", label))]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    print(done.stdout)
    findings = [line for line in done.stderr.splitlines() if line.startswith("[fuzz] case")]
    assert done.returncode == 0, "\n".join(findings) or done.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert len(results) == SHORT_CASES
    assert len({r["command"] for r in results}) >= 12
    outcomes = {r["outcome"] for r in results}
    assert {"done", "refused"} <= outcomes <= {"done", "failed", "refused"}


def test_a_case_is_made_again_from_its_seed_and_number(seeds, tmp_path):
    commands = cases.available(cases.COMMANDS)
    first = cases.make(17, 5, seeds, tmp_path / "a", commands)
    again = cases.make(17, 5, seeds, tmp_path / "b", commands)
    assert (first.command, first.what, first.seed_file) == (again.command, again.what, again.seed_file)
    files = lambda case: {p.relative_to(case.folder): p.read_bytes() for p in case.folder.rglob("*")
                          if p.is_file() and not p.is_symlink()}
    assert files(first) == files(again)


def test_the_runner_tells_each_outcome_apart(tmp_path):
    """A traceback, a hang, a crash, a one-line refusal, memory past the limit and a write outside OUT are each
    told as such (the probes are functions of this module, run as a case's `main`)."""
    seeds_dir = tmp_path / "seeds"
    seeds_dir.mkdir()
    # a forked case's peak resident memory starts at what fork copied of this worker's page tables: its anonymous
    # memory, not the shared libraries it mapped (torch's, after a build in this worker) nor its peak so far. So
    # the limit is what a case that does nothing peaks at, plus 300 MiB (the allocating probe touches 600).
    (tmp_path / "noop").mkdir()
    noop = cases.Case(0, "noop", "fuzz_probe_write_beside", [], tmp_path / "noop", tmp_path / "noop" / "out", "", "")
    baseline = runner.run(noop, runner.Limits(seconds=30), {}, seeds_dir).peak_mib * 2**20
    limits = runner.Limits(seconds=3, memory_bytes=int(baseline) + 300 * 2**20)
    found = {}
    for probe in PROBES:
        folder = tmp_path / probe
        folder.mkdir()
        case = cases.Case(0, probe, f"fuzz_probe_{probe}", [], folder, folder / "out", "", "")
        found[probe] = runner.run(case, limits, {}, seeds_dir)
    assert found["refuse"].outcome == "refused" and found["refuse"].one_line
    assert found["two_lines"].outcome == "refused" and found["two_lines"].one_line is False
    assert found["raise_"].outcome == "traceback"
    assert found["sleep"].outcome == "hang"
    assert found["segfault"].outcome == "crash"
    assert found["allocate"].outcome == "memory"
    assert found["write_beside"].outcome == "done" and found["write_beside"].outside == ["beside.txt"]


PROBES = ["refuse", "two_lines", "raise_", "sleep", "segfault", "allocate", "write_beside"]


def _probe_module():
    """A module `fuzz_probe_NAME` with `main(argv)` per probe (the runner imports by module name)."""
    import types

    def probe(body):
        return types.SimpleNamespace(main=lambda argv: body())

    def refuse():
        print("error: bad input: the file is wrong", file=sys.stderr)
        return 2

    def two_lines():
        print("error: one\nerror: two", file=sys.stderr)
        return 2

    def raise_():
        raise KeyError("x")

    def sleep():
        import time
        time.sleep(30)

    def segfault():
        import ctypes
        import faulthandler

        faulthandler.disable()  # pytest's handler would print its report on this worker's stderr
        ctypes.string_at(0)

    def allocate():
        block = bytearray(600 * 2**20)
        block[::4096] = b"x" * len(block[::4096])
        return 0

    def write_beside():
        Path("beside.txt").write_text("x")
        return 0

    for name, body in zip(PROBES, [refuse, two_lines, raise_, sleep, segfault, allocate, write_beside]):
        sys.modules[f"fuzz_probe_{name}"] = probe(body)


_probe_module()


def test_mutators_change_what_they_are_given(tmp_path):
    rng = random.Random(0)
    data = bytes(range(256)) * 8
    assert all(mutate_bytes.mutate(data, rng, data)[0] != data for _ in range(20))
    weight = onnx.helper.make_tensor("w", onnx.TensorProto.FLOAT, [2], [1.0, 2.0])
    model = onnx.helper.make_model(onnx.helper.make_graph(
        [onnx.helper.make_node("Add", ["x", "w"], ["a"]), onnx.helper.make_node("Transpose", ["a"], ["y"], perm=[0])],
        "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])], initializer=[weight]))
    onnx.helper.set_model_props(model, {"family": "qwen3-vl"})
    for mutator in mutate_onnx.MUTATORS:
        for _ in range(3):  # each draws its own variant of the edit
            copy = onnx.ModelProto()
            copy.CopyFrom(model)
            mutator(copy, rng, tmp_path)
            assert copy.SerializeToString() != model.SerializeToString(), mutator.__name__
