"""Suffix decoding end to end on tiny real models: greedy output identical to plain decoding,
drafts that really happen, and a second run that drafts from the memory of the first."""

from __future__ import annotations

import json

import pytest

from app.analysis.measure import Tally, timed_run
from app.cli.main import main
from app.draft_memory import DraftMemory
from app.engine.decode_config import DecodeConfig, DrafterChoice, DrafterOptions
from app.engine.drafters.suffix import RememberedRun, SuffixDrafter, memory_buffer
from app.engine.records import COPIED_FROM_MEMORY, COPIED_ON_RETRY
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.engine.trace import read_trace
from app.models.loading import ModelSpec, load_pair
from app.runs import held_memory, new_drafter

PROMPT = "the cat sat on the mat. the cat"


@pytest.fixture(params=["torch", "llamacpp"])
def target(request):
    pair = request.getfixturevalue("hf_exact_pair" if request.param == "torch"
                                   else "gguf_pair")
    return pair[0]


def generate(target, drafter, k=8, tree_width=1, n_predict=48, adaptive=False):
    config = DecodeConfig(n_predict=n_predict, draft_max=k, tree_width=tree_width,
                          adaptive=adaptive, sampling=SamplingParams(temperature=0.0))
    session = Session(target, drafter, config)
    steps = list(session.steps(target.tokenize(PROMPT)))
    return session.output_ids, steps


def drafted(steps):
    return [t for s in steps for t in s.tokens]


@pytest.mark.parametrize("k,tree_width,adaptive", [(4, 1, False), (16, 1, False),
                                                   (8, 2, False), (16, 1, True)])
def test_suffix_greedy_equals_plain_and_drafts(target, k, tree_width, adaptive):
    expected, _ = generate(target, None, k=1)
    got, steps = generate(target, SuffixDrafter(), k, tree_width, adaptive=adaptive)
    assert got == expected
    tokens = drafted(steps)
    assert tokens and all(t.copied_from is not None for t in tokens)
    if tree_width > 1:
        assert any(s.is_tree for s in steps)


def test_a_second_run_drafts_from_the_memory_of_the_first(target):
    expected, _ = generate(target, None, k=1)
    first, _ = generate(target, SuffixDrafter())
    memory = memory_buffer([RememberedRun(7, first)])
    got, steps = generate(target, SuffixDrafter(memory), k=16)
    assert got == expected
    from_memory = [t for t in drafted(steps) if t.copied_from
                   and t.copied_from.kind == COPIED_FROM_MEMORY]
    assert from_memory and all(t.copied_from.run == 7 for t in from_memory)
    assert any(t.accepted for t in from_memory)


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_run_remembers_outputs_and_the_next_run_drafts_from_them(gguf_files, capsys,
                                                                      tmp_path):
    memory = tmp_path / "memory.json"
    outputs = []
    for i in range(2):
        trace = tmp_path / f"run{i}.jsonl"
        code, out, _ = run_cli(capsys, "run", "-m", str(gguf_files[0]), "--suffix",
                               "--draft-memory", str(memory), "-p", "a tiny prompt", "-n",
                               "24", "--trace", str(trace))
        assert code == 0
        outputs.append(out)
    assert outputs[0] == outputs[1]
    kept = DraftMemory.load(memory)
    assert len(kept.outputs) == 2
    sources = [t.copied_from for s in read_trace(tmp_path / "run1.jsonl").steps
               for t in s.tokens]
    # the same prompt again is a retry: it drafts the first run's answer to it
    assert any(s and s.kind == COPIED_ON_RETRY and s.run == kept.outputs[0].run
               for s in sources)


def test_cli_forgets_the_memory_and_a_damaged_file_is_one_clear_error(gguf_files, capsys,
                                                                      tmp_path):
    memory = tmp_path / "memory.json"
    memory.write_text("{damaged", encoding="utf-8")
    args = ["run", "-m", str(gguf_files[0]), "--suffix", "--draft-memory", str(memory),
            "-p", "a tiny prompt", "-n", "4"]
    code, _, err = run_cli(capsys, *args)
    assert code != 0 and "Traceback" not in err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and str(memory) in errors[0]
    assert "--forget-draft-memory" in errors[0]
    code, _, _ = run_cli(capsys, *args, "--forget-draft-memory")
    assert code == 0
    assert len(DraftMemory.load(memory).outputs) == 1


def test_draft_memory_without_suffix_is_refused(gguf_files, capsys, tmp_path):
    code, _, err = run_cli(capsys, "run", "-m", str(gguf_files[0]), "--ngram",
                           "--draft-memory", str(tmp_path / "m.json"), "-p", "x", "-n", "2")
    assert code != 0 and "--suffix" in err


