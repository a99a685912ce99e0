"""How numbers and token texts are written in the UI (one place, so tests can compare)."""

from __future__ import annotations

import math

from app.engine.records import (
    COPIED_FROM_OUTPUT,
    COPIED_FROM_PROMPT,
    COPIED_ON_RETRY,
    CopySource,
    StepRecord,
    TokenRecord,
)

_VISIBLE = str.maketrans({" ": "␣", "\n": "↵", "\t": "⇥", "\r": "␍"})


def prob(value: float | None) -> str:
    """A probability: 4 decimals, or scientific notation when it would read as 0."""
    if value is None:
        return "—"
    if math.isinf(value):
        return "∞"
    if value != 0.0 and abs(value) < 1e-3:
        return f"{value:.2e}"
    return f"{value:.4f}"


def token(text: str | None) -> str:
    """A token's text with its whitespace made visible (a leading space matters)."""
    if text is None:
        return "—"
    return text.translate(_VISIBLE) if text else "∅"


def seconds_ms(value: float) -> str:
    return f"{value * 1000:.1f} ms"


def step_summary(step: StepRecord, total: int | None = None) -> str:
    """One line about a verify step, for the inspector's header."""
    of = f" / {total}" if total else ""
    if step.k == 0:
        head = f"Step {step.index + 1}{of} · plain (no draft)"
    elif step.is_tree:
        head = (f"Step {step.index + 1}{of} · tree of {step.k} nodes, depth "
                f"{step.draft_depth} · path of {step.n_accepted}")
    else:
        head = f"Step {step.index + 1}{of} · k = {step.k} · accepted {step.n_accepted}"
        if step.stop_chance is not None:
            head += (f" · ended on the draft's confidence (all pass: {prob(step.stop_chance)};"
                     " no longer draft would pay)")
        if step.pads:
            head += (f" · pass padded to {step.n_pass} tokens ({step.pads} filler, never "
                     "judged: that size was priced cheaper)")
    return (
        f"{head} · +{len(step.emitted)} token{'s' if len(step.emitted) != 1 else ''} · "
        f"draft {seconds_ms(step.t_draft)} · verify {seconds_ms(step.t_verify)} · "
        f"overhead {seconds_ms(step.t_overhead)}"
    )


def token_tooltip(record: TokenRecord | None, origin: str, step: StepRecord) -> str:
    """What hovering a token shows: its p, q, p/q, u and the decision on it."""
    if record is None:
        lines = [f"<b>{origin}</b> token of step {step.index + 1}"]
        if origin == "bonus":
            lines.append("every draft token passed; the target adds one more from p")
        elif origin == "plain":
            lines.append("plain target decoding (no draft this step)")
        return "<br>".join(lines)
    if origin == "replacement":
        first = (f"<b>{_html(token(record.replacement_text))}</b> · the target's replacement "
                 f"for the rejected draft token <b>{_html(token(record.text))}</b>")
    else:
        heading = "rejected draft token" if origin == "rejected draft" else "accepted draft token"
        first = f"<b>{_html(token(record.text))}</b> · {heading}"
    lines = [first,
             f"step {step.index + 1}, draft position {record.pos - step.tokens[0].pos + 1}"]
    lines.append(f"q (draft) = {prob(record.q)}")
    lines.append(f"p (target) = {prob(record.p)}")
    lines.append(f"p/q = {prob(record.ratio)} → min(1, p/q) = {prob(record.acceptance_chance)}")
    lines.append(f"u = {prob(record.u)}" if record.u is not None else "u: none (greedy)")
    if record.accepted:
        lines.append("decision: <b>accepted</b>")
    else:
        lines.append(
            f"decision: <b>rejected</b> → target wrote "
            f"<b>{_html(token(record.replacement_text))}</b>"
            + (" (from the residual max(0, p−q))" if record.residual_used else "")
        )
    return "<br>".join(lines)


def _html(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def drafted_from(record: TokenRecord) -> str:
    """What proposed a draft token, where the drafter says more than its name: a suffix copy's
    source, or the MTP head (counted from 1; the trace counts from 0)."""
    if record.copied_from is not None:
        return copy_source(record.copied_from)
    return f"MTP head {record.head + 1}" if record.head is not None else ""


def copy_source(source: CopySource | None) -> str:
    """Where suffix decoding copied a draft token from: "run 12 · 7 of 9"; "" for a draft
    that was not copied."""
    if source is None:
        return ""
    if source.kind == COPIED_ON_RETRY:
        return f"retry of run {source.run}"
    return f"{_copied_where(source)} · {source.count} of {source.of}"


def drafted_from_detail(record: TokenRecord) -> str:
    """drafted_from in a sentence, for the cell's tooltip."""
    source = record.copied_from
    if source is None:
        return (f"proposed by the target's own MTP head {record.head + 1}"
                if record.head is not None else "")
    if source.kind == COPIED_ON_RETRY:
        return (f"run {source.run}'s answer to this same prompt (a retry), copied while this "
                "output follows it")
    matched = f"the last {source.match} tokens" if source.match else "the matched text"
    where = "the prompt" if source.kind == COPIED_FROM_PROMPT else _copied_where(source)
    return (f"copied from {where}: {source.count} of the {source.of} "
            f"continuations of {matched} found there went on with this token")


def _copied_where(source: CopySource) -> str:
    return {COPIED_FROM_PROMPT: "prompt", COPIED_FROM_OUTPUT: "this output"}.get(
        source.kind, f"run {source.run}" if source.run is not None else source.kind)
