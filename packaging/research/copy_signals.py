"""What else a copy could be priced by, besides its own tokens (copy_hazards.py), and whether
pricing by it moves the copy bars (copy_bars.py): three measured negatives, kept so they can be
checked again.

1. The target's confidence before the copy. Every output token the target wrote came with its
   distribution, so before a pass the controller could know how sure the target was of the
   tokens it just wrote (their top probability: `record` reads them once from the demo target
   over each recorded prompt and output, into docs/ablation-data/target-confidence.json).
   Per bin of the least sure of the last RECENT tokens, the copies the app's drafter offers
   with 16 tokens to offer: how many, the share rejected at their first token, the share
   agreeing for all 16. Then replayed: the app's pricing of a copy with every position's
   acceptance moved on the log-odds scale by SHIFT where the least sure of the last RECENT
   tokens is below LESS_SURE ("less sure"), or at least SURER ("surer").
2. Acceptance learnt per copy source: a copy's kind named after its source as well, so the
   controller keeps an estimate per kind and copy source (prompt, this output, an earlier
   answer), where the app keeps one per kind (a suffix copy of this output and one of an
   earlier answer share theirs).
3. A drafting pass's tail checked in shadow: where a free kind drafts k tokens and its drafter
   had more to offer, the draft's further tokens checked against the output once the pass
   accepted all k and the output reached them (as the declined drafts are,
   app.engine.session.ShadowCheck), their verdicts counted at their draft positions. Without
   them a position the controller never drafts is priced from the pool of the others.

Beside them a calibration point no run can have: the app's controller told, for each copy it
prices, whether its next FORESEEN tokens all agree with the output (one bit a pass; yes: they
are priced certain, no: the pass drafts fewer), to size what knowing which copies hold is worth.

  PYTHONPATH=. python packaging/research/copy_signals.py record   (runs the demo target)
  PYTHONPATH=. python packaging/research/copy_signals.py [--curve CURVE.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import copy_bars  # noqa: E402
from copy_hazards import SHARED  # noqa: E402
from replay_lookup import add_curve_option, use_curve  # noqa: E402
from replay_suffix import GREEDY, RNG, agreeing, at_every_position, load_limit  # noqa: E402
from suffix_variants import VARIANTS, variant  # noqa: E402

from app.engine.adaptive import DraftLengthController  # noqa: E402
from app.engine.drafters import Budget, Draft, DraftKind, Outlook  # noqa: E402
from app.engine.drafters.suffix import SuffixDrafter  # noqa: E402
from app.engine.estimates import copy_accept_at  # noqa: E402
from app.engine.pass_pricing import Pricing  # noqa: E402
from app.engine.sampling import SamplingParams  # noqa: E402
from app.engine.session import ShadowCheck  # noqa: E402

CONFIDENCE = copy_bars.DATA / "target-confidence.json"
RECENT = 4  # the last tokens whose least sure one bins a copy
LESS_SURE, SURER = 0.9, 0.999
SHIFT = 1.0  # log-odds
FORESEEN = 8  # the tokens a copy's one foreseen bit says whether it holds for


def record(out: Path) -> None:
    """Per recorded task, the demo target's top probability at each output token (the row that
    wrote it), from one pass over the prompt and the output."""
    from app.models.demo import demo_paths
    from app.models.loading import ModelSpec, load_pair

    target_path, _ = demo_paths()
    pair = load_pair(ModelSpec(str(target_path)))
    found: dict[str, dict[str, list[float]]] = {}
    for suite in SHARED:
        recording = copy_bars.RECORDINGS[suite]
        for row in json.loads(recording.read_text()):
            if row["suite"] != suite:
                continue
            pair.target.truncate(0)
            logits = pair.target.extend([*row["prompt"], *row["output"][:-1]],
                                        len(row["output"]))
            logits = logits - logits.max(axis=1, keepdims=True)
            top = 1.0 / np.exp(logits).sum(axis=1)
            found.setdefault(recording.name, {})[row["name"]] = [round(float(p), 5) for p in top]
            print(f"{row['name']}: {len(top)} tokens", file=sys.stderr)
    pair.close()
    out.write_text(json.dumps(found))


def confidence() -> dict[tuple[int, ...], list[float]]:
    """The recorded top probabilities, per task's prompt."""
    saved = json.loads(CONFIDENCE.read_text())
    by_prompt = {}
    for suite in SHARED:
        recording = copy_bars.RECORDINGS[suite]
        for row in json.loads(recording.read_text()):
            if row["suite"] == suite:
                by_prompt[tuple(row["prompt"])] = saved[recording.name][row["name"]]
    return by_prompt


