"""Models where people keep them: every store laid out as its tool lays it out, in a scratch
home, found by `draftlens models list --json`; `--drafts-for` keeps only drafts whose vocabulary
fits the target, as the pair check judges."""

from __future__ import annotations

import json

from app.cli.main import main
from app.models.discovery import discover_models, drafts_for, find_model
from tests import model_stores


def _list(capsys, *args):
    code = main(["models", "list", "--json", *args])
    out = capsys.readouterr().out
    assert code == 0
    return json.loads(out)


def test_list_finds_every_store(every_store, capsys):
    found = {(m["store"], m["name"]): m for m in _list(capsys)}
    assert set(found) == {
        ("draftlens", "own-target.gguf"),
        ("lmstudio", "lmstudio-community/Tiny-Draft-GGUF/tiny-draft-Q4_K_M.gguf"),
        ("lmstudio", "someone/Foreign-GGUF/foreign.gguf"),
        ("ollama", "tinydraft:latest"),
        ("huggingface", "tiny/Tiny-Target-GGUF/tiny-target-f32.gguf"),
        ("huggingface", "tiny/tiny-hf"),
        ("llama.cpp", "tiny_Tiny-Draft-GGUF_tiny-draft.gguf"),
        ("folder", "mine.gguf"),
    }
    keys = {"name", "path", "store", "format", "size_bytes", "architecture", "n_params",
            "vocab_type", "vocab_size", "mtp_layers", "error"}
    assert all(set(m) == keys for m in found.values())
    ollama = found[("ollama", "tinydraft:latest")]
    assert ollama["path"].split("/")[-2:][0] == "blobs" and ollama["format"] == "gguf"
    assert ollama["vocab_type"] == "llama" and ollama["architecture"] == "llama"
    hf = found[("huggingface", "tiny/tiny-hf")]
    assert hf["format"] == "transformers" and hf["path"].endswith("snapshots/" + "b" * 40)
    assert hf["size_bytes"] > 0 and hf["vocab_size"]
    gguf = found[("huggingface", "tiny/Tiny-Target-GGUF/tiny-target-f32.gguf")]
    assert gguf["vocab_size"] == found[("draftlens", "own-target.gguf")]["vocab_size"]
    assert all(not m["error"] for m in found.values())


def test_drafts_for_lists_same_vocabulary_drafts_then_cross_vocabulary_ones(every_store,
                                                                          capsys):
    drafts = _list(capsys, "--drafts-for", "own-target.gguf")
    names = [m["name"] for m in drafts]
    assert "own-target.gguf" not in names, "the target is not its own draft"
    same = [m for m in drafts if m["pair"] == "same vocabulary"]
    assert {"tinydraft:latest", "mine.gguf", "tiny/Tiny-Target-GGUF/tiny-target-f32.gguf",
            "lmstudio-community/Tiny-Draft-GGUF/tiny-draft-Q4_K_M.gguf"} <= {
        m["name"] for m in same}
    assert all(m["verdict"].startswith("compatible") for m in same)
    # another vocabulary that shares tokens drafts across vocabularies, listed after, labelled
    foreign = names.index("someone/Foreign-GGUF/foreign.gguf")
    assert foreign >= len(same) and drafts[foreign]["pair"].startswith("other vocabulary: ")
    assert "different vocabularies" in drafts[foreign]["verdict"]
    assert [m["pair"] == "same vocabulary" for m in drafts] == [True] * len(same) + [False] * (
        len(drafts) - len(same))


def test_drafts_for_ranks_compatible_first_and_says_why(every_store, store_ggufs):
    models = discover_models()
    verdicts = drafts_for(find_model("tinydraft:latest", models), models)
    flags = [v.compatible for v in verdicts]
    assert flags == sorted(flags, reverse=True), "compatible drafts come first"
    foreign = [v for v in verdicts if v.model.name.endswith("foreign.gguf")]
    assert len(foreign) == 1 and not foreign[0].compatible
    assert "differ" in foreign[0].check.message


def test_human_table_and_unknown_target(every_store, capsys):
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["NAME", "STORE", "FORMAT", "SIZE", "VOCAB", "PATH"]
    assert "tinydraft:latest" in out and "ollama" in out
    assert main(["models", "list", "--drafts-for", "no-such-model"]) == 1
    err = capsys.readouterr().err
    assert "no-such-model" in err and "draftlens models list" in err


def test_env_overrides_and_empty_home(scratch_home, store_ggufs, tmp_path, monkeypatch, capsys):
    assert _list(capsys) == []
    ollama = tmp_path / "elsewhere-ollama"
    llama = tmp_path / "elsewhere-llama"
    hub = tmp_path / "elsewhere-hub"
    model_stores.ollama(ollama, store_ggufs[1], "qwen2.5", "0.5b")
    model_stores.ollama(ollama, store_ggufs[0], "tiny-GGUF", "Q4_K_M", namespace="bartowski",
                        registry="hf.co")
    model_stores.llama_cache(llama, store_ggufs[1], "x.gguf")
    model_stores.hf_cache(hub, "a/b", {"m.gguf": store_ggufs[1]})
    monkeypatch.setenv("OLLAMA_MODELS", str(ollama))
    monkeypatch.setenv("LLAMA_CACHE", str(llama))
    monkeypatch.setenv("HF_HUB_CACHE", str(hub))
    names = {(m["store"], m["name"]) for m in _list(capsys)}
    assert names == {("ollama", "qwen2.5:0.5b"), ("ollama", "hf.co/bartowski/tiny-GGUF:Q4_K_M"),
                     ("llama.cpp", "x.gguf"), ("huggingface", "a/b/m.gguf")}


def test_unreadable_file_is_listed_with_the_reason(scratch_home, store_ggufs, capsys):
    from app.paths import models_dir

    (models_dir() / "broken.gguf").write_bytes(store_ggufs[0].read_bytes()[:5000])
    (models_dir() / "mmproj-vision.gguf").write_bytes(b"GGUF")
    [entry] = _list(capsys)
    assert entry["name"] == "broken.gguf" and "download it again" in entry["error"]


def test_ollama_blob_runs_as_gguf(every_store):
    from app.models.pair_check import check_pair_files, is_gguf

    models = discover_models()
    blob = find_model("tinydraft:latest", models)
    assert blob.suffix == "" and is_gguf(blob)
    assert check_pair_files(find_model("own-target.gguf", models), blob).compatible
