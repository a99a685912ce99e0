"""A copied draft priced from what it knows before it is judged: its source, its match and
where its source went on in more than one way (app.engine.estimates), through the drafters'
outlooks and the controller, with the decision recording what the audit needs to reproduce
it."""

from __future__ import annotations

from dataclasses import replace

from app.analysis.decision_audit import decision_problems
from app.analysis.reasons import describe_decision
from app.engine.adaptive import DraftLengthController
from app.engine.cost_curve import VerifyCostCurve
from app.engine.drafters import Outlook, written_copy
from app.engine.drafters.lookup import NGRAM_COPY, NGRAM_SELF, PromptLookup
from app.engine.drafters.suffix import SUFFIX_COPY, RememberedRun, SuffixDrafter, memory_buffer
from app.engine.estimates import SPLIT_RATES, CopyEvidence, copy_accept_at, measured_rate
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


def test_a_copy_from_memory_names_the_positions_where_its_source_went_two_ways():
    """Two earlier answers agree on a stretch, then differ (a field name): a copy of that
    stretch reports the split at the position where they part, and no split before it."""
    shared = [20, 21, 22, 23, 24, 25, 26, 27]
    memory = memory_buffer([RememberedRun(1, [*shared, 30, 31, 32, 33]),
                            RememberedRun(2, [*shared, 40, 41, 42, 43])])
    suffix = SuffixDrafter(memory)
    prompt = [1, 2, 3]
    suffix.begin(prompt)
    seen = suffix.outlook([*prompt, *shared[:6]])
    assert seen.copy is not None and seen.copy.source == COPIED_FROM_MEMORY
    assert seen.copy.splits == (2,)  # shared[6], shared[7], then 30 or 40
    # one earlier answer only: nothing went two ways
    alone = SuffixDrafter(memory_buffer([RememberedRun(1, [*shared, 30, 31, 32, 33])]))
    alone.begin(prompt)
    copy = alone.outlook([*prompt, *shared[:6]]).copy
    assert copy is not None and copy.splits == ()
    assert written_copy(seen, 4) == CopyEvidence(COPIED_FROM_MEMORY, 4, (2,))


def test_a_split_is_priced_at_its_measured_rate_and_the_draft_stops_before_it():
    """At a split the position is priced at the measured rate for such positions, whatever
    the kind learnt; on the steep curve the controller then drafts up to the split and not
    past it. Priced as any other position, it drafts past it."""
    split = CopyEvidence(COPIED_FROM_MEMORY, 24, (3,))
    priced = copy_accept_at(split, [0.97] * 8, 64.0)
    assert priced[3] == SPLIT_RATES[COPIED_FROM_MEMORY] and priced[2] > 0.9
    # a copy of the prompt is not priced so (no evidence that its splits break)
    assert copy_accept_at(CopyEvidence(COPIED_FROM_PROMPT, 24, (3,)), [0.97] * 8, 64.0)[3] > 0.9

    def decide(copy: CopyEvidence):
        ctl = controller()
        ctl.estimates[SUFFIX_COPY.name] = ctl.estimate(SUFFIX_COPY)
        for _ in range(8):  # the kind has learnt that its copies hold
            ctl.estimates[SUFFIX_COPY.name].observe([True] * 16)
        return ctl.decide(64, SUFFIX_COPY, 0, None, copy)

    at_split = decide(CopyEvidence(COPIED_FROM_MEMORY, 24, (3,)))
    unsplit = decide(CopyEvidence(COPIED_FROM_MEMORY, 24))
    assert 0 < at_split.k <= 3 < unsplit.k
    assert at_split.copy_splits == [3]
    assert decision_problems(at_split) == []
    assert any("does not follow from a copy" in p
               for p in decision_problems(replace(at_split, copy_splits=[])))
    assert "position 4" in describe_decision(replace(at_split, k=unsplit.k))
