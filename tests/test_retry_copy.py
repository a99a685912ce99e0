"""A retried request drafts the answer its prompt got before
(app.engine.drafters.suffix.retry_copy): a unit check of following and departing, and end to
end on a tiny real model through the draft memory file, as the app runs it."""

from __future__ import annotations

import pytest

from app.engine.adaptive import DraftLengthController
from app.engine.cost_curve import VerifyCostCurve
from app.engine.decode_config import DecodeConfig, DrafterChoice, DrafterOptions, TreeShape
from app.engine.drafters import Budget
from app.engine.drafters.suffix import SUFFIX_COPY, SuffixDrafter
from app.engine.drafters.suffix.retry_copy import RETRY_COPY, EarlierAnswer, RetryCopy
from app.engine.records import COPIED_FROM_MEMORY, COPIED_ON_RETRY, CopySource
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.models.loading import ModelSpec, load_pair
from app.runs import PairSources, new_drafter, remember_output
from ui.format import copy_source

PROMPT = [1, 2, 3]
ANSWER = EarlierAnswer(run=7, tokens=[5, 6, 7, 8])


def test_a_retry_copy_follows_the_answer_and_is_over_at_the_first_token_that_departs():
    copy = RetryCopy([ANSWER], len(PROMPT))
    seen = copy.outlook(PROMPT)
    assert seen is not None and seen.kind is RETRY_COPY
    assert (seen.copied, seen.available) == (0, 4)
    assert copy.draft(PROMPT, 2) == ([5, 6], CopySource(kind=COPIED_ON_RETRY, run=7, match=3))
    context = [*PROMPT, 5, 6]
    seen = copy.outlook(context)
    assert seen is not None and (seen.copied, seen.available) == (2, 2)
    assert copy.draft(context, 8) == ([7, 8], CopySource(kind=COPIED_ON_RETRY, run=7, match=5))
    assert copy.outlook([*PROMPT, 5, 6, 7, 8]) is None  # the answer is used up
    assert copy.draft([*PROMPT, 5, 6, 7, 8], 2) is None
    departed = RetryCopy([ANSWER], len(PROMPT))
    assert departed.outlook([*PROMPT, 5, 9]) is None
    assert departed.outlook([*PROMPT, 5, 9, 7]) is None  # over for the rest of the run


def test_a_retry_copy_goes_on_with_an_older_answer_where_the_latest_stops_or_departs():
    stopped_early = EarlierAnswer(run=9, tokens=[5, 6])
    sampled = EarlierAnswer(run=8, tokens=[5, 9, 9, 9])
    copy = RetryCopy([stopped_early, sampled, ANSWER], len(PROMPT))
    assert copy.outlook(PROMPT) is not None
    # the latest first
    assert copy.draft(PROMPT, 1) == ([5], CopySource(kind=COPIED_ON_RETRY, run=9, match=3))
    context = [*PROMPT, 5, 6]
    seen = copy.outlook(context)
    assert seen is not None and (seen.copied, seen.available) == (2, 2)
    assert copy.draft(context, 4) == ([7, 8], CopySource(kind=COPIED_ON_RETRY, run=7, match=5))


def test_the_suffix_drafter_drafts_a_retry_ahead_of_its_matches_and_says_where_from():
    drafter = SuffixDrafter(recall=lambda ids: [ANSWER] if list(ids) == PROMPT else [])
    drafter.begin(PROMPT)
    assert drafter.outlook(PROMPT).kind is RETRY_COPY
    draft = drafter.propose(PROMPT, Budget(3), SamplingParams(), None)  # type: ignore[arg-type]
    assert draft.tokens == [5, 6, 7]
    assert draft.copied_from == [CopySource(kind=COPIED_ON_RETRY, run=7, match=3)] * 3
    assert copy_source(draft.copied_from[0]) == "retry of run 7"
    assert copy_source(CopySource(kind=COPIED_FROM_MEMORY, run=7, count=2, of=5)) == \
        "run 7 · 2 of 5"  # a copy of an answer to another prompt
    tree = drafter.propose_tree(PROMPT, 4, TreeShape(2, 3), SamplingParams(), None)  # type: ignore[arg-type]
    assert tree.tokens == [5, 6, 7] and tree.parents == [-1, 0, 1]  # within --tree-nodes
    other = [1, 2, 4]
    drafter.begin(other)
    assert drafter.outlook(other).kind is not RETRY_COPY


def memory_config(path, n_predict: int, tree_width: int = 1) -> DecodeConfig:
    return DecodeConfig(n_predict=n_predict, draft_max=8, tree_width=tree_width,
                        drafter=DrafterChoice(("suffix",), DrafterOptions(memory=str(path))))


@pytest.mark.parametrize("tree_width", [1, 2])
def test_a_retried_prompt_drafts_its_earlier_answer_whole_and_writes_plain_output(
        gguf_files, tmp_path, tree_width):
    pair = load_pair(ModelSpec(str(gguf_files[0])))
    try:
        config = memory_config(tmp_path / "m.json", n_predict=40, tree_width=tree_width)
        prompt = pair.target.tokenize("the cat sat on")
        plain = Session(pair.target, None, config)
        list(plain.steps(prompt))
        first = Session(pair.target, new_drafter(pair, config), config)
        list(first.steps(prompt))
        remember_output(pair, first, prompt)
        assert len(PairSources(pair).answers_to(str(tmp_path / "m.json"), prompt)) == 1
        retry = Session(pair.target, new_drafter(pair, config), config)
        steps = list(retry.steps(prompt))
        assert retry.output_ids == first.output_ids == plain.output_ids
        tokens = [t for s in steps for t in s.tokens]
        on_retry = [t for t in tokens if t.copied_from and t.copied_from.kind == COPIED_ON_RETRY]
        # the first pass already drafts from the answer, and every retry token passes
        assert steps[0].decision is not None and steps[0].decision.kind == RETRY_COPY.name
        assert [t.copied_from for t in steps[0].tokens] == [
            CopySource(kind=COPIED_ON_RETRY, run=1, match=len(prompt))] * config.draft_max
        assert all(t.accepted for t in on_retry)
        assert len(on_retry) >= len(first.output_ids) - config.draft_max
        # a benchmark that keeps a prompt from its own answers keeps it from the retry copy too
        kept_apart = new_drafter(pair, config, avoid_prompt=prompt)
        assert isinstance(kept_apart, SuffixDrafter)
        kept_apart.begin(prompt)
        assert kept_apart.outlook(list(prompt)).kind is not RETRY_COPY
    finally:
        pair.close()


def test_a_retry_drafts_long_from_its_first_pass_where_a_suffix_copy_waits_for_verdicts():
    """On the demo target's curve (2 threads; a 32-token pass costs 6.3 plain steps) the
    retry's prior buys a long first pass; a suffix copy, at even odds, a short one."""
    curve = {1: 0.0868, 2: 0.1193, 4: 0.1245, 8: 0.2509, 16: 0.3096, 32: 0.5502, 64: 1.0074}
    controller = DraftLengthController(64, adaptive=True, curve=VerifyCostCurve(curve))
    assert controller.decide(200, RETRY_COPY, 0, 120).k >= 16
    assert controller.decide(200, SUFFIX_COPY, 0, 120).k <= 4