def least_sure_bin(recent: Sequence[float]) -> str:
    """The bin of the least sure of the last tokens' top probabilities."""
    least = min(recent)
    return (f"< {LESS_SURE}" if least < LESS_SURE else f"{LESS_SURE} to {SURER}"
            if least < SURER else f"≥ {SURER}")


def confidence_table(suite: str, sure: dict[tuple[int, ...], list[float]]
                     ) -> dict[str, tuple[int, int, int]]:
    """Per bin of the least sure of the last RECENT tokens: the copies offered with 16 tokens
    to offer, of them rejected at their first token, and agreeing for all 16."""
    recording = copy_bars.RECORDINGS[suite]
    rows = [row for row in json.loads(recording.read_text()) if row["suite"] == suite]
    counts: dict[str, tuple[int, int, int]] = {}

    def measure(drafter: SuffixDrafter, context: list[int], output: list[int],
                done: int) -> None:
        if done < RECENT or drafter.outlook(context).copy is None:
            return
        draft = drafter.propose(context, Budget(16), GREEDY, RNG).tokens
        if len(draft) < 16 or done + 16 >= len(output):
            return
        key = least_sure_bin(sure[tuple(context[: len(context) - done])][done - RECENT : done])
        n, first, held = counts.get(key, (0, 0, 0))
        agree = agreeing(draft, output, done)
        counts[key] = (n + 1, first + (agree == 0), held + (agree >= 16))
    at_every_position(rows, "app", load_limit(recording), 16, measure)
    return counts


# -- the replayed controllers --

class Shown(SuffixDrafter):
    """The app's drafter, leaving what a replay's controller may read at each step: the step's
    context and the drafter, the target's top probabilities of the last RECENT tokens written
    (the session has them; the Outlook does not carry them), and the output the step will be
    judged against (for the calibration point only: no run knows it)."""

    sure: dict[tuple[int, ...], list[float]] = {}
    outputs: dict[tuple[int, ...], list[int]] = {}
    shown: dict[str, Any] = {}

    def begin(self, prompt_ids: Any) -> None:
        prompt = tuple(prompt_ids)
        Shown.shown = {"drafter": self, "prompt_length": len(prompt),
                       "top": self.sure.get(prompt), "output": self.outputs.get(prompt)}
        super().begin(prompt_ids)

    def outlook(self, context: list[int]) -> Outlook:
        shown = Shown.shown
        done = len(context) - shown["prompt_length"]
        shown["context"], shown["done"] = context, done
        shown["recent"] = (shown["top"][done - RECENT : done]
                           if shown["top"] is not None and done >= RECENT else [])
        return super().outlook(context)


def logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def by_confidence(shift_less_sure: float, shift_surer: float) -> type[DraftLengthController]:
    class ByConfidence(DraftLengthController):
        def _pricing(self, kind: DraftKind, top: int, accept_at: Sequence[float] | None = None
                     ) -> Pricing:
            recent = Shown.shown.get("recent")
            if accept_at is None and self._copy is not None and recent:
                least = min(recent)
                shift = (shift_less_sure if least < LESS_SURE else
                         shift_surer if least >= SURER else 0.0)
                if shift:
                    estimate = self.estimate(kind)
                    priced = copy_accept_at(self._copy, estimate.accept_at[:top],
                                            estimate.pool_seen, self.options)
                    accept_at = [1 / (1 + math.exp(-(logit(a) + shift))) for a in priced]
            return super()._pricing(kind, top, accept_at)
    return ByConfidence


class KindPerSource(SuffixDrafter):
    """The app's drafter, naming a copy's kind after its source as well ("suffix/memory"), so
    the controller keeps an estimate per kind and source, and a declined draft's verdicts,
    settled steps later in shadow, go to its own."""

    def outlook(self, context: list[int]) -> Outlook:
        seen = super().outlook(context)
        if seen.copy is None:
            return seen
        return replace(seen, kind=replace(seen.kind, name=f"{seen.kind.name}/{seen.copy.source}"))


class TailController(DraftLengthController):
    """The app's controller, remembering the k it chose, and counting a tail's verdicts at
    their draft positions (as AcceptanceEstimate.observe counts a pass's from position 0,
    without fading the positions again: they faded with the pass) and in the pool."""

    chosen = 0

    def decide(self, *args: Any, **kwargs: Any) -> Any:
        decision = super().decide(*args, **kwargs)
        self.chosen = decision.k
        return decision

    def observe_tail(self, kind: DraftKind, start: int, verdicts: list[bool]) -> None:
        if kind.name not in self.estimates:
            return
        estimate = self.estimates[kind.name]
        judged = verdicts[: max(0, estimate.positions - start)]
        for i, hit in enumerate(judged, start):
            estimate.seen_at[i] += 1
            estimate.hits_at[i] += hit
        estimate.count_in_pool(judged)


