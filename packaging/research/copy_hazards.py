"""What a copied draft's own tokens say about where it breaks, and whether pricing by it moves
the copy bars (copy_bars.py): three measured negatives, kept so they can be checked again.

1. Hazards. Over every copy the app's suffix drafter offers in the recordings (drafted 64 deep,
   as replay_suffix.agreement), the share of draft tokens rejected once reached, per copy
   source and per token: its lexical class (space, punctuation, word, number, string) and,
   for a content token (word, number, string), whether it is new to this request (in neither
   the prompt, the output so far nor the draft before it). A copy of an earlier answer breaks
   at a content token new to the request about half the time, elsewhere about one in ten.
   Beside them: of the copies with 16 tokens to offer, how many agreed for all 16 (per source,
   and whether a new content token lay among them), and the draft tokens that hold a quoted
   code fence's backticks, with what the target wrote in their place.
2. Calibration: over the app's own replayed drafting passes, per kind and draft length, the
   tokens each pass was expected to write (its Decision's expected_tokens) against what it
   wrote. Where they agree, the controller prices as well as its figures allow, and what it
   leaves of the oracle's gain is in which copies hold, not in the level of its prices.
3. Replays of three controllers beside the app's, on the same drafts and curve, as a share of
   the oracle controller's gain (copy_bars.suite_figures):
   - "token class": each position priced at its source's and token class's rate, fitted to the
     very recordings it is scored on (an upper bound for such a table), in place of the run
     rates (app.engine.estimates.RATES) in the app's blend with what the run learnt;
   - "new token": the app's pricing, with a copy of an earlier answer priced at NEW_TOKEN_RATE
     at a content token new to the request (and beyond it, as a chain multiplies);
   - "long-run rate": the app's pricing, k chosen to maximise E(k) - r * time(k) with r the
     run's own tokens per second so far (the renewal-reward rule), not E(k) / time(k).

  PYTHONPATH=. python packaging/research/copy_hazards.py [--curve CURVE.json]
"""

from __future__ import annotations

import argparse
import functools
import json
import re
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import copy_bars  # noqa: E402
from replay_lookup import add_curve_option, use_curve  # noqa: E402
from replay_suffix import (  # noqa: E402
    GREEDY,
    RNG,
    agreeing,
    at_every_position,
    load_limit,
    suite_replays,
)
from suffix_variants import VARIANTS, variant  # noqa: E402

import app.engine.adaptive as adaptive  # noqa: E402
from app.engine.adaptive import DraftLengthController, PassOutcome  # noqa: E402
from app.engine.drafters import Budget, DraftKind, Outlook  # noqa: E402
from app.engine.drafters.suffix import SuffixDrafter  # noqa: E402
from app.engine.estimates import SPLIT_RATES, copy_accept_at  # noqa: E402
from app.engine.pass_pricing import Pricing  # noqa: E402
from app.engine.records import COPIED_FROM_MEMORY  # noqa: E402

_APP_PAYING_K = adaptive.paying_k
CONTENT = ("word", "number", "string")
NEW_TOKEN_RATE = 0.5  # about the measured hazard of such tokens in the repetitive session
SHARED = ("repetitive", "edit", "verbatim")


@functools.cache
def vocabulary() -> dict[int, str]:
    """The texts of the tokens in the recordings (their vocabulary sidecars)."""
    texts: dict[int, str] = {}
    for recording in set(copy_bars.RECORDINGS.values()):
        sidecar = json.loads(recording.with_suffix(".vocab.json").read_text())
        texts.update({int(t): s for t, s in sidecar["texts"].items()})
    return texts


def token_class(token: int) -> str:
    text = vocabulary().get(token, "")
    if not text.strip():
        return "space"
    if re.fullmatch(r"\s*\d.*", text):
        return "number"
    if re.fullmatch(r"\s*[A-Za-z_]\w*", text):
        return "word"
    if re.fullmatch(r"\s*[\"'`].*", text):
        return "string"
    return "punctuation"


def new_content(tokens: Sequence[int], known: set[int]) -> list[bool]:
    """Per draft token: a content token in neither `known` nor the draft before it."""
    seen, new = set(known), []
    for token in tokens:
        new.append(token not in seen and token_class(token) in CONTENT)
        seen.add(token)
    return new


def copies(suite: str) -> list[dict[str, Any]]:
    """Every copy the app's drafter offers in the suite's recording: its source, 64-token
    draft (cut to what it may take), agreement with the output, and which tokens are new."""
    recording = copy_bars.RECORDINGS[suite]
    rows = [row for row in json.loads(recording.read_text()) if row["suite"] == suite]

    def measure(drafter: SuffixDrafter, context: list[int], output: list[int],
                done: int) -> dict[str, Any] | None:
        outlook = drafter.outlook(context)
        if outlook.copy is None:
            return None
        # as a session cuts a draft: what is left of the output, less the pass's own token
        available = min(64 if outlook.available is None else outlook.available,
                        len(output) - done - 1)
        draft = drafter.propose(context, Budget(64), GREEDY, RNG).tokens[:available]
        agree = agreeing(draft, output, done)
        return {"source": outlook.copy.source, "draft": draft, "agree": agree,
                "new": new_content(draft, set(context)),
                "wrote": output[done + agree] if agree < len(draft) else None}
    found = at_every_position(rows, "app", load_limit(recording), 64, measure)
    return [copy for task in found for copy in task if copy is not None]


