"""The suite's builds: every tiny export, stage folder and package that tests read, made once and cached across runs.

A build is a `Recipe`: a label, the entry modules of the command that makes it, the data files it reads, its
parameters and the builds it starts from. Its key is the sha256 of all of that: the label and parameters, the
content of every checkout file the entry modules can import (`tests.source.module_closure`, so a change to
`quantize/` re-makes the int8 stage of a build but not its export), the data files, the versions of the libraries
that shape an ONNX file (torch, transformers, onnx, onnx-ir, onnxscript, onnxruntime, openvino, nncf, numpy), and
the keys of its parents. `path(recipe)` returns `CACHE/<label>-<key>/`, made on first use:

- in a folder beside it, renamed into place only when the command succeeded (a failed build leaves nothing);
- under an exclusive file lock per key, so two pytest-xdist workers (or two runs) wait for one build;
- with a manifest of its files' sha256 beside it; a later use that finds a file changed (a test wrote into a cached build)
  re-makes it instead of handing out what another test left;
- with a line in `CACHE/made.tsv` per build made (label, folder, seconds of its own making, parents excluded, and the
  worker's pid): what each build costs a run from an empty cache (`bench.suite_durations --builds`).

CACHE is `$VLM_TEST_CACHE`, else `.cache/test-builds/` in the checkout (outside build/ and dist/; git ignores it).
Deleting it is always safe. Builds are read-only for tests: a test that writes beside one copies it first.
A test whose subject is the build itself (an interrupted export, a checkpoint's own weights, an export's flags
under test) makes its own and says so in one line.
"""

import fcntl
import functools
import hashlib
import json
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from tests.source import ROOT, module_closure

#: Libraries whose version changes what a build holds (a missing one counts as "absent").
LIBRARIES = ("torch", "transformers", "onnx", "onnx-ir", "onnxscript", "onnxruntime", "openvino", "nncf", "numpy")


def cache_root() -> Path:
    return Path(os.environ.get("VLM_TEST_CACHE") or ROOT / ".cache" / "test-builds")


@dataclass(frozen=True)
class Recipe:
    """How one build is made. `make(out, parents)` writes the build into the folder `out`, which does not exist yet
    (parents: the folders of `self.parents`, in order), and raises on failure."""

    label: str
    entries: tuple[str, ...]
    params: tuple
    make: Callable[[Path, list[Path]], None] = field(compare=False, repr=False)
    files: tuple[str, ...] = ()
    parents: tuple["Recipe", ...] = ()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


_DIGESTS: dict[Path, str] = {}


def _digest(path: Path) -> str:
    """sha256 of a checkout file, read once per process (the checkout does not change under a run)."""
    if path not in _DIGESTS:
        _DIGESTS[path] = _sha(path)
    return _DIGESTS[path]


def _versions() -> dict[str, str]:
    found = {}
    for name in LIBRARIES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


@functools.cache
def _versions_once() -> dict[str, str]:
    return _versions()


def key(recipe: Recipe, root: Path = ROOT, digest: Callable[[Path], str] = _digest) -> str:
    """The content key of `recipe` (hex, 20 characters): see the module's docstring for what goes into it."""
    if root == ROOT and digest is _digest:
        return _key(recipe)
    return _compute_key(recipe, root, digest, _versions())


@functools.cache
def _key(recipe: Recipe) -> str:
    """`key` of the checkout as it is (a run does not change it): computed once per recipe and process."""
    return _compute_key(recipe, ROOT, _digest, _versions_once())


def _compute_key(recipe: Recipe, root: Path, digest: Callable[[Path], str], versions: dict[str, str]) -> str:
    code = {str(p.relative_to(root)): digest(p) for p in module_closure(*recipe.entries, root=root)}
    data = {name: digest(root / name) for name in recipe.files}
    facts = {"label": recipe.label, "params": recipe.params, "code": code, "files": data,
             "versions": versions, "python": sys.version_info[:2],
             "parents": [_compute_key(p, root, digest, versions) for p in recipe.parents]}
    return hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _manifest(folder: Path) -> dict[str, str]:
    """{relative path: sha256} of every file under `folder`."""
    return {str(p.relative_to(folder)): _sha(p) for p in sorted(folder.rglob("*")) if p.is_file()}


