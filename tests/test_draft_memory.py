"""The draft memory keeps earlier outputs per target in a file: it survives a reload, holds
to its cap by dropping the oldest, can be cleared, and a damaged file is one clear error."""

from __future__ import annotations

import pytest

from app.draft_memory import DraftMemory, prompt_fingerprint
from app.errors import DraftMemoryError


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


def test_runs_with_ids_outside_the_targets_vocabulary_are_not_read_back():
    memory = DraftMemory()
    memory.add("t", "", [3, 4, 5])
    memory.add("t", "", [3, 151_000])  # a file edited by hand, or another tokenizer's ids
    assert [o.tokens for o in memory.runs("t", n_vocab=1000)] == [[3, 4, 5]]
    assert len(memory.runs("t")) == 2


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


def test_a_file_with_ids_past_any_vocabulary_loads_and_is_not_read_back(tmp_path):
    """ids past 2**63 once reached the token buffer and raised OverflowError there."""
    memory = DraftMemory(tmp_path / "memory.json")
    memory.add("t", "", [3, 4, 5])
    memory.add("t", "", [3, 2 ** 64])
    memory.save()
    loaded = DraftMemory.load(tmp_path / "memory.json")
    assert [o.tokens for o in loaded.runs("t", n_vocab=1000)] == [[3, 4, 5]]
