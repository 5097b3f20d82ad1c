"""What machine a benchmark ran on (Linux /proc), for its results file."""

import os
import platform
from pathlib import Path


def machine() -> dict:
    """{cpu, cores, avx512, amx, memory_gib, platform} of this machine."""
    info = Path("/proc/cpuinfo").read_text().splitlines()
    cpu = next((line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
               platform.processor())
    flags = next((line for line in info if line.startswith("flags")), "")
    mem = next(line for line in Path("/proc/meminfo").read_text().splitlines() if line.startswith("MemTotal"))
    return {"cpu": cpu, "cores": os.cpu_count(), "avx512": "avx512f" in flags, "amx": "amx_tile" in flags,
            "memory_gib": round(int(mem.split()[1]) / 2**20, 1), "platform": platform.platform()}


def describe(facts: dict) -> str:
    """One line: 'CPU, N cores, M GiB RAM'."""
    return f"{facts['cpu']}, {facts['cores']} cores, {facts['memory_gib']:.0f} GiB RAM"