#: Builds checked against their manifests in this process: {folder}.
_CHECKED: set[Path] = set()


def path(recipe: Recipe) -> Path:
    """The folder of `recipe`'s build, made (parents first) if the cache lacks it or holds a changed copy; its
    parents are looked up only to make it (its key already holds theirs)."""
    root = cache_root()
    folder = root / f"{recipe.label.replace('/', '-')}-{key(recipe)}"
    if folder in _CHECKED:
        return folder
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        manifest = root / f"{folder.name}.manifest.json"  # beside the build: a test that copies it copies no extra file
        if manifest.is_file() and folder.is_dir() and json.loads(manifest.read_text()) == _manifest(folder):
            _CHECKED.add(folder)
            return folder
        if folder.exists():
            print(f"[builds] {folder.name}: changed since it was made (a test wrote into it); making it again",
                  file=sys.stderr)
            shutil.rmtree(folder)
        work = root / f"{folder.name}.partial-{os.getpid()}"  # made by recipe.make, as a command makes --out
        shutil.rmtree(work, ignore_errors=True)
        try:
            parents = [path(parent) for parent in recipe.parents]  # locks taken child first: no cycle
            started = time.monotonic()
            recipe.make(work, parents)
            manifest.write_text(json.dumps(_manifest(work), indent=1))
            work.rename(folder)
            with open(root / "made.tsv", "a") as made:  # one short line per write: workers' lines do not interleave
                made.write(f"{recipe.label}\t{folder.name}\t{time.monotonic() - started:.1f}\t{os.getpid()}\n")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    _CHECKED.add(folder)
    return folder


class Lazy(Mapping):
    """{key: folder}, each made on first access (`make(key)`): a fixture that serves several builds makes only those
    its tests read, and two xdist workers reading different keys make them at once."""

    def __init__(self, keys, make: Callable[[object], Path]):
        self._keys, self._make, self._made = tuple(keys), make, {}

    def __getitem__(self, key) -> Path:
        if key not in self._keys:
            raise KeyError(key)
        if key not in self._made:
            self._made[key] = self._make(key)
        return self._made[key]

    def __iter__(self) -> Iterator:
        return iter(self._keys)

    def __len__(self) -> int:
        return len(self._keys)


# ---------------------------------------------------------------- recipes
def _config_files(model: str) -> tuple[str, ...]:
    """The config files `--model MODEL` reads."""
    return ("configs/aliases.yaml", f"configs/{model}.yaml")


def _ok(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"{what} exited {code}")


def export(model: str, *flags: str) -> Recipe:
    """`python -m builders.vision --model MODEL FLAGS`: the export folder (model.onnx, report.json)."""
    def make(out: Path, _parents: list[Path]) -> None:
        from builders import vision  # imported here: torch-free test modules import this module

        _ok(vision.main(["--model", model, "--out", str(out), *flags]), f"export {model} {flags}")

    return Recipe("export", ("builders.vision",), (model, flags), make, _config_files(model))


def export_config(model: str, name: str, vision: dict, *flags: str) -> Recipe:
    """`python -m builders.vision --config NAME.yaml FLAGS`: configs/MODEL.yaml with the `vision` keys replaced (a
    tiny config with 3 encoder layers, say), written as NAME.yaml (the export's model name)."""
    def make(out: Path, _parents: list[Path]) -> None:
        import tempfile

        import yaml

        from builders import vision as vision_cli

        config = yaml.safe_load((ROOT / "configs" / f"{model}.yaml").read_text())
        config["vision"].update(vision)
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(yaml.safe_dump(config))
            _ok(vision_cli.main(["--config", str(path), "--out", str(out), *flags]), f"export {model} {vision}")

    return Recipe("export", ("builders.vision",), (model, name, tuple(sorted(vision.items())), flags), make,
                  _config_files(model))


