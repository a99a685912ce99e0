"""A copied draft priced from what it knows before it is judged: its source and its match
(app.engine.estimates), through the drafters' outlooks and the controller, with the
decision recording what the audit needs to reproduce it."""

from __future__ import annotations

from dataclasses import replace

from app.analysis.decision_audit import decision_problems
from app.engine.adaptive import DraftLengthController
from app.engine.cost_curve import VerifyCostCurve
from app.engine.drafters import Outlook, written_copy
from app.engine.drafters.lookup import NGRAM_COPY, NGRAM_SELF, PromptLookup
from app.engine.drafters.suffix import SuffixDrafter
from app.engine.estimates import CopyEvidence, copy_accept_at, measured_rate
from app.engine.records import COPIED_FROM_MEMORY, COPIED_FROM_OUTPUT, COPIED_FROM_PROMPT

# a steep verify curve, as the AMD EPYC's (a 2-token pass costs 1.9 plain steps): a draft
# pays there only where it is judged nearly certain
STEEP = {1: 0.0301, 2: 0.0578, 4: 0.0992, 8: 0.251, 16: 0.290, 64: 0.883}


def controller() -> DraftLengthController:
    ctl = DraftLengthController(32, adaptive=True, curve=VerifyCostCurve(dict(STEEP)),
                                free_kinds_shadowed=True, draft_cost=0.0)
    ctl.fixed_prices = True
    return ctl


def test_a_longer_match_predicts_more_of_a_copy_accepted():
    short, long = CopyEvidence(COPIED_FROM_OUTPUT, 0), CopyEvidence(COPIED_FROM_OUTPUT, 12)
    learnt = [0.5] * 4
    assert copy_accept_at(long, learnt, 0.0)[0] > copy_accept_at(short, learnt, 0.0)[0] + 0.3
    # further along the draft the run is longer too
    grows = copy_accept_at(CopyEvidence(COPIED_FROM_OUTPUT, 2), [0.5] * 12, 0.0)
    assert grows[0] < grows[4] < grows[11]


def test_the_source_matters_a_copy_of_the_prompt_goes_on_further_than_one_of_memory():
    prompt = measured_rate(COPIED_FROM_PROMPT, 12)
    memory = measured_rate(COPIED_FROM_MEMORY, 12)
    assert prompt is not None and memory is not None and prompt > memory


def test_the_kinds_own_verdicts_outweigh_the_measured_rates_as_they_accrue():
    copy = CopyEvidence(COPIED_FROM_PROMPT, 24)
    assert copy_accept_at(copy, [0.2], 0.0)[0] > 0.9  # no verdicts yet: the measured rate
    assert copy_accept_at(copy, [0.2], 32.0)[0] < 0.4  # 32 tokens judged at 0.2: theirs


def test_a_source_never_measured_is_priced_from_the_kind_alone():
    assert copy_accept_at(CopyEvidence("retry", 40), [0.98, 0.97], 0.0) == [0.98, 0.97]


def test_the_controller_drafts_a_long_copy_of_the_prompt_at_once_and_not_a_fresh_one():
    """The same kind, no verdicts yet: a prompt copy whose match is long drafts long on the
    steep curve; without a match (its first token) it is not priced as nearly certain. A
    controller that ignored the match would choose the same k for both."""
    ctl = controller()
    fresh = ctl.decide(64, NGRAM_COPY, 0, None, CopyEvidence(COPIED_FROM_PROMPT, 0))
    long = controller().decide(64, NGRAM_COPY, 0, None, CopyEvidence(COPIED_FROM_PROMPT, 12))
    assert fresh.k == 0
    assert long.k >= 8
    assert long.copy_source == COPIED_FROM_PROMPT and long.copy_match == 12
    assert decision_problems(long) == []


def test_a_copy_of_this_output_with_a_short_match_is_not_drafted_on_the_steep_curve():
    d = controller().decide(64, NGRAM_SELF, 0, None, CopyEvidence(COPIED_FROM_OUTPUT, 2))
    assert d.k == 0 and d.accept_at[0] < 0.9


def test_the_audit_catches_acceptance_that_does_not_follow_from_the_copy():
    d = controller().decide(64, NGRAM_COPY, 0, None, CopyEvidence(COPIED_FROM_PROMPT, 12))
    assert decision_problems(d) == []
    other_match = replace(d, copy_match=0)  # recorded as if the match had been shorter
    assert any("does not follow from a copy" in p for p in decision_problems(other_match))
    other_rates = replace(d, learnt_at=[0.1] * len(d.learnt_at or []), learnt_evidence=32.0)
    assert decision_problems(other_rates)


def test_the_drafters_name_the_source_and_match_of_their_copies():
    prompt = [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 1, 2]
    lookup = PromptLookup()
    lookup.begin(prompt)
    context = [*prompt, 5, 6, 7, 8, 9, 10, 11]
    seen = lookup.outlook(context)
    assert seen.copy is not None and seen.copy.source == COPIED_FROM_PROMPT
    assert seen.copy.match == seen.copied >= 6
    suffix = SuffixDrafter()
    suffix.begin(prompt)
    seen = suffix.outlook(context)
    assert seen.copy is not None and seen.copy.source == COPIED_FROM_PROMPT


def test_only_what_the_target_wrote_counts_as_a_copys_match():
    outlook = Outlook(NGRAM_COPY, 9, copy=CopyEvidence(COPIED_FROM_PROMPT, 9))
    assert written_copy(outlook, 3) == CopyEvidence(COPIED_FROM_PROMPT, 3)
    assert written_copy(Outlook(NGRAM_COPY), 3) is None
