"""What CPU this is, as far as the speed and exactness of ONNX Runtime's int8 kernels depend on it.

ONNX Runtime's u8 x s8 matrix product (`MatMulInteger` / `DynamicQuantizeMatMul`, what `quantize_dynamic`
emits) runs on x86 with one of three instruction families:
- AMX (`amx_int8`) or VNNI (`avx512_vnni`, `avx_vnni`): u8 x s8 products summed straight into int32: exact;
- otherwise (AVX2, AVX-512 without VNNI) `vpmaddubsw`, which adds each pair of adjacent u8 x s8 products in
  a signed 16-bit lane that saturates at 32767: with full-range int8 weights (|w| up to 127) and uint8
  activations (up to 255) a pair can reach 64770, and the product is silently wrong. Measured on the tiny
  encoder (`python -m bench.int8_cpus`: `quantize int8 --method dynamic --full-range`, min per-token cosine
  against fp32): 0.99969 on an AMD EPYC with VNNI, 0.99619 on the same model and inputs under
  `qemu-x86_64 -cpu Haswell` (AVX2 only). Weights in 7 bits (`--reduce-range`, the default) cannot
  saturate: 0.99936 on both.
"""

from __future__ import annotations

import platform
from functools import cache
from pathlib import Path

#: Model metadata (metadata_props) that says what its int8 kernels need to compute what was measured;
#: `core.session.open_session` warns when this CPU does not have it.
METADATA_KEY = "vision_onnx.int8_kernel_needs"
NEEDS_EXACT_INT8 = "vnni-or-amx-on-x86"
#: /proc/cpuinfo flags of an exact int8 dot product (no 16-bit intermediate).
EXACT_INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")


@cache
def _cpuinfo() -> tuple[str, frozenset[str]]:
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor() or platform.machine(), frozenset()
    name = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                platform.processor() or platform.machine())
    flags = next((line.split(":", 1)[1].split() for line in lines if line.startswith("flags")), [])
    return name, frozenset(flags)


def name() -> str:
    """The CPU's model name ('AMD EPYC', 'Intel(R) Xeon(R) Processor', ...)."""
    return _cpuinfo()[0]


def has(flag: str) -> bool:
    """Whether /proc/cpuinfo lists `flag` (False where there is no /proc/cpuinfo)."""
    return flag in _cpuinfo()[1]


def int8_saturates() -> bool:
    """True on an x86 CPU whose u8 x s8 kernels go through saturating 16-bit pair sums (no VNNI, no AMX).

    False elsewhere, including non-x86 CPUs (their kernels widen before adding)."""
    if platform.machine().lower() not in ("x86_64", "amd64", "i686", "x86"):
        return False
    return not any(has(flag) for flag in EXACT_INT8_FLAGS)


def facts() -> dict:
    """{cpu, x86 int8 instruction flags present, int8_saturates}: for a stage's report."""
    return {"cpu": name(), "int8_flags": [f for f in EXACT_INT8_FLAGS if has(f)],
            "int8_saturates": int8_saturates()}
