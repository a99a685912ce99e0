"""Downloads from the Hugging Face hub: the one download path of `draftlens models fetch`, the
window's download dialog and the demo pair.

Through huggingface_hub's API: `HfApi.model_info(files_metadata=True)` lists a repo's files with
their sizes and sha256, `get_hf_file_metadata` resolves the file's URL, etag and commit, and
`http_get` streams it with a Range header from where an earlier try stopped. The bytes go to
`<file>.download` beside the destination (the etag it belongs to in `<file>.download.etag`),
so a cancelled or broken download resumes; huggingface_hub's own hf_hub_download (2.x) deletes
its partial file on any failure. The finished file's sha256 is checked against the hub's
before it is renamed into place. Honours HF_ENDPOINT, HF_HUB_OFFLINE and a saved token
(`huggingface-cli login` / HF_TOKEN) at call time. Never prints; progress goes to a callback.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from app.errors import DownloadError
from app.models.fetch_progress import CancelFn, FetchJob, ProgressFn
from app.paths import models_dir

DEFAULT_ENDPOINT = "https://huggingface.co"
PREFERRED_QUANT = "q4_k_m"
_HASH_CHUNK = 4 * 1024 * 1024
_SPLIT_PART = re.compile(r"-(\d{5})-of-\d{5}\.gguf$", re.IGNORECASE)


class HubUnreachable(DownloadError):
    """The hub could not be reached (offline mode, no network, the hub down)."""


@dataclass(frozen=True)
class HubFile:
    name: str
    size: int | None
    sha256: str | None


def endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def list_gguf_files(repo: str, revision: str | None = None) -> list[HubFile]:
    """The repo's GGUF files, with size and sha256 from the hub's metadata."""
    return [f for f in _repo_files(repo, revision) if f.name.lower().endswith(".gguf")]


def choose_file(files: list[HubFile]) -> HubFile | None:
    """The sensible default: the only model file, else the Q4_K_M one; None when unclear."""
    models = [f for f in files if not Path(f.name).name.lower().startswith("mmproj")
              and _first_part(f.name)]
    if len(models) == 1:
        return models[0]
    preferred = [f for f in models if PREFERRED_QUANT in Path(f.name).name.lower()]
    return preferred[0] if preferred else None


def fetch_model(repo: str, filename: str, revision: str | None = None,
                progress: ProgressFn | None = None, cancel: CancelFn | None = None) -> Path:
    """Download one file of `repo` into DraftLens's models folder, as OWNER/REPO/FILE."""
    return download(repo, filename, models_dir() / repo, revision=revision, progress=progress,
                    cancel=cancel)


def download(repo: str, filename: str, dest_dir: Path, *, revision: str | None = None,
             expected_sha256: str | None = None, progress: ProgressFn | None = None,
             cancel: CancelFn | None = None) -> Path:
    """Download `filename` of `repo` to dest_dir/filename (resuming a partial one), check its
    sha256 against the hub's (and `expected_sha256` when given); returns the file's path."""
    listed = {f.name: f for f in _repo_files(repo, revision)}
    if filename not in listed:
        ggufs = [name for name in listed if name.lower().endswith(".gguf")]
        raise DownloadError(
            f"{filename} is not in {repo} — choose one of: {', '.join(ggufs) or 'no GGUF files'}"
            f" (`draftlens models fetch {repo}` lists them)")
    meta = _file_metadata(repo, filename, revision)
    size = listed[filename].size or meta.size or 0
    hub_sha = (listed[filename].sha256 or _sha_etag(meta.etag) or "").lower() or None
    if expected_sha256 and hub_sha and hub_sha != expected_sha256.lower():
        raise DownloadError(
            f"{filename} in {repo} is not the expected file (the hub's sha256 {hub_sha}, "
            f"expected {expected_sha256}) — it changed on the hub; use another source")
    want = hub_sha or (expected_sha256 or "").lower() or None
    final = dest_dir / filename
    final.parent.mkdir(parents=True, exist_ok=True)
    job = FetchJob(filename, size, 1, progress, cancel)
    if final.is_file() and final.stat().st_size == size and _sha256(final, job) == want:
        return final  # already here, and intact
    partial = final.with_name(final.name + ".download")
    tag = final.with_name(final.name + ".download.etag")
    if not partial.exists() or _read(tag) != meta.etag:
        partial.unlink(missing_ok=True)  # another version of the file: start again
        tag.write_text(meta.etag or "", encoding="utf-8")
    done = partial.stat().st_size if partial.exists() else 0
    _check_space(final, size - done)
    job.start_phase()
    _get(meta, partial, done, size, job)
    got = _sha256(partial, job)
    if want and got != want:
        partial.unlink(missing_ok=True)
        tag.unlink(missing_ok=True)
        raise DownloadError(
            f"{filename}: sha256 mismatch (got {got}, the hub says {want}) — the download "
            "was damaged and has been deleted; run the download again")
    os.replace(partial, final)
    tag.unlink(missing_ok=True)
    job.report(1, "done", size, force=True)
    return final


