"""What else a copy could be priced by, besides its own tokens (copy_hazards.py), and whether
pricing by it moves the copy bars (copy_bars.py): three measured negatives, kept so they can be
checked again.

1. The target's confidence before the copy. Every output token the target wrote came with its
   distribution, so before a pass the controller could know how sure the target was of the
   tokens it just wrote (their top probability: `record` reads them once from the demo target
   over each recorded prompt and output, into docs/ablation-data/target-confidence.json).
   Per bin of the last token's and of the least sure of the last four, the copies the app's
   drafter offers: how many, the share rejected at their first token, the share agreeing for
   16. Then replayed: the app's pricing of a copy with every position's acceptance moved on
   the log-odds scale by SHIFT where the least sure of the last four tokens is below 0.9
   ("less sure"), or above 0.999 ("surer").
2. Acceptance learnt per copy source: the controller's estimates kept per kind and copy
   source (prompt, this output, an earlier answer), where the app keeps one per kind (a suffix
   copy of this output and one of an earlier answer share theirs).
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
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import copy_bars  # noqa: E402
from replay_lookup import add_curve_option, use_curve  # noqa: E402
from replay_suffix import GREEDY, RNG, agreeing, at_every_position, load_limit  # noqa: E402
from suffix_variants import VARIANTS, variant  # noqa: E402

from app.engine.adaptive import DraftLengthController  # noqa: E402
from app.engine.drafters import Budget, Draft, DraftKind, Outlook  # noqa: E402
from app.engine.drafters.suffix import SuffixDrafter  # noqa: E402
from app.engine.estimates import AcceptanceEstimate, copy_accept_at  # noqa: E402
from app.engine.pass_pricing import Pricing  # noqa: E402
from app.engine.sampling import SamplingParams  # noqa: E402

CONFIDENCE = copy_bars.DATA / "target-confidence.json"
SHARED = ("repetitive", "edit", "verbatim")
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


def bin_of(last: float, least: float) -> tuple[str, str]:
    return (("last < 0.9" if last < 0.9 else "last < 0.99" if last < 0.99 else "last ≥ 0.99"),
            ("least < 0.5" if least < 0.5 else "least < 0.9" if least < LESS_SURE
             else "least < 0.999" if least < SURER else "least ≥ 0.999"))


def confidence_table(suite: str, sure: dict[tuple[int, ...], list[float]]
                     ) -> dict[tuple[str, str], tuple[int, int, int]]:
    """Per confidence bin: the copies offered with 16 tokens to offer, of them rejected at
    their first token, and agreeing for all 16."""
    recording = copy_bars.RECORDINGS[suite]
    rows = [row for row in json.loads(recording.read_text()) if row["suite"] == suite]
    counts: dict[tuple[str, str], tuple[int, int, int]] = {}
    top = {id(row["output"]): sure[tuple(row["prompt"])] for row in rows}

    def measure(drafter: SuffixDrafter, context: list[int], output: list[int],
                done: int) -> None:
        if done < RECENT or drafter.outlook(context).copy is None:
            return
        draft = drafter.propose(context, Budget(16), GREEDY, RNG).tokens
        if len(draft) < 16 or done + 16 >= len(output):
            return
        recent = top[id(output)][done - RECENT : done]
        key = bin_of(recent[-1], min(recent))
        n, first, held = counts.get(key, (0, 0, 0))
        agree = agreeing(draft, output, done)
        counts[key] = (n + 1, first + (agree == 0), held + (agree >= 16))
    at_every_position(rows, "app", load_limit(recording), 16, measure)
    return counts


# -- the replayed controllers --

class ConfidenceShown(SuffixDrafter):
    """The app's drafter, leaving the target's confidence in the tokens before this step for
    its controller (a replay's shortcut: the session has it, the Outlook does not carry it)."""

    sure: dict[tuple[int, ...], list[float]] = {}
    recent: list[float] = []

    def begin(self, prompt_ids: Any) -> None:
        self._top, self._prompt_length = self.sure.get(tuple(prompt_ids)), len(prompt_ids)
        super().begin(prompt_ids)

    def outlook(self, context: list[int]) -> Outlook:
        done = len(context) - self._prompt_length
        ConfidenceShown.recent = [] if self._top is None else self._top[max(0, done - RECENT):
                                                                        done]
        return super().outlook(context)


def logit(p: float) -> float:
    p = min(max(p, 1e-6), 1 - 1e-6)
    return math.log(p / (1 - p))


def by_confidence(shift_less_sure: float, shift_surer: float) -> type[DraftLengthController]:
    class ByConfidence(DraftLengthController):
        def _pricing(self, kind: DraftKind, top: int, accept_at: Sequence[float] | None = None
                     ) -> Pricing:
            recent = ConfidenceShown.recent
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


class _BySource(dict[Any, AcceptanceEstimate]):
    """The controller's estimates, looked up per kind and the source of the copy it prices
    (DraftLengthController keys them by kind name)."""

    def __init__(self, controller: DraftLengthController) -> None:
        super().__init__()
        self.controller = controller

    def _key(self, name: Any) -> Any:
        copy = self.controller._copy
        return name if copy is None else (name, copy.source)

    def __getitem__(self, name: Any) -> AcceptanceEstimate:
        return super().__getitem__(self._key(name))

    def __setitem__(self, name: Any, estimate: AcceptanceEstimate) -> None:
        super().__setitem__(self._key(name), estimate)

    def __contains__(self, name: object) -> bool:
        return super().__contains__(self._key(name))

    def get(self, name: Any, default: Any = None) -> Any:
        return super().get(self._key(name), default)


class LearntPerSource(DraftLengthController):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.estimates = _BySource(self)


class TailController(DraftLengthController):
    """The app's controller, remembering the k it chose, and counting a tail's verdicts at
    their draft positions (as AcceptanceEstimate.observe counts a pass's from position 0,
    without fading the positions again: they faded with the pass)."""

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
        fade = estimate.options.pool_decay_per_token ** len(judged)
        estimate.pool_seen = fade * estimate.pool_seen + len(judged)
        estimate.pool_hits = fade * estimate.pool_hits + sum(judged)
        estimate.judged += len(judged)
        estimate.judged_hits += sum(judged)
        estimate._estimate()


class TailShadowed(SuffixDrafter):
    """The app's drafter: where its controller drafts k of a free kind and it has more to
    offer, it holds the longer draft (one at a time) and, at each later step, checks it
    against the output written so far: once the output kept the k tokens and reached a token
    it drafted otherwise (or its end), the verdicts beyond k go to the controller."""

    controller: TailController
    # the held draft: its kind, the output position of its first token, the tokens its pass
    # drafted, and the draft
    _tail: tuple[DraftKind, int, int, list[int]] | None = None

    def begin(self, prompt_ids: Any) -> None:
        self._prompt_length, self._tail = len(prompt_ids), None
        super().begin(prompt_ids)

    def outlook(self, context: list[int]) -> Outlook:
        held = self._tail
        if held is not None:
            kind, start, judged, tokens = held
            written = context[self._prompt_length + start:]
            verdicts = []
            for drafted, wrote in zip(tokens, written, strict=False):
                verdicts.append(drafted == wrote)
                if drafted != wrote:
                    break
            if (verdicts and not verdicts[-1]) or len(verdicts) == len(tokens):
                self._tail = None
                if len(verdicts) > judged and all(verdicts[:judged]):
                    self.controller.observe_tail(kind, judged, verdicts[judged:])
        seen = super().outlook(context)
        self._kind = seen.kind
        return seen

    def propose(self, context: list[int], budget: Budget, params: SamplingParams,
                rng: np.random.Generator) -> Draft:
        draft = super().propose(context, budget, params, rng)
        k = self.controller.chosen
        if k and self._tail is None and self._kind.free and len(draft.tokens) == k:
            longer = super().propose(context, Budget(self.controller.draft_max), params, rng)
            if len(longer.tokens) > k and list(longer.tokens[:k]) == list(draft.tokens):
                self._tail = (self._kind, len(context) - self._prompt_length, k,
                              list(longer.tokens))
        return draft


def tail_variant(memory: Any, limit: Any, draft_max: int) -> Any:
    drafter, controller = variant(TailShadowed, TailController)(memory, limit, draft_max)
    assert isinstance(drafter, TailShadowed) and isinstance(controller, TailController)
    drafter.controller = controller
    return drafter, controller


class Foreseen(SuffixDrafter):
    """The app's drafter, leaving the step's context, and the output it will be judged
    against, for its controller (a calibration point only: no run knows the output)."""

    outputs: dict[tuple[int, ...], list[int]] = {}
    shown: dict[str, Any] = {}

    def begin(self, prompt_ids: Any) -> None:
        Foreseen.shown = {"output": self.outputs.get(tuple(prompt_ids)), "drafter": self,
                          "prompt_length": len(prompt_ids)}
        super().begin(prompt_ids)

    def outlook(self, context: list[int]) -> Outlook:
        Foreseen.shown["context"] = context
        return super().outlook(context)


class OneBitForeseen(DraftLengthController):
    """The app's pricing, told one bit per copy: whether its next FORESEEN tokens all agree
    with the output. Yes: they are priced certain; no: the pass drafts fewer."""

    def _pricing(self, kind: DraftKind, top: int, accept_at: Sequence[float] | None = None
                 ) -> Pricing:
        shown = Foreseen.shown
        if accept_at is None and self._copy is not None and shown.get("output") and top:
            context = shown["context"]
            draft = SuffixDrafter.propose(shown["drafter"], context, Budget(FORESEEN), GREEDY,
                                          RNG).tokens
            done = len(context) - shown["prompt_length"]
            holds = (len(draft) == FORESEEN
                     and agreeing(draft, shown["output"], done) == FORESEEN)
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
    print("| workload | last token's top probability | least of the last four | copies "
          "with 16 to offer | rejected at the first | agreeing for 16 |\n|---|---|---|---|---|---|")
    for suite in SHARED:
        for (last, least), (n, first, held) in sorted(confidence_table(suite, sure).items()):
            print(f"| {suite} | {last} | {least} | {n} | {first / n:.0%} | {held / n:.0%} |")
    ConfidenceShown.sure = sure
    names = {"less sure": variant(ConfidenceShown, by_confidence(-SHIFT, 0.0)),
             "surer": variant(ConfidenceShown, by_confidence(0.0, SHIFT)),
             "both": variant(ConfidenceShown, by_confidence(-SHIFT, SHIFT)),
             "learnt per source": variant(controller=LearntPerSource),
             "tails shadowed": tail_variant,
             f"one bit foreseen: holds for {FORESEEN}": variant(Foreseen, OneBitForeseen)}
    Foreseen.outputs = {tuple(row["prompt"]): row["output"] for suite in SHARED
                        for row in json.loads(copy_bars.RECORDINGS[suite].read_text())}
    VARIANTS.update(names)
    print(f"\ncurve: {args.curve or 'the demo target'}; speedup over plain decoding (share of the "
          "oracle's gain)\n\n| workload | the app | " + " | ".join(names) + " |\n|---|"
          + "---|" * (len(names) + 1))
    for suite in SHARED:
        shares = []
        for name in ("app", *names):
            f = copy_bars.suite_figures(suite, copy_bars.RECORDINGS[suite], 64, name)
            gained = copy_bars.share(f["app"], f["oracle"])
            shares.append(f"{f['app']:.3f}× ({'–' if gained is None else f'{gained:.0%}'})")
        print(f"| {suite} | " + " | ".join(shares) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
