"""`python -m runtime npu-check MODEL_OR_PACKAGE [--soc-model N] [--htp-arch N]`: a static encoder on Qualcomm's HTP.

The NPU of Snapdragon phones and Copilot+ PCs, through ONNX Runtime's QNN execution provider (PyPI
`onnxruntime-qnn`, a plugin EP: the `npu` extra). On x86-64 Linux its HTP backend is Qualcomm's simulator of
the NPU: it compiles and runs the same graph the device would, slowly (its times are not a device's speed).

For each model (a model.onnx, a stage folder, or every static file a package's manifest lists, runtime/buckets.py):
1. the session on the HTP backend with CPU fallback disabled (`session.disable_cpu_ep_fallback=1`): every node
   runs on the NPU, or the check fails with one line naming the first node the EP refused and its reason (read
   from the EP's own log), and what keeps the graph from being static (`core.static_graph`);
2. real photos (scikit-image's, or `--images`) resized to the model's size (the family's `static.feeds`)
   through it and through the CPU EP's fp32 model (the model itself, or for a `quantize qnn` / `fp16` variant the
   fp32 model its report names as input): finite, min per-token cosine at or above the variant's floor
   (`FLOORS`: fp16 precision 0.999, QDQ 0.98);
3. step 1's session writes the EP context binary (`ep.context_enable=1`) compiled for the SoC; step 2's photos run
   on that binary loaded back on the HTP (the artifact a device loads), so the model is compiled once.
A float32 model runs at HTP fp16 precision (`enable_htp_fp16_precision=1`, needs `soc_model` and `htp_arch`);
a QDQ model (QuantizeLinear / DequantizeLinear, `python -m quantize qnn`) runs quantized.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

from vlm_vision_onnx.core import onnx_io, session
from vlm_vision_onnx.core import parity as metrics
from vlm_vision_onnx.core import report as reports
from vlm_vision_onnx.core.errors import CheckFailed, UsageError, one_line
from vlm_vision_onnx.core.staging import check_result_file, staged_file

#: The wheel the `npu` extra pins (pyproject.toml).
QNN_PACKAGE = "onnxruntime-qnn==2.7.0"
INSTALL_HINT = f"pip install '.[npu]' ({QNN_PACKAGE}: Linux x86-64 and Windows, Python 3.11+)"
#: Min per-token cosine against the CPU EP's fp32, per precision the HTP runs the model in.
FLOORS = {"fp16": 0.999, "qdq": 0.98}
#: scikit-image photos npu-check runs (the calibration photos of `quantize qnn` are others: quantize.calibration).
PHOTOS = ("astronaut", "coffee", "chelsea", "rocket")
QDQ_OPS = {"QuantizeLinear", "DequantizeLinear"}


@dataclass(frozen=True)
class Htp:
    """The HTP target: `soc_model` (QNN's SoC id, e.g. 60 = Snapdragon 8 Gen 3 class) and `htp_arch` (e.g. 73 = v73);
    `context_cache`: where `embed --engine qnn` keeps compiled graphs between runs (runtime/npu_context_cache.py;
    None: compile every run).

    One object from the command line to the session (`add_arguments`, `from_args`, `provider_options`)."""

    soc_model: int = 60
    htp_arch: int = 73
    context_cache: Path | None = None

    def __post_init__(self):
        for name in ("soc_model", "htp_arch"):
            if getattr(self, name) <= 0:
                raise UsageError(f"--{name.replace('_', '-')} must be a positive QNN id, got {getattr(self, name)}")

    @staticmethod
    def add_arguments(parser, cache: bool = False) -> None:
        """--soc-model and --htp-arch; with `cache`, --context-cache DIR and --no-context-cache too."""
        parser.add_argument("--soc-model", "--soc", type=int, default=Htp.soc_model, metavar="N",
                            help=f"QNN SoC id the HTP compiles for (default {Htp.soc_model})")
        parser.add_argument("--htp-arch", type=int, default=Htp.htp_arch, metavar="N",
                            help=f"HTP architecture (default {Htp.htp_arch}, v73)")
        if cache:
            from vlm_vision_onnx.runtime.npu_context_cache import DEFAULT

            parser.add_argument("--context-cache", type=Path, default=DEFAULT, metavar="DIR",
                                help=f"--engine qnn: keep each bucket's compiled HTP graph in DIR and load it in later "
                                     f"runs (default {DEFAULT})")
            parser.add_argument("--no-context-cache", dest="context_cache", action="store_const", const=None,
                                help="--engine qnn: compile every run, keep nothing")

    @classmethod
    def from_args(cls, args) -> Htp:
        return cls(args.soc_model, args.htp_arch, getattr(args, "context_cache", None))

    def provider_options(self, precision: str) -> dict[str, str]:
        """The QNN EP's options: the HTP backend of the wheel, this SoC, fp16 precision unless QDQ."""
        options = {"backend_path": qnn_module().get_qnn_htp_path(), "soc_model": str(self.soc_model),
                   "htp_arch": str(self.htp_arch)}
        if precision == "fp16":
            options["enable_htp_fp16_precision"] = "1"
        return options


def qnn_module():
    """`onnxruntime_qnn`, or UsageError saying how to install it."""
    try:
        import onnxruntime_qnn
    except ImportError:
        raise UsageError(f"onnxruntime-qnn is not installed: {INSTALL_HINT}") from None
    return onnxruntime_qnn


def unavailable() -> str | None:
    """Why the QNN EP's HTP backend cannot run here (None when it can): for the tests' skip reasons."""
    try:
        devices()
    except UsageError as err:
        return str(err)
    return None


_REGISTERED: list = []


def devices() -> list:
    """The QNN EP's devices, registering the plugin library once per process."""
    qnn = qnn_module()
    if not _REGISTERED:
        try:
            ort.register_execution_provider_library(qnn.EP_NAME, qnn.get_library_path())
        except Exception as err:  # noqa: BLE001 -- a library that does not load: one line
            raise UsageError(f"the QNN EP library does not load ({one_line(str(err))}); {INSTALL_HINT}") from None
        _REGISTERED.append(qnn.EP_NAME)
    found = [d for d in ort.get_ep_devices() if d.ep_name == qnn.EP_NAME]
    if not found:
        raise UsageError(f"the QNN EP registered but offers no device; {INSTALL_HINT}")
    return found


@contextlib.contextmanager
def captured_stderr():
    """Everything written to file descriptors 1 and 2 inside the block (ONNX Runtime logs to 2 from C++, Qualcomm's
    libraries print to 1), as `holder[0]` after it."""
    holder: list[str] = [""]
    with tempfile.TemporaryFile(mode="w+b") as sink:
        saved = [os.dup(1), os.dup(2)]
        for fd in (1, 2):
            os.dup2(sink.fileno(), fd)
        try:
            yield holder
        finally:
            for fd, old in zip((1, 2), saved):
                os.dup2(old, fd)
                os.close(old)
            sink.seek(0)
            holder[0] = sink.read().decode("utf-8", "replace")


def session_options(htp: Htp, precision: str, context: Path | None = None, verbose: bool = False):
    """CPU fallback disabled, the QNN devices with `htp`'s options; with `context`, the EP context model written
    there (its binary beside it, `ep.context_embed_mode=0`)."""
    options = ort.SessionOptions()
    options.log_severity_level = 0 if verbose else 3
    options.add_session_config_entry("session.disable_cpu_ep_fallback", "1")
    if context is not None:
        options.add_session_config_entry("ep.context_enable", "1")
        options.add_session_config_entry("ep.context_file_path", str(context))
        options.add_session_config_entry("ep.context_embed_mode", "0")
    options.add_provider_for_devices(devices(), htp.provider_options(precision))
    return options


#: A node unit the EP's verbose log says it refused: the unit's op, its nodes ("Operator type: T Node name: N"), why.
_REFUSED = re.compile(r"Validation FAILED for \d+ nodes in OrtNodeUnit \((\S+)\) :\n((?:\s*Operator type:[^\n]*\n)+)"
                      r"\s*REASON : ([^\n]*)")
_NODE = re.compile(r"Operator type: (\S+) Node name: (\S+)")
_BACKEND = r"backendValidateOpConfig\(\) failed for node `{}` of type `(\S+)` with error code (\d+)"


def refusal(log: str, error: BaseException, model_file: Path) -> str:
    """One line: the first node the EP refused and why (its verbose log: the unit's main node, the reason, QNN's
    validation error code when it gave one), the EP's error otherwise, and what keeps the graph from being static."""
    found = _REFUSED.search(log)
    if found:
        op, nodes, reason = found.group(1), _NODE.findall(found.group(2)), found.group(3).strip()
        name = next((n for t, n in nodes if t == op), nodes[0][1])
        backend = re.search(_BACKEND.format(re.escape(name)), log)
        if backend:
            reason += f" (QNN {backend.group(1)} validation error {backend.group(2)})"
        units = len({_NODE.findall(f.group(2))[0] for f in _REFUSED.finditer(log)})  # the log repeats units
        head = (f"the QNN EP refused node {name} ({op}): {reason}"
                + (f", and {units - 1} more node group(s)" if units > 1 else ""))
    else:
        head = f"the QNN EP failed: {one_line(str(error))[:300]}"
    # onnx's shape inference: imported when a refusal needs explaining
    from vlm_vision_onnx.core import static_graph

    why = static_graph.problems(onnx_io.read_proto(model_file), limit=1)
    return (f"{model_file}: {head}; CPU fallback is disabled, so nothing runs"
            + (f"; the graph is not static ({why[0]}): export it with --static WIDTHxHEIGHT" if why else ""))


def open_compiled(model: Path, htp: Htp, precision: str) -> tuple[ort.InferenceSession, str]:
    """(session, what happened): `model` on the HTP through `htp.context_cache` (runtime/npu_context_cache.py), or
    compiled with nothing kept when there is none."""
    if htp.context_cache is None:
        return open_htp(model, htp, precision), "compiled"
    from vlm_vision_onnx.runtime import npu_context_cache as cache

    options = {k: v for k, v in htp.provider_options(precision).items() if k != "backend_path"}
    entry = cache.key(Path(model), options, precision, getattr(qnn_module(), "__version__", "?"))
    return cache.open_cached(Path(model), htp.context_cache, entry,
                             lambda path, context: open_htp(path, htp, precision, context))


def open_htp(model: Path | str, htp: Htp, precision: str, context: Path | None = None) -> ort.InferenceSession:
    """A session with every node on the HTP; CheckFailed with `refusal`'s line when the EP refuses one,
    UsageError when ONNX Runtime cannot load the file at all (an invalid graph, missing weights)."""
    try:
        with captured_stderr():
            return ort.InferenceSession(str(model), sess_options=session_options(htp, precision, context))
    except session.ORT_ERRORS as err:
        if isinstance(err, session.INVALID_MODEL_ERRORS):
            raise UsageError(f"ONNX Runtime cannot load {model}: {session.ort_error_line(err)}") from None
        with captured_stderr() as log, contextlib.suppress(Exception):  # again, with the EP's verbose log
            ort.InferenceSession(str(model), sess_options=session_options(htp, precision, verbose=True))
        raise CheckFailed(refusal(log[0], err, Path(model))) from None


def precision_of(proto) -> str:
    """'qdq' for a model with QuantizeLinear / DequantizeLinear, else 'fp16' (HTP fp16 precision)."""
    return "qdq" if any(n.op_type in QDQ_OPS for n in proto.graph.node) else "fp16"


def reference_of(model_file: Path) -> Path:
    """The float32 model to compare with: a `quantize qnn` or `fp16` output's input (its report), else itself."""
    report = reports.read_beside(model_file)
    if report.get("stage") in ("qnn", "fp16") and report.get("input"):
        source = onnx_io.model_path(report["input"])
        if not source.exists():
            raise UsageError(f"{model_file}: its fp32 input {source} (report.json) is gone; give --reference")
        return source
    return model_file


def models_in(path: Path) -> list[tuple[Path, Path | None]]:
    """(model, its fp32 reference or None for itself) of a model file, a stage folder's model.onnx, or every static
    file of a package (its manifest's `static_buckets`, runtime/buckets.py: each compared with its bucket's fp32)."""
    from vlm_vision_onnx.runtime import buckets, unpack

    path = Path(path)
    if path.is_dir() and (path / "manifest.json").is_file():
        try:
            found = buckets.read(json.loads((path / "manifest.json").read_text()))
        except (OSError, ValueError) as err:
            raise UsageError(f"{path}/manifest.json is not readable JSON ({err})") from None
        if not found:
            raise UsageError(f"{path} is a package without static buckets (no {buckets.KEY} in its manifest): "
                             "build them with make export STATIC=WxH and package again")
        return [(unpack.inside(path, file, f"manifest.json's {buckets.KEY}"),
                 None if name == "fp32" or "fp32" not in b.files else unpack.inside(path, b.files["fp32"], "fp32"))
                for b in found for name, file in b.files.items()]
    return [(onnx_io.model_path(path), None)]


def photo_inputs(metadata: dict, images: list[Path] | None) -> list[tuple[str, dict[str, np.ndarray]]]:
    """(name, {pixel_values}) per photo at the model's static size."""
    from vlm_vision_onnx.families import of_model
    from vlm_vision_onnx.runtime.images import load_rgb

    if images:
        loaded = [(p.name, load_rgb(p)) for p in images]
    else:
        try:
            import skimage.data
        except ImportError:
            raise UsageError("no --images given and scikit-image (its sample photos) is not installed: pip install "
                             "scikit-image, or pass --images FILE ...") from None
        loaded = [(name, getattr(skimage.data, name)()) for name in PHOTOS]
    feeds = of_model(metadata, "the model").static.feeds
    return [(name, feeds(np.asarray(rgb), metadata)) for name, rgb in loaded]


def check_model(model_file: Path, htp: Htp, images: list[Path] | None = None, reference: Path | None = None,
                context_dir: Path | None = None) -> dict:
    """One model through steps 1-3 of the module docstring: its record ({file, precision, floor, ok, ...}).

    One compile: the session that compiles the model for the HTP writes the EP context binary (a model the HTP
    refuses is refused there, before anything else); the photos then run on that binary loaded back, the
    artifact a device loads. (A 2B encoder at 448 x 448 takes minutes per compile and per photo on the simulator.)"""
    proto = onnx_io.read_proto(model_file)
    metadata = {p.key: p.value for p in proto.metadata_props}
    precision = precision_of(proto)
    del proto
    reference = Path(reference) if reference else reference_of(model_file)
    record = {"file": str(model_file), "reference": str(reference), "precision": precision,
              "floor": FLOORS[precision], "soc_model": htp.soc_model, "htp_arch": htp.htp_arch,
              "static_size": metadata.get("static_size")}
    with tempfile.TemporaryDirectory(prefix="vision-onnx-qnn-ctx-") as tmp:
        folder = Path(context_dir) if context_dir else Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        context = folder / f"{model_file.stem}_ctx.onnx"
        started = time.perf_counter()
        compiled = open_htp(model_file, htp, precision, context)
        record["context_compile_s"] = time.perf_counter() - started
        del compiled
        binaries = sorted(p for p in folder.glob("*.bin"))
        if not context.exists() or not binaries:
            raise CheckFailed(f"{model_file}: the QNN EP wrote no context model and binary into {folder}")
        record["context"] = {"model": context.name, "binaries": {p.name: p.stat().st_size for p in binaries}}
        started = time.perf_counter()
        sess = open_htp(context, htp, precision)
        record["context_load_s"] = time.perf_counter() - started
        cases = photo_inputs(metadata, images)  # after the compile: a dynamic export is refused by the HTP's line
        record["photos"] = [name for name, _ in cases]
        cpu = ort.InferenceSession(str(reference), providers=["CPUExecutionProvider"])
        names = [o.name for o in cpu.get_outputs()]
        worst, finite = 1.0, True
        started = time.perf_counter()
        for _, feeds in cases:
            got, want = sess.run(names, feeds), cpu.run(names, feeds)
            finite &= all(bool(np.isfinite(g).all()) for g in got)
            worst = min([worst] + [metrics.min_token_cosine(g, w) for g, w in zip(got, want)])
        record.update(finite=finite, min_token_cosine=worst, htp_run_s=time.perf_counter() - started)
        del sess
    problems = []
    if not finite:
        problems.append("non-finite outputs")
    if worst < record["floor"]:
        problems.append(f"min per-token cosine {worst:.5f} < floor {record['floor']}")
    record.update(ok=not problems, problems=problems)
    return record


def line(record: dict) -> str:
    """One line per model."""
    size = sum(record["context"]["binaries"].values()) / 2**20
    head = (f"{record['file']}: every node on the HTP (soc {record['soc_model']}, v{record['htp_arch']}, "
            f"{record['precision']}), {len(record['photos'])} photos at {record['static_size']}: min per-token cosine "
            f"{record['min_token_cosine']:.5f} vs CPU fp32 (floor {record['floor']}), "
            f"{'finite' if record['finite'] else 'NON-FINITE'}, run on the context binary ({size:.1f} MiB, compiled "
            f"in {record['context_compile_s']:.1f} s and loaded back in {record['context_load_s']:.1f} s; simulator "
            "times, not a device's)")
    return head + ("" if record["ok"] else f"; FAILED: {'; '.join(record['problems'])}")


def add_arguments(parser) -> None:
    parser.add_argument("model", type=Path, metavar="MODEL_OR_PACKAGE",
                        help="a static model.onnx, its stage folder, or a package with static buckets")
    Htp.add_arguments(parser)
    parser.add_argument("--images", type=Path, nargs="+", metavar="FILE",
                        help="photos to run (default: scikit-image's sample photos)")
    parser.add_argument("--reference", type=Path, metavar="FP32_MODEL",
                        help="the fp32 model to compare with (default: the model itself, or the input its report "
                             "names for a quantize qnn / fp16 variant)")
    parser.add_argument("--context-dir", type=Path, metavar="DIR",
                        help="keep the EP context model and binary in DIR (default: a temporary folder)")
    parser.add_argument("--json", type=Path, metavar="FILE", help="write the records to FILE")
    parser.add_argument("--force", action="store_true", help="replace an existing --json FILE npu-check wrote")


def _earlier_report(path: Path) -> bool:
    try:
        return "npu_check" in json.loads(path.read_text())
    except (OSError, ValueError, TypeError):
        return False


def run(args) -> int:
    """The `npu-check` subcommand."""
    htp = Htp.from_args(args)
    if args.json:  # refused before any work: never replaces a file this command did not write
        args.json = check_result_file(args.json, [args.model], args.force, ".json", _earlier_report)
    devices()
    records = []
    for model_file, reference in models_in(args.model):
        records.append(check_model(model_file, htp, args.images, args.reference or reference, args.context_dir))
        print(line(records[-1]), flush=True)
    if args.json:
        with staged_file(args.json) as tmp:
            tmp.write_text(json.dumps({"npu_check": records}, indent=1) + "\n")
    failed = [r["file"] for r in records if not r["ok"]]
    if failed:
        raise CheckFailed(f"on the HTP, {', '.join(failed)} failed (see the lines above)")
    return 0
