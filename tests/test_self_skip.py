"""Which layers a self-draft skips: the set's text form, the greedy search that chooses it by
measurement on the run's own text, and how a run, the bench and the trace state the choice
with its figures (agreement, layers kept, estimated and measured cost)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.engine.decode_config import DecodeConfig, DrafterChoice, DrafterOptions
from app.engine.drafters.self_skip import (
    SearchProgress,
    SkipChoice,
    estimated_cost,
    format_skip,
    given_skip,
    parse_skip,
    search_skip,
)
from app.engine.trace import read_trace
from app.errors import SettingsError
from app.models import self_skip
from app.models.loading import ModelSpec, load_pair
from app.models.self_skip import search_texts, settle_self_skip
from tests.helpers import run_cli

PROMPT = "def add(a, b):\n    return"


@pytest.fixture(scope="module")
def deep_gguf(tmp_path_factory):
    from tests.tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("skip-gguf") / "deep.gguf", seed=5,
                           n_layer=6)


@pytest.fixture(scope="module")
def deep_hf(tmp_path_factory):
    from backends.torch_hf import TorchModel
    from tests.tiny_hf import write_tiny_hf

    folder = write_tiny_hf(tmp_path_factory.mktemp("skip-hf") / "t", seed=3, n_layer=6)
    model = TorchModel(folder, device="cpu")
    yield model
    model.close()


def test_a_skip_set_reads_and_writes_as_ranges():
    assert parse_skip("6-11,15-20") == frozenset([*range(6, 12), *range(15, 21)])
    assert parse_skip(" 3, 5-5 ,4") == frozenset({3, 4, 5})
    assert format_skip(frozenset({6, 7, 8, 15, 17, 18})) == "6-8,15,17-18"
    assert format_skip(parse_skip("1,2,3,9")) == "1-3,9"


@pytest.mark.parametrize(("text", "n_layers", "message"), [
    ("0-3", 28, "cannot skip layer 0"),
    ("20-28", 28, "layer 28 is not in the target, which has 28 layers"),
    ("9-6", 28, "runs backwards"),
    ("six", 28, "0-based layer ranges"),
    (",", 28, "names no layer"),
])
def test_a_skip_set_the_target_cannot_run_is_refused_with_the_fix(text, n_layers, message):
    with pytest.raises(SettingsError, match=message):
        parse_skip(text, n_layers)


def test_estimated_cost_is_the_share_of_weights_a_step_reads():
    assert estimated_cost(frozenset({1, 2}), 20, [20, 20, 20, 20]) == pytest.approx(60 / 100)
    assert estimated_cost(frozenset(), 20, [20, 20]) == 1.0


@pytest.mark.parametrize("backend", ["torch", "llamacpp"])
def test_the_search_meets_its_cost_and_states_the_agreement_of_the_set_it_chose(
        backend, deep_hf, deep_gguf):
    if backend == "torch":
        target = deep_hf
    else:
        from backends.llamacpp import LlamaCppModel

        target = LlamaCppModel(deep_gguf, n_gpu_layers=0, n_ctx=256)
    try:
        texts = search_texts(target, [target.tokenize(PROMPT), target.tokenize("the cat")])
        assert target.n_cached == 0
        scorer = target.skip_scorer()
        heard: list[SearchProgress] = []
        choice = search_skip(scorer, texts, 0.6, heard.append)
        head, blocks = scorer.layer_bytes()
        # a report per set scored, and one per layer dropped with the figures of the path
        assert [at.scored for at in heard if not at.settled] == list(
            range(1, choice.evaluations + 1))
        settled = [at for at in heard if at.settled]
        assert [(at.skip, at.agreement, at.cost) for at in settled] == [
            (point.skip, point.agreement, point.cost) for point in choice.path]
        # the tiny target's blocks are of one size: the total is exact from the first report
        assert {at.to_score for at in heard} == {choice.evaluations}
        skipped = parse_skip(choice.skip, 6)
        assert choice.cost == pytest.approx(estimated_cost(skipped, head, blocks))
        assert choice.cost <= 0.6
        assert 0 not in skipped and choice.how == "searched"
        # one more layer dropped per point of the path, each the one before it and one more
        sets = [parse_skip(p.skip) for p in choice.path]
        assert [len(s) for s in sets] == list(range(1, len(skipped) + 1))
        assert all(a < b for a, b in zip(sets, sets[1:], strict=False))
        assert choice.path[-1].agreement == choice.agreement
        again = given_skip(scorer, texts, skipped)
        assert again.agreement == choice.agreement and again.how == "given"
        assert 0.0 < choice.agreement < 1.0 and choice.positions == sum(len(t) - 1 for t in texts)
        scorer.close()
    finally:
        if backend == "llamacpp":
            target.close()


def test_settling_states_the_choice_measures_its_cost_and_remembers_it(deep_gguf,
                                                                       monkeypatch):
    pair = load_pair(ModelSpec(target=str(deep_gguf), n_gpu_layers=0, n_ctx=256))
    try:
        prompts = [pair.target.tokenize(PROMPT)]
        config = DecodeConfig(drafter=DrafterChoice(("self",), DrafterOptions(skip_cost=0.7)))
        heard: list[str] = []
        settled, choice = settle_self_skip(pair, config, prompts, heard.append)
        assert choice is not None and settled.drafter.options.skip == choice.skip
        assert choice.measured_cost is not None and choice.measured_cost > 0
        assert choice.file_bytes == Path(pair.self_draft(choice.skip).path).stat().st_size > 0
        assert pair.skip_choices[choice.skip] == choice
        assert any("searching which of 6 layers" in m for m in heard)
        # the same text again: the choice is read back, not searched for
        monkeypatch.setattr(self_skip, "search_skip", lambda *a, **k: pytest.fail("searched"))
        _, again = settle_self_skip(pair, config, prompts)
        assert again is not None and again.skip == choice.skip
        assert again.agreement == choice.agreement
    finally:
        pair.close()


def test_a_run_states_the_layers_it_skipped_with_their_figures(deep_gguf, tmp_path, capsys):
    trace = tmp_path / "self.jsonl"
    code, out, err = run_cli(capsys, "run", "-m", str(deep_gguf), "--spec-type", "self",
                             "--self-cost", "0.7", "-p", PROMPT, "-n", "12", "--trace",
                             str(trace))
    assert code == 0, err
    header = read_trace(trace).header
    figures = SkipChoice.from_dict(header.settings["self_skip"])
    assert figures.how == "searched" and figures.n_layers == 6
    assert figures.measured_cost is not None and figures.file_bytes > 0
    assert header.settings["drafter"]["options"]["skip"] == figures.skip
    assert header.draft == f"self-draft (skips layers {figures.skip})"
    assert f"agreement {figures.agreement:.2f}" in err  # the CLI said it before the run


def test_bench_uses_a_set_given_by_hand_and_reports_its_figures(deep_gguf, capsys):
    code, out, err = run_cli(capsys, "bench", "-m", str(deep_gguf), "--self-skip", "2-3",
                             "-n", "12", "-p", PROMPT, "--json", "--exact-kernels")
    assert code == 0, err
    report = json.loads(out)
    assert report["self_skip"]["skip"] == "2-3" and report["self_skip"]["how"] == "given"
    assert report["self_skip"]["kept"] == 4
    assert report["identical"] is True
    assert report["drafter"] == "self-draft (skips layers 2-3)"  # as the trace names it


def test_self_draft_flags_are_checked(deep_gguf, capsys):
    code, _, err = run_cli(capsys, "run", "-m", str(deep_gguf), "--self-skip", "0-2",
                           "-p", "x", "-n", "4")
    assert code == 1 and "cannot skip layer 0" in err
    code, _, err = run_cli(capsys, "run", "-m", str(deep_gguf), "--spec-type", "self",
                           "--self-cost", "1.5", "-p", "x", "-n", "4")
    assert code == 1 and "between 0 and 1" in err
    code, _, err = run_cli(capsys, "run", "-m", str(deep_gguf), "-md", str(deep_gguf),
                           "--self-skip", "1", "-p", "x", "-n", "4")
    assert code == 1 and "pick one draft" in err
    code, _, err = run_cli(capsys, "run", "-m", str(deep_gguf), "-md", str(deep_gguf),
                           "--spec-type", "self,draft", "--self-skip", "1", "-p", "x")
    assert code == 1 and "put self last" in err


def test_a_set_given_by_hand_loads_with_the_pair_and_building_a_run_loads_none(deep_gguf):
    from app.cli.main import build_parser
    from app.cli.options import plan
    from app.runs import build_session

    bench = plan(build_parser().parse_args(["bench", "-m", str(deep_gguf), "--self-skip", "2-3",
                                            "-p", "the cat"]))
    assert bench.spec.self_skips == ("2-3",) and bench.runs[0].drafter.options.skip == "2-3"
    pair = load_pair(bench.spec)
    try:
        assert list(pair.self_drafts) == [("2-3", True)]
        build_session(pair, bench.runs[0])
        other = DecodeConfig(drafter=DrafterChoice(("self",), DrafterOptions(skip="1")))
        with pytest.raises(SettingsError, match="without layers 1 was not loaded"):
            build_session(pair, other)
        assert list(pair.self_drafts) == [("2-3", True)]
    finally:
        pair.close()