def stage(parent: Recipe, command: str, *flags: str, int4: Recipe | None = None) -> Recipe:
    """`python -m surgery stage` or `python -m quantize COMMAND` on `parent`'s folder, one thread (q4f16: with
    `--int4` the folder of the `int4` recipe, the stage whose recipe it takes)."""
    def make(out: Path, parents: list[Path]) -> None:
        if command == "surgery":
            from surgery import cli

            _ok(cli.main(["stage", str(parents[0]), str(out), *flags]), f"surgery stage {flags}")
        else:
            from quantize import __main__ as cli

            extra = ["--int4", str(parents[1])] if int4 is not None else []
            _ok(cli.main([command, str(parents[0]), str(out), "--threads", "1", *extra, *flags]),
                f"{command} {flags}")

    if command == "surgery":
        return Recipe(command, ("surgery.cli",), flags, make, parents=(parent,))
    # quantize/__main__.py imports every stage's module to dispatch; a stage's build depends on the dispatcher's
    # own text and on its own module's closure, not on the other stages' modules.
    entries = (f"quantize.{command.replace('-', '_')}", "quantize.options", "vlm_vision_onnx.core.errors",
               "vlm_vision_onnx.core.onnx_io",
               "vlm_vision_onnx.families")
    return Recipe(command, entries, flags, make, ("quantize/__main__.py",),
                  parents=(parent,) if int4 is None else (parent, int4))


def chain(export_recipe: Recipe, *steps: tuple) -> dict[str, Recipe]:
    """{"export": export_recipe, step name: Recipe}: each step `(name, command, *flags)` reads the folder of the
    step before it, except the quantize stages after "optimized", which all read "optimized" (as `make export`);
    q4f16 takes the recipe of the "int4" step (its --int4)."""
    found = {"export": export_recipe}
    for name, command, *flags in steps:
        source = found.get("optimized", list(found.values())[-1])
        found[name] = stage(source, command, *flags, int4=found["int4"] if command == "q4f16" else None)
    return found


def assemble(stages: dict[str, Recipe], build: Path) -> Path:
    """`build`/<stage>/ for every {stage folder name: Recipe} of `stages`: copies of the cached folders, a build
    folder as `make export` leaves it, for tests that write beside the stages. Returns `build`."""
    for stage_name, recipe in stages.items():
        shutil.copytree(path(recipe), build / stage_name)
    return build


def package(name: str, stages: dict[str, Recipe], *flags: str) -> Recipe:
    """`python -m release package build/NAME --dist OUT FLAGS` on a build folder of `stages` ({stage folder name:
    Recipe}): OUT holds NAME/ and NAME.tar.gz."""
    names = tuple(stages)

    def make(out: Path, _parents: list[Path]) -> None:
        import tempfile

        from vlm_vision_onnx.release import __main__ as release_cli

        with tempfile.TemporaryDirectory() as tmp:
            build = assemble(stages, Path(tmp) / name)
            _ok(release_cli.main(["package", str(build), "--dist", str(out), "--threads", "1", *flags]),
                f"package {name}")

    return Recipe("package", ("vlm_vision_onnx.release.__main__",), (name, names, flags), make,
                  parents=tuple(stages.values()))


def phi4_graph(layers: int | None = None) -> Recipe:
    """The tiny Phi-4-multimodal config (`layers` encoder layers instead of its 2 where given), random weights
    (seed 0), traced through TorchScript with named dims, no validation: model.onnx. `conftest.export_phi4_tiny`
    pairs it with the eager module; the graph tests edit it without a stage."""
    def make(out: Path, _parents: list[Path]) -> None:
        import dataclasses

        import onnx

        from builders import onnx_export
        from builders.config import load_config
        from builders.phi4_mm import family
        from vlm_vision_onnx.families.phi4_mm import layouts

        config = load_config("phi-4-mm-tiny")
        if layers is not None:
            config = dataclasses.replace(config, vision={**config.vision, "num_hidden_layers": layers})
        embed = family.build(config, None, seed=0)[0]
        io = family.io_spec(embed)
        example = family.example_inputs(embed, layouts.EXAMPLE_IMAGES, seed=0)
        proto = onnx_export.export_torchscript(family.export_module(embed), tuple(example[n] for n in io.input_names),
                                               io, config.opset)
        onnx_export.name_io_dims(proto, io)
        out.mkdir()
        onnx.save(proto, str(out / "model.onnx"))

    return Recipe("phi4-graph", ("builders.onnx_export", "builders.config", "builders.phi4_mm.family",
                                 "vlm_vision_onnx.families.phi4_mm.layouts"), (layers,), make, _config_files("phi-4-mm-tiny"))


