"""Why the controller chose each step's k, in words, from the Decision it recorded then.

Nothing here estimates or guesses: every figure in a sentence is a field of a recorded
Decision (app.engine.records), or a count over the run's step records (how many steps drafted,
how many draft tokens were judged and accepted). A step without a decision (a trace written
before decisions were recorded) is said to have none.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from app.engine.estimates import SPLIT_RATES
from app.engine.records import (
    RULE_BEST_RATE,
    RULE_END_OF_OUTPUT,
    RULE_FIXED,
    RULE_MEASURE,
    RULE_NO_GAIN,
    RULE_NOTHING_TO_DRAFT,
    RULE_PROBE,
    Decision,
    StepRecord,
)

# each rule in a few words, for counts ("why steps did not draft")
RULE_WORDS = {
    RULE_FIXED: "fixed k (adaptive k off)",
    RULE_NOTHING_TO_DRAFT: "the drafter had nothing to offer",
    RULE_END_OF_OUTPUT: "one token or none left to write",
    RULE_BEST_RATE: "the best expected rate",
    RULE_NO_GAIN: "no k beat plain decoding by the margin asked",
    RULE_PROBE: "a probe, to measure acceptance",
    RULE_MEASURE: "a pass timed, to price it from enough samples",
}
NO_DECISION = "no decision recorded"


def _ms(seconds: float | None) -> str:
    return f"{seconds * 1000:.1f} ms" if seconds is not None else "?"


def _x(ratio: float | None) -> str:
    """A speed ratio: two decimals, or two significant digits where those would read 0.00."""
    if ratio is None:
        return "?"
    return f"{ratio:.2f}×" if ratio >= 0.095 else f"{ratio:.2g}×"


def priced_acceptance(d: Decision) -> str:
    """How the decision priced acceptance: "0.60 (its prior; no draft tokens seen yet)",
    "0.91 (from 10 draft tokens seen, interval 0.62–0.99; prior 0.60)"."""
    if d.acceptance is None:
        return "?"
    rate = f"{d.acceptance:.2f}"
    if d.evidence == 0:
        return rate + " (its prior; no draft tokens seen yet)"
    seen = f"{d.evidence} draft token{'s' if d.evidence != 1 else ''} seen"
    if d.acceptance_low is not None and d.acceptance_high is not None:
        seen += f", interval {d.acceptance_low:.2f}–{d.acceptance_high:.2f}"
    if d.prior is not None:
        at_prior = abs(d.acceptance - d.prior) < 0.005
        seen += "; still its prior" if at_prior else f"; prior {d.prior:.2f}"
    return f"{rate} (from {seen})"


def _positions(d: Decision, k: int) -> str:
    """The per-position acceptance E(k) was priced from, where it differs from the pooled
    rate: ", by position 0.95, 0.91, 0.88"."""
    shown = d.accept_at[:k]
    if not shown or d.acceptance is None or all(abs(a - d.acceptance) < 0.005 for a in shown):
        return ""
    return ", by position " + ", ".join(f"{a:.2f}" for a in shown) + _splits(d, len(shown))


def _splits(d: Decision, k: int) -> str:
    """Where the copied text had gone on in more than one way, among the first k positions
    (priced so: app.engine.estimates.SPLIT_RATES)."""
    if d.copy_source not in SPLIT_RATES:
        return ""
    at = [j + 1 for j in d.copy_splits or () if j < k]
    if not at:
        return ""
    where = ", ".join(str(j) for j in at)
    return (f" (where it was copied from, the text had gone on in more than one way at "
            f"position{'s' if len(at) > 1 else ''} {where})")


def _conditions(d: Decision) -> str:
    """A busy machine or refused samples, where a decision's prices met them."""
    notes = []
    if d.busy:
        notes.append("the machine was busy: these prices may not hold on a quiet one")
    if d.refused:
        notes.append(f"{d.refused} stalled pass timing{'s' if d.refused != 1 else ''} refused")
    if d.plain_samples == 0 and d.plain_seconds is not None:
        notes.append("the plain step priced from the curve stored from earlier quiet runs")
    return (" (" + "; ".join(notes) + ")") if notes else ""