def _get(meta: Any, partial: Path, done: int, size: int, job: FetchJob) -> None:
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]

    headers = build_hf_headers()
    if urlsplit(meta.location).netloc != urlsplit(endpoint()).netloc:
        headers.pop("authorization", None)  # a CDN's signed URL: no token to a third party
    bar = _progress_bar(job, done)
    try:
        with open(partial, "ab") as out:
            http_get(meta.location, out, resume_size=done, headers=headers,
                     expected_size=size or None, displayed_filename=job.filename,
                     tqdm_class=bar)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise DownloadError(f"the disk is full while downloading {job.filename} — free "
                                f"space on {partial.parent}, then run it again to resume") from exc
        raise _translate(exc, job.filename) from exc
    except Exception as exc:
        raise _translate(exc, job.filename) from exc


def _progress_bar(job: FetchJob, start: int) -> type:
    """A tqdm class for http_get that reports to the job and raises when cancelled (http_get
    keeps what it wrote, so the next try resumes from there)."""
    from tqdm import tqdm  # type: ignore[import-untyped]

    class _Bar(tqdm):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = True
            super().__init__(*args, **kwargs)
            self.got = start

        def update(self, n: float | None = 1) -> bool | None:
            job.check_cancel()
            self.got += int(n or 0)
            job.report(1, "download", self.got, phase_bytes=self.got - start)
            return None

    job.check_cancel()
    return _Bar


def _repo_files(repo: str, revision: str | None) -> list[HubFile]:
    from huggingface_hub import HfApi

    _refuse_offline(repo)
    try:
        info = HfApi(endpoint=endpoint()).model_info(repo, revision=revision,
                                                     files_metadata=True)
    except Exception as exc:
        raise _translate(exc, repo) from exc
    return [HubFile(s.rfilename, s.size, s.lfs.sha256 if s.lfs else None)
            for s in info.siblings or []]


def _file_metadata(repo: str, filename: str, revision: str | None) -> Any:
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    url = hf_hub_url(repo, filename, revision=revision, endpoint=endpoint())
    try:
        return get_hf_file_metadata(url, endpoint=endpoint())
    except Exception as exc:
        raise _translate(exc, f"{repo}/{filename}") from exc


def _refuse_offline(what: str) -> None:
    from huggingface_hub import is_offline_mode

    if is_offline_mode():
        raise HubUnreachable(f"cannot reach the Hugging Face hub for {what}: offline mode is on "
                             "(HF_HUB_OFFLINE) — unset HF_HUB_OFFLINE and retry")


def _translate(exc: Exception, what: str) -> DownloadError:
    """huggingface_hub's and the network's errors as one line that says what to do."""
    import httpx2
    from huggingface_hub import errors

    if isinstance(exc, DownloadError):
        return exc
    if isinstance(exc, errors.GatedRepoError):
        return DownloadError(f"{what} is gated: accept its terms on the hub's page, then log in "
                             "with `huggingface-cli login` (or set HF_TOKEN) and retry")
    if isinstance(exc, errors.RepositoryNotFoundError):
        return DownloadError(f"repository not found: {what} — check the repo id (OWNER/NAME); "
                             "for a private repo log in with `huggingface-cli login` or set "
                             "HF_TOKEN")
    if isinstance(exc, errors.RevisionNotFoundError):
        return DownloadError(f"revision not found in {what} — check --revision")
    if isinstance(exc, errors.RemoteEntryNotFoundError):
        return DownloadError(f"file not found: {what} — `draftlens models fetch REPO` lists "
                             "the repo's GGUF files")
    if isinstance(exc, errors.OfflineModeIsEnabled):
        return HubUnreachable(f"cannot reach the Hugging Face hub for {what}: offline mode is "
                              "on (HF_HUB_OFFLINE) — unset HF_HUB_OFFLINE and retry")
    status = getattr(getattr(exc, "response", None), "status_code", None)
    if isinstance(exc, httpx2.TransportError) or (isinstance(status, int) and status >= 500):
        return HubUnreachable(f"cannot reach the Hugging Face hub ({endpoint()}) for {what}: "
                              f"{exc} — check the network (or HF_ENDPOINT), then retry; a "
                              "partial download resumes")
    if status in (401, 403):
        return DownloadError(f"access denied to {what} — log in with `huggingface-cli login` "
                             "(or set HF_TOKEN) and retry")
    return DownloadError(f"downloading {what} failed: {exc} — retry; a partial download "
                         "resumes")


def _check_space(final: Path, needed: int) -> None:
    free = shutil.disk_usage(final.parent).free
    if needed > free:
        raise DownloadError(f"not enough disk space for {final.name}: {needed / 1e9:.1f} GB "
                            f"needed, {free / 1e9:.1f} GB free on {final.parent} — free some "
                            "space and retry")


def _sha256(path: Path, job: FetchJob) -> str:
    digest = hashlib.sha256()
    job.start_phase()
    done = 0
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            job.check_cancel()
            digest.update(chunk)
            done += len(chunk)
            job.report(1, "verify", done, phase_bytes=done)
    return digest.hexdigest()


def _sha_etag(etag: str | None) -> str | None:
    """An LFS file's etag is its sha256; a small file's is a git hash (not comparable)."""
    return etag if etag and re.fullmatch(r"[0-9a-f]{64}", etag) else None


def _first_part(name: str) -> bool:
    split = _SPLIT_PART.search(name)
    return split is None or int(split.group(1)) == 1


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None
