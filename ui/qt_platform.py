"""Before the first window on Linux: can Qt's X11 platform plugin load here?

Qt's own answer to a missing library is "could not load the Qt platform plugin xcb" and an
abort, with no word on what to install. The plugin's shared-library dependencies are listed
with `ldd` (glibc's, on every Linux desktop) and the missing ones are named with the
Debian/Ubuntu packages that ship them.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

_NOT_FOUND = re.compile(r"^\s*(\S+)\s+=>\s+not found", re.MULTILINE)


def xcb_plugin() -> Path | None:
    """The xcb platform plugin of the installed PySide6 (None where there is none)."""
    try:
        import PySide6
    except ImportError:
        return None
    plugin = Path(PySide6.__file__).parent / "Qt" / "plugins" / "platforms" / "libqxcb.so"
    return plugin if plugin.is_file() else None


def wants_xcb() -> bool:
    """Whether Qt will pick the X11 plugin: Linux, a display, and no other platform asked for."""
    if not sys.platform.startswith("linux") or not os.environ.get("DISPLAY"):
        return False
    chosen = os.environ.get("QT_QPA_PLATFORM", "").split(":")[0]
    if chosen:
        return chosen == "xcb"
    return not os.environ.get("WAYLAND_DISPLAY")


def missing_libraries(library: Path) -> list[str]:
    """Shared libraries `library` needs (directly or not) that the loader cannot find."""
    try:
        out = subprocess.run(["ldd", str(library)], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return []  # no ldd: let Qt try and speak for itself
    return sorted(set(_NOT_FOUND.findall(out.stdout)))


def debian_package(soname: str) -> str:
    """Debian's package for a library soname: libxcb-icccm.so.4 -> libxcb-icccm4,
    libxkbcommon-x11.so.0 -> libxkbcommon-x11-0 (a dash when the name ends in a digit)."""
    name, _, version = soname.partition(".so.")
    name = name.lower()
    major = version.split(".")[0]
    if not major:
        return name
    return f"{name}-{major}" if name[-1].isdigit() else f"{name}{major}"


def platform_problem(plugin: Path | None = None) -> str | None:
    """A message naming the packages to install, or None when the plugin can load."""
    plugin = plugin or xcb_plugin()
    if plugin is None:
        return None
    missing = missing_libraries(plugin)
    if not missing:
        return None
    packages = " ".join(dict.fromkeys(debian_package(m) for m in missing))
    return (f"draftlens: the window cannot open: Qt's X11 platform plugin needs "
            f"{', '.join(missing)}, which this system lacks — install them "
            f"(Debian/Ubuntu: sudo apt-get install {packages}), then start DraftLens again")