def every_variant(export_recipe: Recipe) -> dict[str, Recipe]:
    """`make export FP16=1`'s stages from an export: {export, surgery, optimized, int8, int4, fp16, q4f16} (int4 in
    blocks of 32, onnx-community's q4 and q4f16 block, all 4-bit: the shipped 2B recipe's 72 MatMuls at 8 bits
    would be every MatMul of a tiny model)."""
    return chain(export_recipe, ("surgery", "surgery"), ("optimized", "optimize"), ("int8", "int8"),
                 ("int4", "int4", "--block-size", "32"), ("fp16", "fp16"), ("q4f16", "q4f16"))


def webgpu_check(package_recipe: Recipe, name: str, home: Path) -> Recipe:
    """`python -m runtime webgpu-check dist/NAME --webgpu HOME --json report.json --threads 1` on `package_recipe`'s
    package: the report of a real client's run, cached as a build is (a test reads its findings; re-running lavapipe
    on an unchanged package, runtime and install would compute the same report). Its key holds the package's, the
    runtime's code (the worker script too), the install's env.sh and the distributions in its venv and of its Mesa."""
    def make(out: Path, parents: list[Path]) -> None:
        from vlm_vision_onnx.runtime import __main__ as runtime_cli

        out.mkdir()
        report = out / "report.json"
        code = runtime_cli.main(["webgpu-check", str(parents[0] / name), "--webgpu", str(home), "--json",
                                 str(report), "--threads", "1"])
        if code != 0 and report.exists():  # a failed check is not cached: its findings go into the error
            found = json.loads(report.read_text())
            failed = [(v["file"], v.get("error"), v.get("problems")) for v in found["variants"] if not v["ok"]]
            raise RuntimeError(f"webgpu-check {name} failed: {failed}; canary {found['attention_canary']}")
        _ok(code, f"webgpu-check {name}")

    installed = sorted(p.name for p in home.glob("venv/lib/python*/site-packages/*.dist-info"))
    installed += sorted(p.name for p in (home / "debs").glob("*.deb"))
    params = (name, (home / "env.sh").read_text(), tuple(installed))
    # as a quantize stage (`stage`): the dispatcher's own text, not the other subcommands' modules it imports
    return Recipe("webgpu-check", ("vlm_vision_onnx.runtime.webgpu", "vlm_vision_onnx.core.errors"), params,
                  make,
                  ("vlm_vision_onnx/runtime/__main__.py", "vlm_vision_onnx/runtime/webgpu_worker.py",
                   "tools/webgpu-install.sh"),
                  parents=(package_recipe,))


def fuzz_seeds() -> Recipe:
    """The fuzz harness's seed folder (tools/fuzz/seeds.py) from the tiny Qwen3-VL and Phi-4-multimodal exports and
    packages, the real detectors of ../shared/fixtures/real (their names and sizes in the key), photos and configs."""
    from tools.fuzz import seeds

    exports = {"qwen3-vl-tiny": QWEN3_VL, "phi-4-mm-tiny": PHI4_MM}
    packages = {name: package(name, {"export": recipe}) for name, recipe in exports.items()}

    def make(out: Path, parents: list[Path]) -> None:
        folders = dict(zip([*exports, *(f"{n}.dist" for n in packages)], parents))
        seeds.gather(out, {n: folders[n] for n in exports}, {n: folders[f"{n}.dist"] for n in packages})

    real = tuple(sorted((p.name, p.stat().st_size) for p in seeds.REAL.glob("*.onnx"))) if seeds.REAL.is_dir() else ()
    return Recipe("fuzz-seeds", ("tools.fuzz.seeds",), (real,), make,
                  tuple(f"builders/configs/{n}.yaml" for n in seeds.TINY),
                  parents=(*exports.values(), *packages.values()))


