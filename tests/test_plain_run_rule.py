"""When the window says an adaptive run decoded (almost) plainly: few of its steps drafted and
few of its tokens came from drafts. A retry that copies its answer in three long passes drafts
in few steps but writes most of its text from drafts: nothing is missing from its views."""

from __future__ import annotations

from app.engine.trace import TraceHeader
from tests.helpers import step
from ui.run_data import KIND_SPECULATIVE, RunData, adaptive_ran_plainly


def adaptive_run(steps) -> RunData:
    run = RunData(KIND_SPECULATIVE, TraceHeader("t.gguf", "", "llamacpp", "cpu",
                                                {"adaptive": True}, {}))
    for s in steps:
        run.add(s)
    return run


def test_a_run_that_drafted_in_few_steps_and_few_tokens_ran_plainly():
    steps = [step(i, 0, []) for i in range(14)] + [step(14, 2, [True, False])]
    plain = adaptive_ran_plainly(adaptive_run(steps))
    assert plain is not None and plain.steps == 15 and plain.plain_steps == 14


def test_a_run_that_drafted_most_of_its_text_in_few_long_passes_did_not():
    steps = ([step(i, 30, [True] * 30) for i in range(3)]
             + [step(3 + i, 0, []) for i in range(12)])
    run = adaptive_run(steps)
    assert run.stats.spec_steps * 4 < run.stats.steps  # few steps drafted...
    assert adaptive_ran_plainly(run) is None  # ...but 90 of its 105 tokens were drafts