def _tokens(expected: float | None) -> str:
    return f" for {expected:.2f} expected tokens" if expected is not None else ""


def _pass_of(expected: float | None, seconds: float | None) -> str:
    """" (2.41 expected tokens in a 190.0 ms pass)" where the decision priced them."""
    if expected is None or seconds is None:
        return ""
    return f" ({expected:.2f} expected tokens in a {_ms(seconds)} pass)"


def _padded(d: Decision) -> str:
    """" Priced as a pass of 4 tokens, filler after the draft that is never judged: 107.0 ms,
    below 117.8 ms at its own size." where the decision priced the pass padded (the pass that
    ran, and its filler, are the step's: a draft may end shorter or longer than k)."""
    if d.padded_to is None:
        return ""
    return (f" Priced as a pass of {d.padded_to} tokens, filler after the draft that is "
            f"never judged: {_ms(d.pass_seconds)}, below {_ms(d.unpadded_seconds)} at its own "
            "size.")


def _margin(d: Decision) -> str:
    if d.min_gain is None:
        return "plain decoding"
    return f"the {_x(d.min_gain)} it asks of a draft"


def describe_decision(d: Decision | None) -> str:
    """One or two sentences: the rule that fired and the figures it compared."""
    if d is None:
        return NO_DECISION
    kind = f" ({d.kind})" if d.kind else ""
    if d.rule == RULE_FIXED:
        text = (f"k = {d.k}: fixed draft length (adaptive k is off: each step drafts the "
                "configured length, or less where less is left to write or to draft).")
        if d.gain is None:
            return text
        verdict = f"{_x(d.gain)} plain decoding"
        if 0 < d.gain < 1.0:
            verdict += f" (plain decoding {_x(1 / d.gain)} as fast)"
        return (text + f" Priced at {verdict}: acceptance {priced_acceptance(d)}"
                f"{_positions(d, d.k)}, this pass {_ms(d.pass_seconds)}"
                f"{_tokens(d.expected_tokens)} against a plain step priced at "
                f"{_ms(d.plain_seconds)}{_conditions(d)}.{_padded(d)}")
    if d.rule == RULE_NOTHING_TO_DRAFT:
        return f"k = 0: the drafter{kind} had nothing to offer at this point."
    if d.rule == RULE_END_OF_OUTPUT:
        return "k = 0: one token or none left to write, so there was nothing to verify."
    if d.rule == RULE_MEASURE:
        what = ("a plain step" if d.k == 0 else f"a {d.measuring}-token pass")
        if d.samples is None or d.measuring is None:
            return f"k = {d.k}: timing {what}, to price it."
        return (f"k = {d.k}{kind}: timing {what}, to price it from the median of several: "
                f"{d.samples} kept so far ({d.plain_samples} plain "
                f"step{'s' if d.plain_samples != 1 else ''}){_conditions(d)}.")
    costs = f"a plain step priced at {_ms(d.plain_seconds)}{_conditions(d)}"
    if d.rule == RULE_NO_GAIN:
        priced = _pass_of(d.alternative_tokens, d.alternative_seconds)
        best = (f"the best draft, k = {d.alternative_k}, was priced at "
                f"{_x(d.alternative_gain)} plain{priced}" if d.alternative_k
                else "no draft length paid")
        return (f"k = 0: plain decoding{kind} — {best}, short of {_margin(d)}; acceptance "
                f"priced at {priced_acceptance(d)}{_positions(d, d.alternative_k or 0)}, "
                f"{costs}.")
    if d.rule == RULE_PROBE:
        if d.gain is not None and d.gain >= 1.0:
            priced = (f"drafting was priced {_x(d.gain)} plain, short of {_margin(d)}")
        else:
            priced = f"plain decoding was priced faster (this k at {_x(d.gain)} plain)"
        catch_up = (f", and its draft first reads what the target wrote since it last "
                    f"drafted, priced at {_ms(d.catch_up_seconds)}" if d.catch_up_seconds else "")
        return (f"k = {d.k}: a probe{kind} — {priced}, but only drafting corrects an "
                f"acceptance estimate; acceptance priced at {priced_acceptance(d)}"
                f"{_positions(d, d.k)}, this pass {_ms(d.pass_seconds)}"
                f"{_tokens(d.expected_tokens)} against {costs}{catch_up}.{_padded(d)}")
    if d.rule == RULE_BEST_RATE:
        other = (f"; next best k = {d.alternative_k} at {_x(d.alternative_gain)}"
                 if d.alternative_k is not None else "")
        stop = (f" The draft may run to {d.stop_limit} tokens, ending where the draft "
                "model's confidence says no longer draft would pay for its time."
                if d.stop_limit else "")
        return (f"k = {d.k}{kind}: the best expected rate, {_x(d.gain)} plain decoding "
                f"(≥ {_margin(d)}){other}; acceptance priced at {priced_acceptance(d)}"
                f"{_positions(d, d.k)}, "
                f"this pass {_ms(d.pass_seconds)}{_tokens(d.expected_tokens)} against "
                f"{costs}.{_padded(d)}{stop}")
    return f"k = {d.k}: rule {d.rule!r}."