def hazards(found: list[dict[str, Any]]) -> dict[tuple[str, str], tuple[int, int]]:
    """Per (source, token class or "new <class>"): draft tokens reached, of them rejected."""
    reached: Counter[tuple[str, str]] = Counter()
    rejected: Counter[tuple[str, str]] = Counter()
    for copy in found:
        for j, (token, new) in enumerate(zip(copy["draft"], copy["new"], strict=True)):
            key = (copy["source"], ("new " if new else "") + token_class(token))
            reached[key] += 1
            if j == copy["agree"]:
                rejected[key] += 1
                break
    return {key: (reached[key], rejected[key]) for key in reached}


def holding(found: list[dict[str, Any]], length: int = 16
             ) -> dict[tuple[str, bool], tuple[int, int]]:
    """Per (source, whether a content token new to the request lies among the first `length`
    draft tokens): the copies with `length` tokens to offer, of them agreeing for all."""
    counts: dict[tuple[str, bool], tuple[int, int]] = {}
    for copy in found:
        if len(copy["draft"]) >= length:
            key = (copy["source"], any(copy["new"][:length]))
            copies_, held = counts.get(key, (0, 0))
            counts[key] = (copies_ + 1, held + (copy["agree"] >= length))
    return counts


def fence_tokens(found: list[dict[str, Any]]) -> tuple[int, int, Counter[str]]:
    """Draft tokens that hold a code fence's backticks (two or more): how many were reached,
    how many rejected, and what the target wrote in their place."""
    reached, rejected, wrote = 0, 0, Counter[str]()
    for copy in found:
        for j, token in enumerate(copy["draft"][: copy["agree"] + 1]):
            if "``" in vocabulary().get(token, ""):
                reached += 1
                if j == copy["agree"]:
                    rejected += 1
                    wrote[vocabulary().get(copy["wrote"], "?")] += 1
    return reached, rejected, wrote


def calibration(suite: str) -> dict[tuple[str, str], tuple[int, float, int]]:
    """Per (kind, draft length 1-3 / 4-15 / 16+): the app's drafting passes in a replay of the
    suite, the tokens their decisions expected them to write, and the tokens they wrote."""
    recording = copy_bars.RECORDINGS[suite]
    rows = [row for row in json.loads(recording.read_text()) if row["suite"] == suite]
    found: dict[tuple[str, str], tuple[int, float, int]] = {}
    for _, passes in suite_replays(rows, "app", load_limit(recording), 64):
        for step in passes:
            expected = step.decision.expected_tokens
            if step.drafted and expected is not None:
                length = "1-3" if step.drafted <= 3 else "4-15" if step.drafted <= 15 else "16+"
                key = (step.decision.kind, length)
                counted, priced, wrote = found.get(key, (0, 0.0, 0))
                found[key] = (counted + 1, priced + expected, wrote + step.kept + 1)
    return found


# -- the replayed controllers: a drafter that shows its draft to its controller --

class ShowingDrafter(SuffixDrafter):
    """The app's drafter, whose outlook also leaves the copy's draft and context for the
    controller that prices it (a replay's shortcut: the app's Outlook carries no tokens)."""

    shown: dict[str, Any] = {}

    def outlook(self, context: list[int]) -> Outlook:
        seen = super().outlook(context)
        ShowingDrafter.shown = {} if seen.copy is None else {
            "tokens": self.propose(context, Budget(64), GREEDY, RNG).tokens,
            "known": set(context)}
        return seen


class ByTokenClass(DraftLengthController):
    rates: dict[tuple[str, str], float] = {}

    def _pricing(self, kind: DraftKind, top: int, accept_at: Sequence[float] | None = None
                 ) -> Pricing:
        shown = ShowingDrafter.shown
        if accept_at is None and self._copy is not None and shown:
            estimate = self.estimate(kind)
            weight, evidence = self.options.copy_rate_tokens, estimate.pool_seen
            at_split = SPLIT_RATES.get(self._copy.source)
            priced = []
            for j, learnt in enumerate(estimate.accept_at[:top]):
                token = shown["tokens"][j] if j < len(shown["tokens"]) else None
                rate = (None if token is None
                        else self.rates.get((self._copy.source, token_class(token))))
                if at_split is not None and j in self._copy.splits:
                    priced.append(at_split)
                elif rate is None:
                    priced.append(learnt)
                else:
                    priced.append((weight * rate + evidence * learnt) / (weight + evidence))
            accept_at = priced
        return super()._pricing(kind, top, accept_at)


