import os
import subprocess
import sys
from pathlib import Path

import pytest

from app.allocator import HUGE_PAGES_TUNABLE, huge_pages_env, keep_large_blocks


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_large_blocks_are_kept_on_linux():
    assert keep_large_blocks() is True


def test_the_launcher_keeps_large_blocks(monkeypatch):
    import ui.launcher

    calls = []
    monkeypatch.setattr(ui.launcher, "keep_large_blocks", lambda: calls.append(1))
    monkeypatch.setattr(ui.launcher, "cli_main", lambda argv: 0)
    monkeypatch.setattr(ui.launcher, "wants_window", lambda argv: False)
    assert ui.launcher.main(["models", "list"]) == 0 and calls == [1]


def _thp_available() -> bool:
    try:
        return "[never]" not in Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text()
    except OSError:
        return False


def test_huge_pages_are_asked_for_where_the_kernel_gives_them(monkeypatch, tmp_path):
    import app.allocator as allocator

    setting = tmp_path / "enabled"
    monkeypatch.setattr(allocator, "_THP_SETTING", setting)
    setting.write_text("always [madvise] never\n")
    assert huge_pages_env({}) == {"GLIBC_TUNABLES": HUGE_PAGES_TUNABLE}
    # the user's own tunables are kept; their own choice of huge pages stands
    assert huge_pages_env({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}) == {
        "GLIBC_TUNABLES": f"glibc.malloc.arena_max=2:{HUGE_PAGES_TUNABLE}"}
    assert huge_pages_env({"GLIBC_TUNABLES": "glibc.malloc.hugetlb=0"}) == {}
    setting.write_text("always madvise [never]\n")
    assert huge_pages_env({}) == {}
    setting.unlink()  # no transparent huge pages (or not Linux)
    assert huge_pages_env({}) == {}


MAP_AND_COUNT = """
import ctypes, re
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
size = 64 << 20
block = libc.malloc(size)
ctypes.memset(block, 1, size)
print(re.search(r"AnonHugePages:\\s+(\\d+)", open("/proc/self/smaps_rollup").read()).group(1))
"""


@pytest.mark.skipif(not _thp_available(), reason="no transparent huge pages on this system")
def test_a_process_started_so_maps_its_large_blocks_on_huge_pages():
    """What the tunable does on this kernel: a 64 MiB block (as llama.cpp's weight buffers are
    allocated) lands on huge pages in a process started with it, and on none without."""
    def huge_kib(extra: dict[str, str]) -> int:
        env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES"}
        out = subprocess.run([sys.executable, "-c", MAP_AND_COUNT], env={**env, **extra},
                             capture_output=True, text=True, check=True).stdout
        return int(out.split()[-1])

    assert huge_kib(huge_pages_env({})) >= 32 << 10
    assert huge_kib({}) == 0


@pytest.mark.skipif(not _thp_available(), reason="no transparent huge pages on this system")
def test_the_engine_process_starts_with_huge_pages():
    from app.host.client import EngineHost

    host = EngineHost()
    host.start()
    try:
        pid = host._proc.pid
        environ = dict(entry.split("=", 1) for entry in Path(f"/proc/{pid}/environ")
                       .read_text().split("\0") if "=" in entry)
        assert HUGE_PAGES_TUNABLE in environ.get("GLIBC_TUNABLES", "").split(":")
    finally:
        host.close()
