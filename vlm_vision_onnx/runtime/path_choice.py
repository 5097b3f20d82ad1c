"""`--engine auto` (the default of `embed` and `embed-collection`): which (engine, variant, precision) runs a
package on this machine — the fastest path that meets FLOOR at every validation layout, torch-free.

The rule, in order:
1. Explicit options win: `--engine onnxruntime|openvino` runs the variant given (`--variant`, default fp32) on that
   engine; `--precision` alone implies OpenVINO; `--variant` alone picks the fastest engine for that variant.
2. Otherwise the CPU's class (`cpu_class`: from /proc/cpuinfo flags) names an order of paths, fastest first
   (`RANKING`); the first path is taken whose engine is installed, whose variant the package ships, and whose
   accuracy meets FLOOR: a quantized variant's min per-token cosine against fp32 over every validation layout
   and over held-out real photos, as its stage measured them (`manifest.json`, `accuracy_vs_fp32.min_token_cosine`
   and `accuracy_vs_fp32.photos.min_token_cosine`, quantize/photo_check.py; a variant without the photo figure,
   packaged before the stages measured it, is not taken automatically); OpenVINO's bf16 on the fp32 file
   is held to the same floor by `runtime verify` (core.engine.BF16_FLOOR). A full-range INT8 file is skipped on a
   CPU whose int8 kernels saturate (`core.cpu.int8_saturates`). A quantized variant runs only on images no larger
   than its gates measured (`accuracy_vs_fp32.largest_image_pixels`, `measured_pixels`: the largest image or
   frame of its validation layouts and photos, 1024^2 for the Qwen exports): its error grows with the image
   (Qwen3-VL-2B's ov-int8 meets FLOOR on photos up to 1024^2 and gives 0.99780 at 2048^2,
   bench/results/cpu-race-avx512-bf16-2048.md), while bf16 on the fp32 file stays far above it there (0.99907).
   OpenVINO bf16 on the fp32 file has no size bound: on the AMX Xeon it gave 0.99795 at 2048^2, 5e-5 under FLOOR
   on one photo, where every path above the floor is 1.4-2.1x slower; kept by decision, the miss reported in
   docs/benchmarks.md (bench/results/cpu-race-amx-2048-rest.md).
   `Largest` is the largest image of the call as the model sees it (`runtime embed`: the largest photo or frame
   given, or the processor's max_pixels when that is smaller, since the processor downsizes to it;
   `embed-collection`: the same bound over what `--max-image-pixels` lets through, since one variant embeds the
   whole collection: cap it at the variant's size to keep the variant).
3. A call known in full (`runtime embed`: `Largest.images`, every image's and frame's pixels) where OpenVINO does
   not pay off puts the ranking's ONNX Runtime paths first (`openvino_pays_off`): OpenVINO compiles its model in
   every process (no compile cache: core.openvino_session), seconds that its faster inference wins back only on
   enough pixels. `embed-collection` keeps the ranking (a collection amortizes it).
4. fp32 on ONNX Runtime is the last path, always there.

The order per CPU class is what `python -m bench.cpu_race` measured (bench/results/cpu-race.md, and the CPUs named
beside each entry of RANKING); docs/runtimes.md states it per CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

from vlm_vision_onnx.core import cpu, openvino_session
from vlm_vision_onnx.core.engine import BF16_FLOOR, Engine
from vlm_vision_onnx.families import Family

#: The accuracy every automatic path keeps: min per-token cosine against fp32 at every validation layout.
FLOOR = BF16_FLOOR
AMX, AVX512_BF16, VNNI, AVX2 = "amx", "avx512-bf16", "vnni", "avx2"


@dataclass(frozen=True)
class Path:
    """One way to run a package: engine (onnxruntime | openvino), variant (fp32, int8, ov-int8, ...), precision
    (OpenVINO's f32 | bf16; None for ONNX Runtime)."""
    engine: str
    variant: str
    precision: str | None = None

    def describe(self) -> str:
        return f"{self.engine}{' ' + self.precision if self.precision else ''}, variant {self.variant}"


#: Fastest first, per CPU class. Measured at Qwen3-VL-2B dims, 2 threads, 448^2 and 1024^2:
#: - amx (Intel Xeon with AMX-BF16/INT8, bench/results/cpu-race-amx.md): OpenVINO's INT8 (the ov-int8 variant, its
#:   FullyConnected layers on AMX-INT8) 0.81 s / 6.60 s / 0.99 s (448^2, 1024^2, 8 frames of 448^2) at 0.99803-0.99812
#:   against PyTorch fp32, then OpenVINO bf16 on the fp32 file 0.72 / 8.48 / 1.45 s (0.9996), then ONNX Runtime INT8
#:   0.98 / 10.7 / 1.59 s; as processes on 4 photos ov-int8 8.6 s / 36.8 s, OpenVINO bf16 11.5 / 40.1 s, ORT INT8
#:   9.8 / 60.2 s; at 448^2 in-process the two OpenVINO paths swapped between runs (ov-int8 0.84 s against
#:   OpenVINO bf16 1.29 s in bench/results/cpu-race-amx-default.md, 3 rounds, where ov-int8 is 1.57x / 1.56x
#:   PyTorch bf16 as processes);
#: - avx512-bf16 without AMX (AMD EPYC Zen 4, bench/results/cpu-race-avx512-bf16.md): OpenVINO's INT8 (the ov-int8
#:   variant: integer linear layers, bf16 attention; above FLOOR on photos since its output heads stay float)
#:   1.33 s / 10.8 s / 1.85 s first, then ONNX Runtime INT8 1.50 / 14.8 / 1.93 s,
#:   then OpenVINO bf16 on the fp32 file 1.90 / 13.2 / 2.87 s at 5x the memory; Zen 5
#:   (docs/runtime-openvino.md): ORT INT8 2.40-2.45x ORT fp32, OpenVINO bf16 1.74-1.85x;
#: - vnni (AMD EPYC with AVX-512 VNNI, docs/quantization.md): ONNX Runtime INT8 2.67-2.81x fp32;
#: - avx2 (AMD EPYC Zen 3, AVX2 only: bench/results/cpu-race.md): ONNX Runtime INT8 first.
RANKING: dict[str, tuple[Path, ...]] = {
    AMX: (Path("openvino", "ov-int8", "bf16"), Path("openvino", "fp32", "bf16"), Path("onnxruntime", "int8"),
          Path("openvino", "fp32", "f32")),
    AVX512_BF16: (Path("openvino", "ov-int8", "bf16"), Path("onnxruntime", "int8"), Path("openvino", "fp32", "bf16")),
    VNNI: (Path("onnxruntime", "int8"),),
    AVX2: (Path("onnxruntime", "int8"),),
}
LAST = Path("onnxruntime", "fp32")


def cpu_class() -> str:
    """amx | avx512-bf16 | vnni | avx2 (also every non-x86 CPU: the ranking without bf16 or exact int8)."""
    if cpu.has("amx_bf16"):
        return AMX
    if cpu.has("avx512_bf16"):
        return AVX512_BF16
    if not cpu.int8_saturates() and any(cpu.has(f) for f in cpu.EXACT_INT8_FLAGS):
        return VNNI
    return AVX2


@dataclass(frozen=True)
class Choice:
    """The path that runs, and one line saying why."""
    path: Path
    why: str

    @property
    def engine(self) -> Engine:
        """The engine that runs the path."""
        return Engine(self.path.engine, self.path.precision)

    @property
    def variant(self) -> str:
        return self.path.variant

    def line(self) -> str:
        return f"path: {self.path.describe()} ({self.why})"


def measured_pixels(fam: Family, metadata: dict, validation: dict) -> int | None:
    """The largest image (pixels, as the model sees it) of a quantized stage's checks: its validation cases'
    layouts (`Family.layout_pixels`) and its held-out photos (`validation.photos.sizes`, height x width); None
    when the report records neither."""
    found = [fam.layout_pixels(case, metadata) for case in validation.get("cases", [])
             if isinstance(case, dict) and all(k in case for k in fam.layout_keys)]
    found += [int(h) * int(w) for h, w in (validation.get("photos") or {}).get("sizes", [])]
    return max(found) if found else None


def _record(manifest: dict, variant: str) -> dict:
    """The manifest's record of `variant` ({} when it has none)."""
    for record in manifest.get("variants", []):
        if isinstance(record, dict) and record.get("name") == variant:
            return record
    return {}


def variant_accuracy(manifest: dict, variant: str) -> float | None:
    """The variant's min per-token cosine against fp32, the lower of its validation layouts' and its held-out
    photos' (1.0 for fp32; None when the manifest does not record both)."""
    if variant == "fp32":
        return 1.0
    accuracy = _record(manifest, variant).get("accuracy_vs_fp32") or {}
    values = [accuracy.get("min_token_cosine"), (accuracy.get("photos") or {}).get("min_token_cosine")]
    if not all(isinstance(v, (int, float)) for v in values):
        return None
    return float(min(values))


def _saturates(manifest: dict, variant: str) -> bool:
    """A full-range (8-bit weight) dynamic INT8 file on a CPU whose int8 kernels saturate (core.cpu)."""
    settings = _record(manifest, variant).get("quantization") or {}
    return settings.get("method") == "dynamic" and settings.get("reduce_range") is False and cpu.int8_saturates()


def largest_image_pixels(manifest: dict, variant: str) -> int | None:
    """The largest image a quantized variant's gates measured (`measured_pixels`, as packaged); None for fp32 and
    for a package made before the figure was recorded."""
    measured = (_record(manifest, variant).get("accuracy_vs_fp32") or {}).get("largest_image_pixels")
    return measured if isinstance(measured, int) and variant != "fp32" else None


@dataclass(frozen=True)
class Largest:
    """The largest image of a call as the model will see it: `pixels`, and `what` names it in the line; `images`:
    where the call is known in full (`runtime embed`), the pixels of each of its images and video frames as the
    model sees them (empty: not known, as for a collection)."""
    pixels: int
    what: str = "this call's largest image has"
    images: tuple[int, ...] = ()

    @classmethod
    def of(cls, images: tuple[int, ...]) -> Largest:
        """A call known in full: its images' and frames' pixels, the largest of them."""
        return cls(max(images), images=images)


#: Seconds a `runtime embed` process spends on OpenVINO before its first inference beyond what ONNX Runtime spends
#: (reading and compiling the model), per CPU class, Qwen3-VL-2B's ov-int8 IR, 2 threads.
#: amx: 3.6 s, the median of three runs of bench/results/cpu-race-amx-processes.md, 4 photos at 448^2: ov-int8
#: 12.53, 12.06 and 10.72 s against ORT INT8 9.65, 9.65 and 7.47 s, plus the 4 x 0.17 s ov-int8's inference saves:
#: 3.6, 3.1 and 3.9 s (the last with `runtime embed` opening its session while Python loads, which hides ONNX
#: Runtime's load more than OpenVINO's first run at a shape; the earlier files are in the git history);
#: avx512-bf16: 6.7 s (AMD EPYC Zen 4: 1.3 s more than ORT INT8 with the compiled model read back in 0.7 s,
#: bench/results/cpu-race-avx512-bf16-processes.md, plus its 6.1 s compile, core.openvino_session's earlier figure).
OPENVINO_SETUP_S = {AMX: 3.6, AVX512_BF16: 6.7}


def openvino_saving_s(pixels: int) -> float:
    """Seconds OpenVINO INT8 saves on one image of `pixels` against ONNX Runtime INT8 per inference: 0.131 s per
    megapixel + 3.59 s per megapixel squared (ONNX Runtime's attention is fp32 and grows with the square), fitted to
    Qwen3-VL-2B, 2 threads: 0.17 s at 448^2 and 4.1 s at 1024^2 on the AMX Xeon (bench/results/cpu-race-amx.md:
    0.81 / 6.60 s against 0.98 / 10.7 s), 0.17 s and 4.0 s on AMD EPYC Zen 4 (cpu-race-avx512-bf16.md)."""
    megapixels = pixels / 1e6
    return 0.131 * megapixels + 3.59 * megapixels * megapixels


def openvino_pays_off(kind: str, images: tuple[int, ...]) -> bool:
    """Whether OpenVINO's faster inference on a call's `images` (pixels each) wins back its setup on a `kind` CPU
    (True where the call or the class's setup is not known). E.g. on amx: 4 photos at 448^2 save 0.68 s < 3.6 s
    (ONNX Runtime INT8 first), one at 1024^2 4.09 s > 3.6 s (OpenVINO first)."""
    if not images or kind not in OPENVINO_SETUP_S:
        return True
    return sum(openvino_saving_s(p) for p in images) > OPENVINO_SETUP_S[kind]


def _too_large(manifest: dict, variant: str, largest: Largest | None) -> str | None:
    """Why a quantized `variant` may not run on the call's `largest` image (None: it may, or no size was given)."""
    if largest is None or variant == "fp32":
        return None
    measured = largest_image_pixels(manifest, variant)
    if measured is None:
        return f"{variant}: the image sizes its gates measured are not recorded (package it again)"
    if largest.pixels > measured:
        return f"{variant} measured on images up to {measured:,} pixels, {largest.what} {largest.pixels:,}"
    return None


def _under_floor(value: float) -> str:
    """`value` (< FLOOR) with five decimals, more where rounding would hide the miss (0.9979955: 0.997996, not
    0.99800)."""
    digits = next((d for d in range(5, 10) if float(f"{value:.{d}f}") < FLOOR), 10)
    return f"{value:.{digits}f}"


class OpenVINOHere:
    """Whether OpenVINO imports here and computes in bf16 on this CPU, each asked of OpenVINO only when a path
    needs it (None: ask): importing openvino costs 0.1-0.2 s of a `runtime embed` process, which a call that takes
    ONNX Runtime's path never spends."""

    def __init__(self, have_openvino: bool | None = None, have_bf16: bool | None = None):
        self._openvino, self._bf16 = have_openvino, have_bf16

    def openvino(self) -> bool:
        if self._openvino is None:
            self._openvino = openvino_session.available()
        return self._openvino

    def bf16(self) -> bool:
        if self._bf16 is None:
            self._bf16 = self.openvino() and openvino_session.bf16_supported()
        return self._bf16


def _refusal(manifest: dict, path: Path, here: OpenVINOHere, largest: Largest | None) -> str | None:
    """Why `path` cannot run here (None: it can)."""
    if path.engine == "openvino" and not here.openvino():
        return "openvino not installed"
    if path.precision == "bf16" and not here.bf16():
        return "no bf16 in OpenVINO on this CPU"
    names = {r.get("name") for r in manifest.get("variants", []) if isinstance(r, dict)}
    if path.variant not in names:
        return f"no {path.variant} variant in the package"
    accuracy = variant_accuracy(manifest, path.variant)
    if accuracy is None or accuracy < FLOOR:
        shown = "on photos not recorded (package it again)" if accuracy is None else _under_floor(accuracy)
        return f"{path.variant} min per-token cosine {shown} < {FLOOR}"
    if _saturates(manifest, path.variant):
        return f"{path.variant} is full-range INT8 and this CPU's int8 kernels saturate"
    return _too_large(manifest, path.variant, largest)


def choose(manifest: dict, engine: str = "auto", variant: str | None = None, precision: str | None = None,
           cpu_kind: str | None = None, have_openvino: bool | None = None,
           have_bf16: bool | None = None, largest: Largest | None = None) -> Choice:
    """The path for a package (see the module docstring). `cpu_kind`, `have_openvino`, `have_bf16`: this machine's
    unless given (tests give them; OpenVINO is asked only when a path needs it, `OpenVINOHere`). `largest`: the
    call's largest image (None: no bound by size)."""
    if engine != "auto":
        chosen = Path(engine, variant or "fp32", precision)
        Engine(chosen.engine, chosen.precision)  # UsageError for a precision the engine does not take
        return Choice(chosen, f"--engine {engine}")
    if precision is not None:
        return Choice(Path("openvino", variant or "fp32", precision), f"--precision {precision}")
    kind = cpu_kind or cpu_class()
    here = OpenVINOHere(have_openvino, have_bf16)
    skipped = []
    ranking, small = RANKING.get(kind, ()), largest is not None and not openvino_pays_off(kind, largest.images)
    if small:  # ONNX Runtime's paths first, each group in its order
        ranking = tuple(sorted(ranking, key=lambda p: p.engine != "onnxruntime"))
    for path in ranking:
        if variant is not None and path.variant != variant:
            continue
        reason = _refusal(manifest, path, here, largest)
        if reason is None:
            why = f"auto: fastest on a {kind} CPU meeting {FLOOR}"
            if small and path.engine == "onnxruntime":
                why += (f" for {len(largest.images)} image(s) of {sum(largest.images):,} pixels, too few for "
                        f"OpenVINO's compile (~{OPENVINO_SETUP_S[kind]:.1f} s) to pay off")
            return Choice(path, why + (f"; skipped {'; '.join(skipped)}" if skipped else ""))
        skipped.append(f"{path.describe()}: {reason}")
    last = LAST if variant is None else Path(_engine_for(manifest, variant), variant)
    return Choice(last, f"auto on a {kind} CPU" + (f"; skipped {'; '.join(skipped)}" if skipped else ""))


def _engine_for(manifest: dict, variant: str) -> str:
    """The engine of a variant no ranked path names: OpenVINO for an OpenVINO IR file (.xml), else ONNX Runtime."""
    # an unknown variant ({} record): the embed command names the package's variants
    return "openvino" if str(_record(manifest, variant).get("file", "")).endswith(".xml") else "onnxruntime"


def add_arguments(parser) -> None:
    """--variant (default: chosen with the engine)."""
    parser.add_argument("--variant", default=None,
                        help="fp32 or a quantized variant (int8, q4, ov-int8, ...); default: the one --engine auto "
                             "picks (fp32 with an explicit --engine)")


def per_cpu(manifest: dict, largest: Largest | None = None) -> dict[str, Choice]:
    """{CPU class: the path `--engine auto` takes for this package there for a call whose largest image is
    `largest` (None: any size the chosen variant measured)}, with OpenVINO installed (as `.[runtime]` installs it)
    and bf16 where the class has it: what a model card states, the same on any machine."""
    return {kind: choose(manifest, cpu_kind=kind, have_openvino=True, have_bf16=kind in (AMX, AVX512_BF16),
                         largest=largest) for kind in RANKING}


def describe_per_cpu(manifest: dict) -> str:
    """Per CPU class, the path `--engine auto` takes, and where that is a quantized variant, up to which image size
    and what runs above it: the model card's sentence."""
    parts = []
    for kind, choice in per_cpu(manifest).items():
        text = f"{kind}: {choice.path.describe()}"
        bound = largest_image_pixels(manifest, choice.variant)
        if bound is not None:
            above = per_cpu(manifest, Largest(bound + 1))[kind]
            text += f" on images up to {bound:,} pixels ({above.path.describe()} on larger ones)"
        parts.append(text)
    return "; ".join(parts)