class NewTokenPriced(DraftLengthController):
    def _pricing(self, kind: DraftKind, top: int, accept_at: Sequence[float] | None = None
                 ) -> Pricing:
        shown = ShowingDrafter.shown
        if (accept_at is None and self._copy is not None and shown
                and self._copy.source == COPIED_FROM_MEMORY):
            estimate = self.estimate(kind)
            priced = copy_accept_at(self._copy, estimate.accept_at[:top], estimate.pool_seen,
                                    self.options)
            for j, new in enumerate(new_content(shown["tokens"], shown["known"])[:top]):
                if new:
                    priced[j] = min(priced[j], NEW_TOKEN_RATE)
            accept_at = priced
        return super()._pricing(kind, top, accept_at)


class LongRunRate(DraftLengthController):
    """k = argmax E(k) - r * time(k), r the run's tokens per second so far, among the k that
    beat plain decoding by min_gain (the app's own gate)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.written, self.seconds = 0.0, 0.0
        self.last: Pricing | None = None

    def _pricing(self, kind: DraftKind, top: int, accept_at: Sequence[float] | None = None
                 ) -> Pricing:
        self.last = super()._pricing(kind, top, accept_at)
        return self.last

    def observe(self, outcome: PassOutcome) -> str:
        if outcome.pass_tokens:
            self.written += sum(outcome.verdicts) + 1
            self.seconds += outcome.t_draft + outcome.t_verify
        return super().observe(outcome)

    def could_pay(self, *args: Any, **kwargs: Any) -> int:
        """A probe's check prices near-perfect acceptance: the app's rule, unpatched."""
        patched, adaptive.paying_k = adaptive.paying_k, _APP_PAYING_K
        try:
            return super().could_pay(*args, **kwargs)
        finally:
            adaptive.paying_k = patched

    def decide(self, *args: Any, **kwargs: Any) -> Any:
        chosen = adaptive.paying_k

        def by_long_run_rate(rates: np.ndarray, min_gain: float) -> int:
            priced = self.last
            if priced is None or len(priced.tokens) != len(rates):
                return chosen(rates, min_gain)
            rate = self.written / self.seconds if self.seconds else float(rates[0])
            net = priced.tokens - rate * np.asarray(priced.seconds)
            net[(rates < min_gain * rates[0]) & (np.arange(len(rates)) > 0)] = -np.inf
            return int(np.argmax(net))
        adaptive.paying_k = by_long_run_rate
        try:
            return super().decide(*args, **kwargs)
        finally:
            adaptive.paying_k = chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_curve_option(parser)
    args = parser.parse_args(argv)
    use_curve(args.curve)
    found = {suite: copies(suite) for suite in SHARED}
    print("| workload | source | token | reached | rejected | hazard |\n|---|---|---|---|---|---|")
    for suite, copied in found.items():
        for (source, kind), (reached, rejected) in sorted(hazards(copied).items()):
            print(f"| {suite} | {source} | {kind} | {reached} | {rejected} | "
                  f"{rejected / reached:.3f} |")
    print("\n| workload | source | a new word, number or string among the first 16 | "
          "copies with 16 tokens to offer | of them agreeing for 16 |\n|---|---|---|---|---|")
    for suite, copied in found.items():
        for (source, new), (offered, held) in sorted(holding(copied).items()):
            print(f"| {suite} | {source} | {'yes' if new else 'no'} | {offered} | "
                  f"{held} ({held / offered:.0%}) |")
    print("\n| workload | drafted tokens holding a code fence's backticks, reached | rejected | "
          "the target wrote instead |\n|---|---|---|---|")
    for suite, copied in found.items():
        reached, rejected, wrote = fence_tokens(copied)
        instead = ", ".join(f"{text!r} {n}" for text, n in wrote.most_common(4))
        print(f"| {suite} | {reached} | {rejected} | {instead} |")
    print("\n| workload | kind | draft length | passes | tokens expected a pass | written |"
          "\n|---|---|---|---|---|---|")
    for suite in SHARED:
        for (kind, length), (passes, expected, wrote) in sorted(calibration(suite).items()):
            print(f"| {suite} | {kind} | {length} | {passes} | {expected / passes:.2f} | "
                  f"{wrote / passes:.2f} |")
    fitted = Counter[tuple[str, str]](), Counter[tuple[str, str]]()
    for copied in found.values():
        for (source, kind), (reached, rejected) in hazards(copied).items():
            kind = kind.removeprefix("new ")
            fitted[0][(source, kind)] += reached
            fitted[1][(source, kind)] += rejected
    ByTokenClass.rates = {key: 1 - (fitted[1][key] + 1) / (n + 2)
                          for key, n in fitted[0].items()}
    VARIANTS["token class"] = variant(ShowingDrafter, ByTokenClass)
    VARIANTS["new token"] = variant(ShowingDrafter, NewTokenPriced)
    VARIANTS["long-run rate"] = variant(controller=LongRunRate)
    print(f"\ncurve: {args.curve or 'the demo target'}; share of the oracle's gain (the app, "
          "then each controller)\n")
    print(copy_bars.share_table(SHARED, ("app", "token class", "new token", "long-run rate")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
