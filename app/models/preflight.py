"""Load a model once in a child process, so a native crash in llama.cpp cannot take us down.

Call `check_gguf` first (cheap, in process); then `preflight_gguf`, which starts
`python -m backends.llamacpp_preflight PATH` (load, tokenize a sample, one decode) and turns
the child's death (a signal, an error exit, a timeout) into a one-line ModelFileError. A
packaged (frozen) app runs `draftlens --preflight-child PATH` instead. Files that passed are
remembered in cache_dir()/preflight.json, keyed by absolute path, size, mtime and the
llama-cpp-python version, so checking them again is instant.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from app.errors import DraftLensError, ModelFileError
from app.paths import read_cache, write_cache

CACHE_NAME = "preflight.json"
CACHE_VERSION = 1
MAX_CACHE_ENTRIES = 500
_PROJECT_ROOT = Path(__file__).resolve().parents[2]
_EXIT_NO_RUNTIME = 3  # backends.llamacpp_preflight: llama-cpp-python is missing
_lock = threading.Lock()

_DOING = {
    "import": "starting llama.cpp for",
    "load": "loading",
    "tokenize": "tokenizing with",
    "decode": "running",
    "done": "closing",
}


@dataclass(frozen=True)
class ChildResult:
    """What the preflight child left behind."""

    returncode: int
    stage: str | None
    stderr_lines: list[str]


def preflight_gguf(path: str | os.PathLike[str], timeout_s: float = 120) -> None:
    """Load, tokenize and decode once in a child process; raise ModelFileError if that fails."""
    path = Path(path).absolute()
    try:
        st = path.stat()
    except FileNotFoundError:
        raise ModelFileError(f"model file not found: {path} — check the path") from None
    key = _cache_key(path, st.st_size, st.st_mtime_ns)
    with _lock:
        if key in _load_cache():
            return
    result = _run_child(path, timeout_s)
    if result.returncode != 0:
        raise _error_for(path, result)
    with _lock:
        entries = _load_cache()
        entries[key] = {
            "path": str(path),
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "checked_at": time.time(),
        }
        try:
            _save_cache(entries)
        except OSError:
            pass  # the file passed; not remembering it only costs a re-check later


def is_preflighted(path: str | os.PathLike[str]) -> bool:
    """Whether this exact file (same size and mtime) already passed a preflight."""
    path = Path(path).absolute()
    try:
        st = path.stat()
    except OSError:
        return False
    with _lock:
        return _cache_key(path, st.st_size, st.st_mtime_ns) in _load_cache()


def _run_child(path: Path, timeout_s: float) -> ChildResult:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_PROJECT_ROOT), env.get("PYTHONPATH", "")) if p
    )
    try:
        proc = subprocess.run(
            _child_command(path),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=timeout_s,
            env=env,
            cwd=str(_PROJECT_ROOT),
        )
    except subprocess.TimeoutExpired:
        raise ModelFileError(
            f"llama.cpp took more than {timeout_s:g} s to load and run {path.name}"
            " — the file may be too large for this machine; try a smaller one"
        ) from None
    stdout = proc.stdout.decode("utf-8", errors="replace").splitlines()
    stages = [line[len("stage: ") :].strip() for line in stdout if line.startswith("stage: ")]
    stderr = [
        " ".join(line.split())
        for line in proc.stderr.decode("utf-8", errors="replace").splitlines()
        if line.strip()
    ]
    return ChildResult(proc.returncode, stages[-1] if stages else None, stderr)


def _child_command(path: Path) -> list[str]:
    """`python -m backends.llamacpp_preflight PATH`; a packaged (frozen) app has no `-m`, so it runs
    its own executable with the hidden first argument `--preflight-child` (see app.cli.main,
    reached through ui.launcher)."""
    if getattr(sys, "frozen", False):
        return [sys.executable, "--preflight-child", str(path)]
    return [sys.executable, "-m", "backends.llamacpp_preflight", str(path)]


def _error_for(path: Path, result: ChildResult) -> DraftLensError:
    doing = _DOING.get(result.stage or "", "loading/tokenizing")
    own = [ln[len("preflight-error: ") :] for ln in result.stderr_lines
           if ln.startswith("preflight-error: ")]  # fmt: skip
    if result.returncode == _EXIT_NO_RUNTIME:
        detail = own[-1] if own else "llama_cpp cannot be imported"
        return DraftLensError(
            f"llama-cpp-python is not usable ({_clip(detail)}) — install it with packaging/setup.sh"
        )
    if result.returncode == -getattr(signal, "SIGKILL", 9):
        return ModelFileError(
            f"the process {doing} {path.name} was killed (SIGKILL), probably for lack of memory"
            " — close other programs or try a smaller file"
        )
    if result.returncode < 0 or not own:
        last = result.stderr_lines[-1] if result.stderr_lines else ""
        how = _signal_name(result.returncode)
        return ModelFileError(
            f"llama.cpp crashed while {doing} {path.name} ({how}"
            f"{': ' + _clip(last) if last else ''}): the file's vocabulary or tensors are"
            " malformed — try another file"
        )
    llama_errors = [ln for ln in result.stderr_lines if "error" in ln.lower() and ln not in own
                    and not ln.startswith("preflight-error")]  # fmt: skip
    detail = llama_errors[-1] if llama_errors else own[-1]
    return ModelFileError(
        f"llama.cpp could not use {path.name} ({_clip(detail)}) — the file is damaged or made"
        " for a newer llama.cpp; try another file"
    )


def _signal_name(returncode: int) -> str:
    if returncode < 0:
        try:
            return signal.Signals(-returncode).name
        except ValueError:
            return f"signal {-returncode}"
    if returncode > 255:  # Windows reports crashes as NTSTATUS codes
        return f"exit code 0x{returncode & 0xFFFFFFFF:08X}"
    return f"exit code {returncode}"


def _clip(text: str, limit: int = 160) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _llama_version() -> str:
    try:
        return metadata.version("llama_cpp_python")
    except metadata.PackageNotFoundError:
        return "unknown"


def _cache_key(path: Path, size: int, mtime_ns: int) -> str:
    return json.dumps([str(path), size, mtime_ns, _llama_version()])


def _load_cache() -> dict[str, dict[str, Any]]:
    return read_cache(CACHE_NAME, CACHE_VERSION)


def _save_cache(entries: dict[str, dict[str, Any]]) -> None:
    newest = sorted(entries.items(), key=lambda kv: kv[1].get("checked_at", 0))
    write_cache(CACHE_NAME, CACHE_VERSION, dict(newest), MAX_CACHE_ENTRIES)