@dataclass
class DecisionCounts:
    """The steps of a run by the rule that chose their k."""

    steps: int = 0
    drafted: int = 0  # steps with k > 0
    judged: int = 0  # draft tokens judged over the run
    accepted: int = 0
    by_rule: Counter[str] = field(default_factory=Counter)  # every step, NO_DECISION included
    plain_by_rule: Counter[str] = field(default_factory=Counter)  # steps with k = 0

    @property
    def plain(self) -> int:
        return self.steps - self.drafted


def count_decisions(steps: list[StepRecord]) -> DecisionCounts:
    counts = DecisionCounts()
    for step in steps:
        rule = step.decision.rule if step.decision is not None else NO_DECISION
        counts.steps += 1
        counts.by_rule[rule] += 1
        if step.k > 0:
            counts.drafted += 1
            outcomes = step.depth_outcomes()
            counts.judged += len(outcomes)
            counts.accepted += sum(outcomes)
        else:
            counts.plain_by_rule[rule] += 1
    return counts


def last_decision(steps: list[StepRecord], rule: str) -> StepRecord | None:
    """The last step whose decision fired `rule`: the controller's latest figures for it."""
    return next((s for s in reversed(steps) if s.decision and s.decision.rule == rule), None)


def _drafts_seen(c: DecisionCounts) -> str:
    if c.judged == 0:
        return "no draft token was judged"
    if c.accepted == c.judged:
        return (f"all {c.judged} draft token{'s' if c.judged != 1 else ''} it tried "
                f"{'were' if c.judged != 1 else 'was'} accepted")
    return f"{c.accepted} of the {c.judged} draft tokens it tried were accepted"


def plain_run_reason(steps: list[StepRecord]) -> str:
    """Why an adaptive run drafted in few of its steps, from its recorded decisions: the
    summary, then the figures of its last decision that no draft paid."""
    text = plain_run_summary(steps)
    latest = last_decision(steps, RULE_NO_GAIN)
    if latest is not None and latest.decision is not None:
        text += " " + _no_gain_detail(latest, count_decisions(steps))
    return text