def test_bench_prompts_draft_from_earlier_prompts_never_their_own(gguf_files, capsys,
                                                                  tmp_path):
    memory = tmp_path / "memory.json"
    code, out, _ = run_cli(capsys, "bench", "-m", str(gguf_files[0]), "--suffix",
                           "--draft-memory", str(memory), "-p", "a tiny prompt", "-p",
                           "a tiny prompt", "-n", "16", "--json", "--exact-kernels")
    assert code == 0
    report = json.loads(out)
    assert report["identical"] is True
    kept = DraftMemory.load(memory)
    # one speculative run per prompt is kept; plain runs never write
    assert len(kept.outputs) == 2


def memory_config(path, n_predict: int) -> DecodeConfig:
    """Suffix decoding that reads and writes the draft memory file at `path`."""
    return DecodeConfig(n_predict=n_predict, draft_max=8, drafter=DrafterChoice(
        ("suffix",), DrafterOptions(memory=str(path))))


def test_a_benchmarked_prompt_never_drafts_from_its_own_earlier_answer(gguf_files, tmp_path):
    path = tmp_path / "m.json"
    pair = load_pair(ModelSpec(str(gguf_files[0])))
    try:
        config = memory_config(path, n_predict=12)
        mine = pair.target.tokenize("a tiny prompt")
        other = pair.target.tokenize("another prompt")
        timed_run(pair, config, mine, plain=True, tally=Tally())
        assert DraftMemory.load(path).outputs == []  # a plain run never writes
        timed_run(pair, config, mine, plain=False, tally=Tally())
        assert len(DraftMemory.load(path).outputs) == 1
        assert len(new_drafter(pair, config, avoid_prompt=mine).memory) == 0
        assert len(new_drafter(pair, config, avoid_prompt=other).memory) > 0
    finally:
        pair.close()


def test_a_timed_run_hands_its_session_to_prepare_before_the_first_step(gguf_files, tmp_path):
    """A research bench swaps the controller in (bench_oracle.py): what prepare sets is what
    the timed run decodes with."""
    pair = load_pair(ModelSpec(str(gguf_files[0])))
    try:
        config = memory_config(tmp_path / "m.json", n_predict=12)
        prompt = pair.target.tokenize("a tiny prompt")
        seen = []

        def prepare(session: Session) -> None:
            seen.append((session, list(session.output_ids)))
            session.controller.draft_max = 0  # no step may draft

        tally = Tally()
        timed_run(pair, config, prompt, plain=False, tally=tally, prepare=prepare)
        (session, before), = seen
        assert before == [] and tally.outputs == [session.output_ids]
        assert session.stats.drafted == 0 and len(session.output_ids) == 12
    finally:
        pair.close()


def test_a_retried_prompt_drafts_from_the_answer_it_got_before(gguf_files, tmp_path):
    """A workload that sends a prompt again on purpose (a retry) times what the app does:
    the retry copies its earlier answer from the memory, whole."""
    path = tmp_path / "m.json"
    pair = load_pair(ModelSpec(str(gguf_files[0])))
    try:
        config = memory_config(path, n_predict=24)
        prompt = pair.target.tokenize("a tiny prompt")
        timed_run(pair, config, prompt, plain=False, tally=Tally())
        avoided, retried = Tally(), Tally()
        timed_run(pair, config, prompt, plain=False, tally=avoided)
        timed_run(pair, config, prompt, plain=False, tally=retried, retried=True)
        assert avoided.outputs == retried.outputs
        assert retried.stats.accepted > avoided.stats.accepted
    finally:
        pair.close()


def test_the_memorys_suffix_tree_takes_each_run_in_place_and_is_rebuilt_only_when_it_must(
        gguf_files, tmp_path):
    path = tmp_path / "m.json"
    pair = load_pair(ModelSpec(str(gguf_files[0])))
    try:
        config = memory_config(path, n_predict=12)
        prompts = [pair.target.tokenize(text) for text in ("one prompt", "two", "three")]
        timed_run(pair, config, prompts[0], plain=False, tally=Tally())
        timed_run(pair, config, prompts[1], plain=False, tally=Tally())
        held = held_memory(pair, str(path))
        tree = held.tree
        assert tree is not None
        runs = [o.run for o in held.memory.outputs]
        assert len(runs) == 2 and sorted(tree.seqs) == runs  # the first run's tree, extended
        assert new_drafter(pair, config, avoid_prompt=prompts[2]).memory is tree
        # leaving out a prompt that has an answer needs another tree
        assert new_drafter(pair, config, avoid_prompt=prompts[0]).memory is not tree
    finally:
        pair.close()


def test_a_memory_held_for_one_target_is_let_go_when_another_target_reads_one(
        gguf_files, tmp_path):
    path = str(tmp_path / "m.json")
    first = load_pair(ModelSpec(str(gguf_files[0])))
    try:
        held = held_memory(first, path)
        assert held_memory(first, path) is held  # read once while its target runs
    finally:
        first.close()
    second = load_pair(ModelSpec(str(gguf_files[1])))
    try:
        held_memory(second, path)
        assert held_memory(first, path) is not held  # the first target's was let go
    finally:
        second.close()
