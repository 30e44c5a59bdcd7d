"""bench/machine.py: the machine line the embedder's benches print beside their figures."""

from __future__ import annotations

import os

from tests.helpers import bench_module

machine = bench_module("machine", "bench_machine")


def _cpuinfo(flags: str, model: str = "AMD EPYC") -> str:
    return (f"processor\t: 0\nmodel name\t: {model}\nflags\t\t: fpu {flags} sse2\n\n"
            f"processor\t: 1\nmodel name\t: {model}\nflags\t\t: fpu {flags} sse2\n")


def test_it_names_the_best_int8_extension_the_cpu_has() -> None:
    n = os.cpu_count()
    assert machine.describe(_cpuinfo("avx2 avx512bw avx512_vnni")) == \
        f"AMD EPYC, {n} CPUs, int8 kernels: avx512_vnni"
    assert machine.describe(_cpuinfo("avx2 avx_vnni", "Intel Core")) == \
        f"Intel Core, {n} CPUs, int8 kernels: avx_vnni"
    assert machine.describe(_cpuinfo("avx2")).endswith("int8 kernels: avx2")


def test_an_unreadable_or_strange_cpuinfo_still_gives_a_line() -> None:
    assert machine.describe("") == \
        f"unknown CPU, {os.cpu_count()} CPUs, int8 kernels: none of " \
        "avx512_vnni/avx_vnni/avx512bw/avx2"
    assert "unknown CPU" in machine.describe("\0\udcff: x\nflags")
    assert machine.describe(None).count(",") >= 2  # this machine's own /proc/cpuinfo