class TailShadowed(SuffixDrafter):
    """The app's drafter: where its controller drafts k of a free kind and it has more to
    offer, it holds the longer draft (one at a time, in a ShadowCheck of its own) and at each
    later step settles it against the output written so far; where the output kept the k
    tokens, the verdicts beyond them go to the controller. One still held when the task ends
    is dropped, as the session drops its shadow drafts."""

    controller: TailController

    def begin(self, prompt_ids: Any) -> None:
        self._prompt_length, self._judged = len(prompt_ids), 0
        self._tail = ShadowCheck()
        self._kind: DraftKind | None = None
        super().begin(prompt_ids)

    def outlook(self, context: list[int]) -> Outlook:
        settled = self._tail.settle(context[self._prompt_length :])
        if settled is not None:
            kind, verdicts = settled
            if len(verdicts) > self._judged and all(verdicts[: self._judged]):
                self.controller.observe_tail(kind, self._judged, verdicts[self._judged :])
        seen = super().outlook(context)
        self._kind = seen.kind
        return seen

    def propose(self, context: list[int], budget: Budget, params: SamplingParams,
                rng: np.random.Generator) -> Draft:
        draft = super().propose(context, budget, params, rng)
        k, kind = self.controller.chosen, self._kind
        if (k and kind is not None and kind.free and self._tail.idle
                and len(draft.tokens) == k):
            longer = super().propose(context, Budget(self.controller.draft_max), params, rng)
            if len(longer.tokens) > k and list(longer.tokens[:k]) == list(draft.tokens):
                self._tail.hold(kind, len(context) - self._prompt_length, longer.tokens)
                self._judged = k
        return draft


def tail_variant(memory: Any, limit: Any, draft_max: int) -> Any:
    drafter, controller = variant(TailShadowed, TailController)(memory, limit, draft_max)
    assert isinstance(drafter, TailShadowed) and isinstance(controller, TailController)
    drafter.controller = controller
    return drafter, controller


class OneBitForeseen(DraftLengthController):
    """The app's pricing, told one bit per copy: whether its next FORESEEN tokens all agree
    with the output. Yes: they are priced certain; no: the pass drafts fewer."""

    def _pricing(self, kind: DraftKind, top: int, accept_at: Sequence[float] | None = None
                 ) -> Pricing:
        shown = Shown.shown
        if accept_at is None and self._copy is not None and shown.get("output") and top:
            draft = shown["drafter"].propose(shown["context"], Budget(FORESEEN), GREEDY,
                                             RNG).tokens
            holds = (len(draft) == FORESEEN
                     and agreeing(draft, shown["output"], shown["done"]) == FORESEEN)
            estimate = self.estimate(kind)
            priced = copy_accept_at(self._copy, estimate.accept_at[:top], estimate.pool_seen,
                                    self.options)
            if holds:
                accept_at = [1.0] * min(FORESEEN, top) + priced[FORESEEN:]
            else:
                accept_at = priced[: FORESEEN - 1]
                top = len(accept_at)
        return super()._pricing(kind, top, accept_at)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", nargs="?", choices=("record", "replay"), default="replay")
    add_curve_option(parser)
    args = parser.parse_args(argv)
    if args.mode == "record":
        record(CONFIDENCE)
        return 0
    use_curve(args.curve)
    sure = confidence()
    print(f"| workload | least sure of the last {RECENT} tokens (top probability) | copies "
          "with 16 to offer | rejected at the first | agreeing for 16 |\n|---|---|---|---|---|")
    for suite in SHARED:
        for least, (n, first, held) in sorted(confidence_table(suite, sure).items()):
            print(f"| {suite} | {least} | {n} | {first / n:.0%} | {held / n:.0%} |")
    Shown.sure = sure
    Shown.outputs = {tuple(row["prompt"]): row["output"] for suite in SHARED
                     for row in json.loads(copy_bars.RECORDINGS[suite].read_text())}
    names = {"less sure": variant(Shown, by_confidence(-SHIFT, 0.0)),
             "surer": variant(Shown, by_confidence(0.0, SHIFT)),
             "both": variant(Shown, by_confidence(-SHIFT, SHIFT)),
             "learnt per source": variant(KindPerSource),
             "tails shadowed": tail_variant,
             f"one bit foreseen: holds for {FORESEEN}": variant(Shown, OneBitForeseen)}
    VARIANTS.update(names)
    print(f"\ncurve: {args.curve or 'the demo target'}; speedup over plain decoding (share of "
          "the oracle's gain)\n")
    print(copy_bars.share_table(SHARED, ("app", *names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
