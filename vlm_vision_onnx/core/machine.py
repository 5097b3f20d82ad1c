"""What machine a run was measured on (Linux /proc): for benchmark results and the speed report of `release`."""

import os
import platform
from pathlib import Path

from vlm_vision_onnx.core import cpu


def machine() -> dict:
    """{cpu, cores, avx512, amx, vnni (an exact int8 dot product, `core.cpu`), memory_gib, platform} of this machine."""
    mem = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
    return {"cpu": cpu.name(), "cores": os.cpu_count(), "avx512": cpu.has("avx512f"), "amx": cpu.has("amx_tile"),
            "vnni": any(cpu.has(f) for f in cpu.EXACT_INT8_FLAGS), "memory_gib": round(int(mem.split()[1]) / 2**20, 1),
            "platform": platform.platform()}


def describe(facts: dict) -> str:
    """One line: 'CPU, N cores, M GiB RAM'."""
    return f"{facts['cpu']}, {facts['cores']} cores, {facts['memory_gib']:.0f} GiB RAM"
