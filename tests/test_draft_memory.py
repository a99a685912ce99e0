"""The draft memory keeps earlier outputs per target in a file: it survives a reload, holds
to its cap by dropping the oldest, can be cleared, and a damaged file is one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.draft_memory import DraftMemory, prompt_fingerprint
from app.errors import DraftMemoryError
from tests.helpers import run_cli


def test_outputs_survive_a_reload_per_target(tmp_path):
    path = tmp_path / "memory.json"
    memory = DraftMemory.load(path)
    first = memory.add("target-a", prompt_fingerprint([1, 2]), [5, 6, 7])
    memory.add("target-b", prompt_fingerprint([1, 2]), [8, 9])
    memory.save()
    again = DraftMemory.load(path)
    assert [(o.run, o.tokens) for o in again.runs("target-a")] == [(first.run, [5, 6, 7])]
    assert [o.tokens for o in again.runs("target-b")] == [[8, 9]]
    # run ids go on growing after a reload, so an earlier run is never renamed
    latest = max(o.run for o in again.outputs)
    assert again.add("target-a", "", [1]).run > latest


def test_the_cap_drops_the_oldest_outputs_down_to_three_quarters_of_it(tmp_path):
    memory = DraftMemory(tmp_path / "memory.json", cap_tokens=10)
    kept = []
    for i in range(5):
        memory.add("t", str(i), [i] * 4)
        kept.append([o.prompt for o in memory.outputs])
        assert memory.total_tokens <= 10
    # over the cap at the third and fifth: the oldest go until 7.5 tokens or fewer are left
    assert kept == [["0"], ["0", "1"], ["2"], ["2", "3"], ["4"]]
    memory.save()
    assert DraftMemory.load(tmp_path / "memory.json", cap_tokens=4).total_tokens == 4
    assert DraftMemory.load(tmp_path / "memory.json", cap_tokens=3).total_tokens == 0


def test_an_id_outside_the_targets_vocabulary_is_one_error_naming_the_file_id_and_size(
        tmp_path):
    path = tmp_path / "memory.json"
    memory = DraftMemory(path)
    memory.add("t", "", [3, 4, 5])
    memory.add("t", "", [3, 151_000])  # a file edited by hand, or another tokenizer's ids
    memory.add("other", "", [200_000])  # another target's ids are its own business
    with pytest.raises(DraftMemoryError) as caught:
        memory.runs("t", n_vocab=1000)  # nothing read back: not even [3, 4, 5]
    message = str(caught.value)
    assert "\n" not in message and str(path) in message and "--forget-draft-memory" in message
    assert "token id 151000" in message and "vocabulary of 1000 tokens" in message
    assert len(memory.runs("t")) == 2  # no vocabulary given: nothing to check against
    memory.clear("t")
    memory.add("t", "", [3, 4, 5])
    assert [o.tokens for o in memory.runs("t", n_vocab=1000)] == [[3, 4, 5]]


def test_answers_to_one_prompt_can_be_left_out():
    memory = DraftMemory()
    memory.add("t", prompt_fingerprint([1]), [3])
    memory.add("t", prompt_fingerprint([2]), [4])
    assert [o.tokens for o in memory.runs("t", avoid_prompt=prompt_fingerprint([1]))] == [[4]]


def test_clearing_forgets_one_target_or_all(tmp_path):
    memory = DraftMemory(tmp_path / "memory.json")
    memory.add("a", "", [1])
    memory.add("b", "", [2])
    memory.clear("a")
    assert memory.runs("a") == [] and memory.runs("b")
    memory.clear()
    memory.save()
    assert DraftMemory.load(tmp_path / "memory.json").outputs == []


@pytest.mark.parametrize("text", ["{not json", '{"format": "something else"}', "[1, 2]",
                                  '{"format": "draftlens-draft-memory", "version": 1, '
                                  '"next_run": 2, "outputs": [{"run": 1, "target": "t", '
                                  '"prompt": "", "tokens": ["a"]}]}'])
def test_a_damaged_file_is_one_clear_error_naming_the_file_and_the_fix(tmp_path, text):
    path = tmp_path / "memory.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(DraftMemoryError) as caught:
        DraftMemory.load(path)
    message = str(caught.value)
    assert str(path) in message and "--forget-draft-memory" in message


def test_a_missing_file_is_an_empty_memory_and_saving_creates_it(tmp_path):
    path = tmp_path / "sub" / "memory.json"
    memory = DraftMemory.load(path)
    assert memory.outputs == []
    memory.add("t", "", [1, 2])
    memory.save()
    assert DraftMemory.load(path).total_tokens == 2


def test_a_file_with_ids_past_any_vocabulary_loads_and_reading_it_back_is_the_error(tmp_path):
    """ids past 2**63 once reached the token buffer and raised OverflowError there."""
    memory = DraftMemory(tmp_path / "memory.json")
    memory.add("t", "", [3, 4, 5])
    memory.add("t", "", [3, 2 ** 64])
    memory.save()
    loaded = DraftMemory.load(tmp_path / "memory.json")
    with pytest.raises(DraftMemoryError, match=f"token id {2 ** 64} "):
        loaded.runs("t", n_vocab=1000)


def test_a_run_drafting_from_a_memory_with_an_id_past_the_vocabulary_stops_with_one_line(
        gguf_files, gguf_pair, capsys, tmp_path):
    target = Path(gguf_files[0])
    n_vocab = gguf_pair[0].n_vocab
    path = tmp_path / "memory.json"
    memory = DraftMemory(path)
    memory.add(f"{target.name}:{target.stat().st_size}", "", [5, 6, n_vocab])
    memory.save()
    before = path.read_text(encoding="utf-8")
    code, out, err = run_cli(capsys, "run", "-m", str(target), "--suffix", "--draft-memory",
                             str(path), "-p", "a tiny prompt", "-n", "4")
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 1 and out == "" and "Traceback" not in err
    assert len(errors) == 1 and str(path) in errors[0]
    assert f"token id {n_vocab} " in errors[0] and f"vocabulary of {n_vocab} tokens" in errors[0]
    assert path.read_text(encoding="utf-8") == before  # nothing added to a file it distrusts
