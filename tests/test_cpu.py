"""core.cpu: which CPUs run ONNX Runtime's u8 x s8 kernels through saturating 16-bit pair sums."""

import pytest

from vlm_vision_onnx.core import cpu


@pytest.mark.parametrize("machine, flags, saturates", [
    ("x86_64", {"avx2", "fma"}, True),  # Haswell .. Skylake client: vpmaddubsw
    ("x86_64", {"avx2", "avx512f", "avx512bw"}, True),  # Skylake-SP: AVX-512 without VNNI
    ("x86_64", {"avx2", "avx512f", "avx512_vnni"}, False),  # Cascade Lake, AMD Zen 4/5
    ("x86_64", {"avx2", "avx_vnni"}, False),  # Alder Lake
    ("x86_64", {"avx512f", "avx512_vnni", "amx_int8", "amx_tile"}, False),  # Sapphire Rapids
    ("aarch64", set(), False),  # ARM kernels widen before adding
])
def test_int8_saturates(monkeypatch, machine, flags, saturates):
    monkeypatch.setattr(cpu, "_cpuinfo", lambda: ("some CPU", frozenset(flags)))
    monkeypatch.setattr(cpu.platform, "machine", lambda: machine)
    assert cpu.int8_saturates() is saturates
    facts = cpu.facts()
    assert facts["cpu"] == "some CPU" and facts["int8_saturates"] is saturates
    assert set(facts["int8_flags"]) == flags & set(cpu.EXACT_INT8_FLAGS)


def test_reads_this_machine():
    assert cpu.name() and isinstance(cpu.int8_saturates(), bool)
