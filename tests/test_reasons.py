"""The window's reasons come from the controller's recorded decisions: each step's decision in
words, the first-run banner's claim replayed from a trace's decisions, and `draftlens trace
--analysis` counting why steps did not draft. Decisions are built here as the controller
records them and read back through the trace format (the replay the window does)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.analysis.reasons import (
    NO_DECISION,
    count_decisions,
    describe_decision,
    plain_run_reason,
    reason_lines,
)
from app.cli.main import main
from app.engine.records import (
    RULE_BEST_RATE,
    RULE_END_OF_OUTPUT,
    RULE_FIXED,
    RULE_NO_GAIN,
    RULE_NOTHING_TO_DRAFT,
    RULE_PROBE,
    Decision,
)
from app.engine.trace import TraceHeader, TraceWriter
from tests.helpers import step
from tests.recorded_decisions import PRIOR, all_accepted_few_drafted, no_gain, probe, replayed


def test_the_banner_states_the_recorded_reason_when_every_draft_was_accepted():
    steps = all_accepted_few_drafted()
    text = plain_run_reason(steps)
    counts = count_decisions(steps)
    assert (counts.drafted, counts.steps, counts.judged, counts.accepted) == (4, 96, 10, 10)
    assert "drafted in 4 of 96 steps" in text
    assert "all 10 draft tokens it tried were accepted" in text
    assert "92 steps: no k beat plain decoding" in text
    # the figures of the controller's last plain decision, as it recorded them
    last = steps[-1]
    d = last.decision
    assert d.rule == RULE_NO_GAIN and d.alternative_gain < d.min_gain  # the claim holds
    assert f"step {last.index + 1}" in text
    assert f"with {d.evidence} draft tokens seen it priced acceptance at {d.acceptance:.2f}" \
        in text
    assert f"(its prior {d.prior:.2f})" in text
    assert f"k = {d.alternative_k}, at {d.alternative_gain:.2f}× plain decoding" in text
    assert d.alternative_gain == pytest.approx(
        d.alternative_tokens * d.plain_seconds / d.alternative_seconds)
    assert (f"({d.alternative_tokens:.2f} expected tokens in a "
            f"{d.alternative_seconds * 1000:.1f} ms pass)") in text
    assert f"short of the {d.min_gain:.2f}× it asks" in text
    # and no guess that contradicts the records beside it
    assert "too rarely" not in text


def test_the_banner_says_when_the_estimate_never_left_its_prior():
    steps = all_accepted_few_drafted()
    steps[-1].decision = replace(steps[-1].decision, acceptance=PRIOR)
    assert "priced acceptance at 0.60 (still its prior)" in plain_run_reason(steps)


def test_the_banner_follows_other_decisions_too():
    """Another set of recorded rules gives another reason: nothing guessed from the counts."""
    steps = []
    for i in range(40):
        s = step(i, 0, [], source="ngram")
        rule = RULE_NOTHING_TO_DRAFT if i < 36 else RULE_END_OF_OUTPUT
        s.decision = Decision(rule, 0, kind="ngram", limit=0 if rule == RULE_END_OF_OUTPUT else 8)
        steps.append(s)
    text = plain_run_reason(replayed(steps))
    assert "drafted in 0 of 40 steps" in text
    assert "36 steps: the drafter had nothing to offer" in text
    assert "4 steps: one token or none left to write" in text
    assert "priced acceptance" not in text  # no no-gain decision: no figures claimed


def test_a_trace_without_decisions_says_so_instead_of_guessing():
    steps = [step(i, 0, []) for i in range(20)]
    text = plain_run_reason(replayed(steps))
    assert "record no decisions" in text and "cannot say why" in text
    assert "plainly" not in text and "accepted" not in text  # nothing guessed
    assert count_decisions(steps).plain_by_rule[NO_DECISION] == 20


def test_each_rule_is_said_with_its_figures():
    d = no_gain(10, 0.61)
    text = describe_decision(d)
    assert text.startswith("k = 0: plain decoding")
    assert "k = 3, was priced at 0.97× plain" in text and "1.05×" in text
    assert "0.61 (from 10 draft tokens seen, interval 0.35–0.98; prior 0.60)" in text
    assert "73.0 ms" in text
    best = Decision(RULE_BEST_RATE, 4, kind="draft model", acceptance=0.9, acceptance_low=0.8,
                    acceptance_high=0.95, evidence=40, prior=PRIOR, plain_seconds=0.05,
                    pass_seconds=0.12, gain=1.42, alternative_k=5, alternative_gain=1.40,
                    min_gain=1.05)
    text = describe_decision(best)
    assert "k = 4 (draft model): the best expected rate, 1.42× plain" in text
    assert "next best k = 5 at 1.40×" in text and "120.0 ms" in text and "50.0 ms" in text
    stopping = describe_decision(replace(best, expected_tokens=3.4, stop_limit=8))
    assert "120.0 ms for 3.40 expected tokens" in stopping
    assert "may run to 8 tokens" in stopping and "may run" not in text
    fresh = describe_decision(probe(2, 0))
    assert "a probe" in fresh and "0.60 (its prior; no draft tokens seen yet)" in fresh
    assert describe_decision(Decision(RULE_FIXED, 4, limit=4)).startswith("k = 4: fixed")
    assert "nothing to offer" in describe_decision(Decision(RULE_NOTHING_TO_DRAFT, 0))
    assert describe_decision(None) == NO_DECISION
    # a draft many times the target's cost: its tiny gain is not written as 0.00x
    assert "0.0013× plain" in describe_decision(replace(d, alternative_gain=0.00131))


def test_trace_analysis_counts_why_steps_did_not_draft(tmp_path, capsys):
    path = tmp_path / "run.jsonl"
    steps = all_accepted_few_drafted()
    steps[0].decision = Decision(RULE_NOTHING_TO_DRAFT, 0, kind="draft model")
    with TraceWriter(path) as writer:
        writer.header(TraceHeader("t.gguf", "d.gguf", "llamacpp", "cpu",
                                  {"adaptive": True, "draft_max": 8}, {}))
        for s in steps:
            writer.step(s)
        writer.summary({})
    assert main(["trace", str(path), "--analysis"]) == 0
    out = capsys.readouterr().out
    assert "4 of 96 steps drafted" in out
    assert "steps that did not draft (92), by reason:" in out
    lines = out.splitlines()
    assert any(line.split()[:2] == ["91", RULE_NO_GAIN] for line in lines)
    assert any(line.split()[:2] == ["1", RULE_NOTHING_TO_DRAFT] for line in lines)
    assert any(line.split()[:2] == ["4", RULE_PROBE] for line in lines)
    assert all(line in lines for line in reason_lines(steps))
