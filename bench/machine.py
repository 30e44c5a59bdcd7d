"""One line naming the machine a bench ran on: its figures only compare within one.

The int8 kernels onnxruntime picks depend on the CPU's vector extensions (AVX-512 VNNI,
AVX-VNNI, or plain AVX2), and on 2026-12-07 the same bench gave the hybrid search 1.04–1.17×
bridge-db's p50 on one machine and 0.76–0.86× on another with AVX2 alone (docs/search.md;
the first one's flags were not recorded), so each bench that times the embedder prints this
beside its load average.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The flags that decide onnxruntime's int8 kernels, best first.
INT8_FLAGS = ("avx512_vnni", "avx_vnni", "avx512bw", "avx2")


def describe(cpuinfo: str | None = None) -> str:
    """'<model>, <n> CPUs, int8 kernels: <best flag>' from /proc/cpuinfo (or `cpuinfo`)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text(errors="replace")
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    flags = set(fields.get("flags", "").split())
    best = next((f for f in INT8_FLAGS if f in flags), "none of " + "/".join(INT8_FLAGS))
    return f"{fields.get('model name', 'unknown CPU')}, {os.cpu_count()} CPUs, int8 kernels: {best}"