def random_checkpoint(family: str) -> Recipe:
    """`python -m builders.random_checkpoint --family FAMILY` (tiny, seed 0): a whole VLM's save_pretrained folder
    with a tokenizer and preprocessor_config.json. Its own build, so that what is exported from it records a path
    that stays (a build made in a folder renamed afterwards would record the folder it was made in)."""
    def make(out: Path, _parents: list[Path]) -> None:
        from builders import random_checkpoint as checkpoint

        checkpoint.write(out, family=family)

    return Recipe("checkpoint", ("builders.random_checkpoint",), (family,), make)


def genai(family: str) -> Recipe:
    """`release genai` from `random_checkpoint(family)`: build/export/ (its export: `--model qwen3-vl-tiny` for
    Qwen3-VL, the family read from the checkpoint for the others), photos/ (runtime/sample_photos.py) and pkg/ (the
    onnxruntime-genai package). The checkpoint is the recipe's parent (`parents[0]`)."""
    def make(out: Path, parents: list[Path]) -> None:
        from builders import vision
        from vlm_vision_onnx.release import __main__ as release_cli
        from vlm_vision_onnx.runtime import sample_photos

        out.mkdir()
        model = ["--model", "qwen3-vl-tiny"] if family == "qwen3-vl" else []
        _ok(vision.main([*model, "--checkpoint", str(parents[0]), "--out", str(out / "build" / "export")]),
            f"export of the {family} checkpoint")
        sample_photos.write(out / "photos")
        _ok(release_cli.main(["genai", str(out / "build"), "--checkpoint", str(parents[0]), "--out",
                              str(out / "pkg")]), f"release genai of {family}")

    files = _config_files("qwen3-vl-tiny") if family == "qwen3-vl" else ("configs/aliases.yaml",)
    return Recipe("genai", ("builders.vision", "vlm_vision_onnx.runtime.sample_photos",
                            "vlm_vision_onnx.release.__main__"), (family,), make, files,
                  parents=(random_checkpoint(family),))


def transformers_js_node() -> Recipe:
    """`npm ci --ignore-scripts` of tools/node (transformers.js 4.3.1 and onnxruntime-node, pinned by its
    lockfile): the folder with node_modules/, the driver scripts and browser/ (the page `run_browser` serves,
    copied here first so that its own copy changes nothing of the build)."""
    from tools import transformers_js  # imported here: most test modules never need it

    def make(out: Path, _parents: list[Path]) -> None:
        transformers_js.install(out)
        (out / "browser").mkdir()
        for name in transformers_js.BROWSER_FILES:
            shutil.copyfile(transformers_js.BROWSER_DIR / name, out / "browser" / name)

    files = tuple(f"tools/node/{name}" for name in transformers_js.NODE_FILES) + tuple(
        f"tools/browser/{name}" for name in transformers_js.BROWSER_FILES)
    return Recipe("transformers-js-node", ("tools.transformers_js",), (), make, files)


# ---------------------------------------------------------------- the builds more than one test module reads
QWEN3_VL = export("qwen3-vl-tiny")
QWEN3_VL_DYNAMO = export("qwen3-vl-tiny", "--dynamo")
PHI4_MM = export("phi-4-mm-tiny")
QWEN2_5_VL = export("qwen2.5-vl-tiny")
#: The optimize stage straight from the TorchScript export (no surgery stage before it).
QWEN3_VL_OPTIMIZED = stage(QWEN3_VL, "optimize")
#: build/qwen3-vl-tiny/{export, surgery, optimized, int4}: `make export`'s stages (int4 in blocks of 32).
QWEN3_VL_STAGES = chain(QWEN3_VL, ("surgery", "surgery"), ("optimized", "optimize"),
                        ("int4", "int4", "--block-size", "32"))
#: `--static` sizes of the tiny configs (pixels, WxH): a square and a non-square one per Qwen generation, each a
#: few patches a side; Qwen2.5-VL's windows (8 patches) are cut at the right and bottom edges at both sizes; and
#: one video (FRAMESxWxH: 4 frames, t = 2, one batch of two frames in every attention).
TINY_STATIC = {"qwen2-vl-tiny": ("56x56", "84x56"), "qwen2.5-vl-tiny": ("168x168", "196x140"),
               "qwen3-vl-tiny": ("64x64", "96x64"), "qwen3.5-tiny": ("64x64", "96x64", "4x64x64")}