def plain_run_summary(steps: list[StepRecord]) -> str:
    """How often an adaptive run drafted, and by which rules it decoded the other steps
    plainly (each step's own figures are its reason line)."""
    c = count_decisions(steps)
    head = f"Adaptive k drafted in {c.drafted} of {c.steps} steps"
    if c.drafted:
        head += f" ({_drafts_seen(c)})"
    undecided = c.plain_by_rule.get(NO_DECISION, 0)
    if undecided == c.plain:
        return (head + ". Its steps record no decisions, so DraftLens cannot say why (traces "
                "written before decisions were recorded have none).")
    parts = [f"{n} {'step' if n == 1 else 'steps'}: {RULE_WORDS.get(rule, rule)}"
             for rule, n in c.plain_by_rule.most_common() if rule != NO_DECISION]
    if undecided:
        parts.append(f"{undecided} without a recorded decision")
    return f"{head}. It decoded {c.plain} plainly — " + "; ".join(parts) + "."


def _no_gain_detail(step: StepRecord, c: DecisionCounts) -> str:
    d = step.decision
    assert d is not None
    if d.evidence:
        seen = (f"with {d.evidence} draft token{'s' if d.evidence != 1 else ''} seen it "
                f"priced acceptance at {d.acceptance:.2f}" if d.acceptance is not None
                else "")
        if d.prior is not None and d.acceptance is not None:
            seen += (" (still its prior)" if abs(d.acceptance - d.prior) < 0.005
                     else f" (its prior {d.prior:.2f})")
        if d.acceptance_low is not None and d.acceptance_high is not None:
            seen += f", interval {d.acceptance_low:.2f}–{d.acceptance_high:.2f}"
    else:
        seen = (f"with no draft token seen it priced acceptance at its prior, "
                f"{d.acceptance:.2f}" if d.acceptance is not None else "")
    best = (f"the best draft length, k = {d.alternative_k}, at {_x(d.alternative_gain)} "
            "plain decoding" if d.alternative_k else "no draft length above plain decoding")
    cost = _pass_of(d.alternative_tokens, d.alternative_seconds)
    return (f"At its last such decision (step {step.index + 1}) {seen}; that made {best}"
            f"{cost}, short of the {_x(d.min_gain)} it asks of a draft at this pass cost "
            f"(a plain step {_ms(d.plain_seconds)}).")


def best_alternative_k(steps: list[StepRecord]) -> int | None:
    """The draft length the controller last priced best when it decoded plainly."""
    latest = last_decision(steps, RULE_NO_GAIN)
    if latest is None or latest.decision is None:
        return None
    return latest.decision.alternative_k or None


def _rule_words(rule: str) -> str:
    if rule == NO_DECISION:
        return "(a trace written before decisions were recorded)"
    return RULE_WORDS.get(rule, "")


def reason_lines(steps: list[StepRecord]) -> list[str]:
    """Counts by rule, for `draftlens trace FILE --analysis`."""
    c = count_decisions(steps)
    if not c.steps:
        return []
    lines = [f"why each step's k (the controller's recorded decisions): {c.drafted} of "
             f"{c.steps} steps drafted"]
    if c.plain:
        lines.append(f"steps that did not draft ({c.plain}), by reason:")
        for rule, n in c.plain_by_rule.most_common():
            lines.append(f"  {n:5d}  {rule:<17} {_rule_words(rule)}")
    if c.drafted:
        lines.append("steps that drafted, by reason:")
        drafted = c.by_rule - c.plain_by_rule
        for rule, n in drafted.most_common():
            lines.append(f"  {n:5d}  {rule:<17} {_rule_words(rule)}")
    latest = last_decision(steps, RULE_NO_GAIN)
    if latest is not None:
        lines.append(f"last plain decision (step {latest.index + 1}): "
                     + describe_decision(latest.decision))
    return lines


def machine_note(steps: list[StepRecord]) -> str:
    """What the status bar says of the machine while a run decodes, from its step records:
    "machine busy: decoding on 1 of 2 threads", "machine busy", or "" (its cores are free)."""
    if not steps:
        return ""
    switch = next((s.threads for s in reversed(steps) if s.threads is not None), None)
    if switch is not None and switch.threads < switch.of:
        return f"machine busy: decoding on {switch.threads} of {switch.of} threads"
    return "machine busy" if steps[-1].busy else ""
