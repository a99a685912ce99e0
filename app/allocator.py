"""Process-wide allocator settings for the decoding loop: large blocks kept in the heap
(keep_large_blocks), and transparent huge pages for what glibc maps (huge_pages_env, given to
an engine process as it starts).

glibc hands every freed block over its mmap threshold (128 KiB at first) straight back to the
system, so each new vocabulary-sized row (a 152k-token softmax is 1.2 MB) comes back as fresh
pages that fault in on first touch. Verifying a 64-token draft builds a few hundred such rows,
and the faults were half of the time spent judging them (100 ms of 64 rows against 45 ms
with the blocks kept). Keeping large blocks in the heap costs at most the trim threshold in
resident memory, small beside the model weights.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
from collections.abc import Mapping
from pathlib import Path

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_MMAP_THRESHOLD_BYTES = 64 << 20
_TRIM_THRESHOLD_BYTES = 128 << 20


def keep_large_blocks() -> bool:
    """Raise glibc's mmap and trim thresholds; True where that took effect (Linux with glibc;
    elsewhere the system allocator is left as it is)."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # musl and other libcs have no mallopt
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, _MMAP_THRESHOLD_BYTES)
                and mallopt(_M_TRIM_THRESHOLD, _TRIM_THRESHOLD_BYTES))


# glibc's malloc asks the kernel for transparent huge pages (madvise) for the memory it maps:
# the weights read into memory, llama.cpp's repacked copy of them, the KV cache. On the Xeon a
# plain step of the demo target read 1.2 GB of weights through 4 KiB pages, and its speed
# moved 15.3-17.8 tok/s with where the process's small buffers happened to lie (a second
# copy of the model in the same process ran 16% faster than the first); on huge pages it ran
# at 18.7 (docs/benchmarks.md, "Plain decoding against llama-bench"). glibc reads its tunables
# once, as a process starts, so the engine's processes are started with it.
HUGE_PAGES_TUNABLE = "glibc.malloc.hugetlb=1"
_THP_SETTING = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def huge_pages_env(environ: Mapping[str, str]) -> dict[str, str]:
    """GLIBC_TUNABLES for a process that decodes with llama.cpp: the user's own tunables with
    the huge-pages one added, where the kernel gives transparent huge pages on request (Linux
    with THP in "madvise" or "always" mode); {} elsewhere, or where the user set
    glibc.malloc.hugetlb themselves."""
    try:
        setting = _THP_SETTING.read_text()
    except OSError:  # not Linux, or no transparent huge pages
        return {}
    if "[never]" in setting:
        return {}
    own = environ.get("GLIBC_TUNABLES", "")
    if "glibc.malloc.hugetlb" in own:
        return {}
    return {"GLIBC_TUNABLES": f"{own}:{HUGE_PAGES_TUNABLE}" if own else HUGE_PAGES_TUNABLE}
