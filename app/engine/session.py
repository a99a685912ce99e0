"""A generation as a generator of StepRecords: speculative, or plain target decoding
through the very same loop (no drafter, k = 0) so comparisons share one code path."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from app.engine.adaptive import DraftLengthController, PassOutcome
from app.engine.cores import CoreShare
from app.engine.cost_curve import MIN_SAMPLES, VerifyCostCurve, machine_busy
from app.engine.decode_config import DecodeConfig
from app.engine.diagnostics import describe
from app.engine.drafters import (
    EMPTY_DRAFT,
    Budget,
    Drafter,
    DraftKind,
    Outlook,
    mark_judged,
    written_copy,
)
from app.engine.metrics import RunStats
from app.engine.protocol import LanguageModel, returns_hidden
from app.engine.records import ORIGIN_PLAIN, Decision, StepRecord
from app.engine.sampling import SamplingParams, finite_logits
from app.engine.similarity import verify_pass
from app.engine.speculative import DraftRows, TargetRows, Verdict, verify
from app.engine.tree import DraftTree, verify_tree
from app.errors import SettingsError


class Session:
    """Runs one generation. Iterate `steps(prompt_ids)`; read `output_ids` and `stats`."""

    def __init__(
        self,
        target: LanguageModel,
        drafter: Drafter | None,
        config: DecodeConfig,
        cost_curve: VerifyCostCurve | None = None,
        diagnostics: bool = True,
    ) -> None:
        """diagnostics: add each judged token's alternatives and entropies to its record
        (after the step is timed); off where nothing shows them, as in bench timing runs."""
        config.validate()
        if drafter is not None and drafter.wants_target_hidden and not returns_hidden(target):
            raise SettingsError(f"{drafter.name} drafts from the target's hidden states, which "
                                f"the {target.backend} backend cannot return — use a draft "
                                "model or --ngram")
        # p and q follow the sampler semantics of the pair's runtime (both models share it)
        config = replace(config, sampling=replace(config.sampling, order=target.sampler_order))
        self.target = target
        self.drafter = drafter
        self.config = config
        self.diagnostics = diagnostics
        self.controller = DraftLengthController(
            config.draft_max, config.adaptive, cost_curve, free_kinds_shadowed=True,
            price_plain=config.price_plain,
        )
        # the share of its cores each verify pass got, and the threads decoding uses
        self.cores = CoreShare(target)
        self._verify_cpu = 0.0  # process CPU seconds of the last verify pass
        self.controller.machine_busy = self.machine_busy
        # free drafts the controller chose not to verify, checked against the output instead
        self._shadow = ShadowCheck()
        self._shadow_rng = np.random.default_rng(0)  # never draws from the sampler's stream
        self._kind: DraftKind | None = None  # the kind of draft this step priced
        # trees unless the drafter drafts from the target's hidden state, which a tree pass
        # does not return
        self._trees = (config.tree_width > 1 and drafter is not None
                       and not drafter.wants_target_hidden)
        self.rng = np.random.default_rng(config.sampling.seed)
        self.output_ids: list[int] = []
        self.stats = RunStats()
        self.prefill_seconds = 0.0
        self.stopped_by_eos = False

    def machine_busy(self) -> bool:
        """The passes get under their share of the cores (app.engine.cores); where that
        cannot be measured (no CPU threads known), the load average is above the cores."""
        return self.cores.busy if self.cores.measures else machine_busy()

    def plain_step_price(self) -> tuple[float | None, str]:
        """One plain target step's price, as the controller prices it, and where it comes
        from: the median of the plain steps timed on this pair, else the stored curve at this
        run's level (and when it was measured), else none (no single step sets a price)."""
        curve = self.controller.curve
        plain = curve.samples(1)
        if plain.priced:
            busy = " (some on a busy machine)" if any(plain.busy) else ""
            return plain.median, f"the median of {len(plain.times)} plain steps{busy}"
        if curve.points:
            when = (time.strftime("%Y-%m-%d %H:%M", time.localtime(curve.stored_at))
                    if curve.stored_at else "earlier")
            return curve.cost(1), (f"the curve stored from quiet runs ({when}), scaled by this "
                                   f"run's passes ({curve.load:.2f}x)")
        return None, (f"this run kept {len(plain.times)} plain step(s), a price needs "
                      f"{MIN_SAMPLES}, and no curve is stored for this model")

    def summary(
        self, baseline: Session | None = None, interrupted: bool = False, error: str = ""
    ) -> dict[str, Any]:
        """The trace's summary line; with a plain baseline run of the same prompt, its step
        time, speed and whether the texts are identical. A run cut short says so, and why."""
        if baseline is None or not baseline.stats.steps:
            t_plain, source = self.plain_step_price()
            summary = self.stats.summary(t_plain, mean_plain=False)  # no price from one step
            summary["t_target_source"] = source
            summary["t_target_busy"] = self.controller.curve.busy(1)
        else:
            summary = self.stats.summary(baseline.stats.plain_step_time)
            summary["plain_tok_s"] = baseline.stats.tokens_per_second
            summary["identical_to_plain"] = self.output_ids == baseline.output_ids
            summary["t_target_source"] = (f"the plain run beside it ({baseline.stats.steps} "
                                          "steps, mean)")
        refused = self.controller.curve.refused
        if refused:
            summary["refused_samples"] = refused
        summary["interrupted"] = interrupted or bool(error)
        if error:
            summary["error"] = error
        return summary

    def check_prompt(self, prompt_ids: list[int]) -> None:
        if not prompt_ids:
            raise SettingsError("the prompt is empty — type some text to continue from")
        if len(prompt_ids) >= self.target.n_ctx - 1:
            raise SettingsError(
                f"the prompt is {len(prompt_ids)} tokens but the context holds "
                f"{self.target.n_ctx} — shorten the prompt or raise the context size"
            )

    def steps(self, prompt_ids: list[int]) -> Iterator[StepRecord]:
        self.check_prompt(prompt_ids)
        target, config = self.target, self.config
        budget = min(config.n_predict, target.n_ctx - len(prompt_ids) - 1)
        start = time.perf_counter()
        prefill(target, prompt_ids, trees=self._trees)
        if self.drafter is not None:
            self.drafter.begin(prompt_ids)
        self.prefill_seconds = time.perf_counter() - start
        context = list(prompt_ids)
        index = 0
        while len(self.output_ids) < budget:
            step = self._step(context, budget - len(self.output_ids), index)
            step.threads = self.cores.observe(step.t_verify, self._verify_cpu)
            step.busy = self.machine_busy()
            self.stats.add(step)
            step.timing = self.controller.observe(self._outcome(step))
            self._shadow.settle_into(self.controller, self.output_ids)
            index += 1
            yield step
            if self.stopped_by_eos:
                return

    def _step(self, context: list[int], remaining: int, index: int) -> StepRecord:
        t0 = time.perf_counter()
        params = self.config.sampling
        drafter = self.drafter
        draft, source, k, stop = EMPTY_DRAFT, "", 0, None
        decision: Decision | None = None
        if drafter is not None:
            outlook = drafter.outlook(context)
            source = outlook.kind.name
            self._kind = outlook.kind
            # only what the target wrote is evidence of a copy, not the prompt's own words
            copied = min(outlook.copied, len(self.output_ids))
            # chain passes may be padded to a cheaper size within the context's room
            self.controller.pad_room = (None if self._trees
                                        else self.target.n_ctx - self.target.n_cached)
            decision = self.controller.decide(remaining, outlook.kind, copied,
                                              outlook.available,
                                              written_copy(outlook, len(self.output_ids)))
            k = decision.k
            self._shadow.offer(self.controller, drafter, outlook, k, context,
                               len(self.output_ids), remaining, params, self._shadow_rng)
            if k > 0 and self._trees:
                tree = drafter.propose_tree(context, k, self.config.tree_shape, params, self.rng)
                if tree is not None:
                    record = self._tree_step(context, tree.limited_to_depth(remaining - 1),
                                             index, t0, source)
                    record.decision = decision
                    return record
            if k > 0:
                # in adaptive mode a draft model may draft on, ending on its own confidence
                stop = self.controller.confidence_stop(outlook.kind, remaining)
                if stop is not None:
                    decision.stop_limit = stop.limit
                budget = Budget(k) if stop is None else Budget(stop.limit, stop)
                draft = drafter.propose(context, budget, params, self.rng)
        draft_tokens = draft.tokens[: max(0, remaining - 1)]
        pending = context[self.target.n_cached :]
        n_pass = len(pending) + len(draft_tokens)
        pads = self.controller.padded_size(n_pass) - n_pass if draft_tokens else 0
        filler = draft_tokens[-1:] * pads  # read after the draft: no judged row sees it
        t1, cpu = time.perf_counter(), self.cores.cpu_clock()
        wants_hidden = drafter is not None and drafter.wants_target_hidden
        raw, target_hidden = verify_pass(self.target, [*pending, *draft_tokens, *filler],
                                         len(draft_tokens) + 1 + pads,
                                         draft.hidden is not None or wants_hidden)
        logits = finite_logits(raw[: len(draft_tokens) + 1], self.target.name)
        if target_hidden is not None:
            target_hidden = target_hidden[: len(draft_tokens) + 1]
        t2, self._verify_cpu = time.perf_counter(), self.cores.cpu_clock() - cpu
        if not draft_tokens and params.greedy:
            # a plain greedy step is the argmax of the logits (the softmax is monotone and
            # keeps ties in order): no distribution to build when there is no row to record
            verdict = Verdict([], [int(np.argmax(logits[0]))], [ORIGIN_PLAIN])
        else:
            verdict = verify(
                draft_tokens, DraftRows(draft.q_row, logits.shape[-1]), TargetRows(logits, params),
                params, self.rng, self.target.token_text, start_pos=len(self.output_ids),
            )
            mark_judged(verdict.records, draft, target_hidden)
        n_accepted = len(verdict.emitted) - 1
        self.target.truncate(len(context) + n_accepted)
        record = self._finish_step(context, verdict, index, len(draft_tokens), n_pass + pads,
                                   (t0, t1, t2), source)
        record.pads = pads
        if stop is not None and stop.stopped:
            record.stop_chance = stop.chance
        record.decision = decision
        record.t_draft_first = draft.first_seconds if draft_tokens else None
        if drafter is not None:
            # row n_accepted of the pass produced the last emitted token
            hidden = (target_hidden[n_accepted]
                      if wants_hidden and target_hidden is not None else None)
            drafter.accept(context, hidden)
        return record

    def _tree_step(
        self, context: list[int], tree: DraftTree, index: int, t0: float, source: str
    ) -> StepRecord:
        """One pass over every node of the tree (after any committed tokens the cache lacks);
        the cache then keeps the accepted path."""
        params = self.config.sampling
        pending = context[self.target.n_cached :]
        offset = len(pending)
        ids = [*pending, *tree.tokens]
        parents = [*range(-1, offset - 1),
                   *(offset - 1 if p < 0 else offset + p for p in tree.parents)]
        t1, cpu = time.perf_counter(), self.cores.cpu_clock()
        logits, exact = self.target.extend_tree(ids, parents, offset - 1)
        logits = finite_logits(logits, self.target.name)
        t2, self._verify_cpu = time.perf_counter(), self.cores.cpu_clock() - cpu
        verdict = verify_tree(
            tree, TargetRows(logits, params), params, self.rng, self.target.token_text,
            start_pos=len(self.output_ids), exact_rows=exact, tie_bound=self.config.tie_bound,
        )
        mark_judged(verdict.records, tree)
        # the cache never holds the last emitted token: the next pass starts from it
        kept = verdict.path[: len(verdict.emitted) - 1]
        self.target.keep_path([*range(offset), *(offset + i for i in kept)])
        record = self._finish_step(context, verdict, index, len(tree), len(ids), (t0, t1, t2),
                                   source)
        if self.drafter is not None:
            self.drafter.accept(context, None)
        return record

    def _finish_step(
        self, context: list[int], verdict: Verdict, index: int, k: int, n_pass: int,
        times: tuple[float, float, float], source: str,
    ) -> StepRecord:
        emitted, origins = self._cut_at_eos(verdict.emitted, verdict.origins)
        context.extend(emitted)
        self.output_ids.extend(emitted)
        t0, t1, t2 = times
        t3 = time.perf_counter()
        if self.diagnostics:  # outside the step's timed work
            describe(verdict.judged, self.target.token_text)
        return StepRecord(
            index=index,
            k=k,
            tokens=verdict.records,
            emitted=emitted,
            emitted_text=[self.target.token_text(t) for t in emitted],
            origins=origins,
            t_draft=t1 - t0,
            t_verify=t2 - t1,
            t_overhead=t3 - t2,
            drafter=self.drafter.name if self.drafter and k else "",
            source=source,
            pass_tokens=n_pass if n_pass != k + 1 else 0,
        )

    def _outcome(self, step: StepRecord) -> PassOutcome:
        """What the controller learns from this step: the kind drafted, its verdicts by
        depth, the pass's size and times."""
        busy = step.busy
        if not step.k:
            return PassOutcome(None, pass_tokens=1, t_verify=step.t_verify, busy=busy)
        return PassOutcome(
            self._kind, step.depth_outcomes(), pass_tokens=step.n_pass,
            draft_depth=step.draft_depth, t_draft=step.t_draft, t_verify=step.t_verify,
            busy=busy, t_draft_first=step.t_draft_first, pads=step.pads,
        )

    def _cut_at_eos(self, emitted: list[int], origins: list[str]) -> tuple[list[int], list[str]]:
        if not self.config.stop_at_eos:
            return emitted, origins
        for i, token in enumerate(emitted):
            if token in self.target.eos_ids:
                self.stopped_by_eos = True
                return emitted[: i + 1], origins[: i + 1]
        return emitted, origins


# -- shadow checks: free drafts the controller declined, checked against what the target
# writes, without a pass.
#
# When the controller decodes plainly, a free drafter (a lookup, suffix decoding) could still
# have drafted, at no cost. Its draft is kept aside, and the tokens the target goes on to write
# say how far it would have been accepted: a drafted token of a one-hot draft passes exactly
# when the target's own token equals it (greedy: the argmax; sampled: accepted with chance p(x),
# the chance that plain sampling writes x). So the verdicts are the ones a verify pass would
# have drawn, and the kind's acceptance is learnt from every plain stretch for free, where
# probing it cost a verify pass that mostly failed on text with little to copy.


@dataclass(frozen=True)
class ShadowDraft:
    kind: DraftKind
    start: int  # the output position its first token would have filled
    tokens: tuple[int, ...]


class ShadowCheck:
    """One draft at a time, held until the output settles it."""

    def __init__(self) -> None:
        self.pending: ShadowDraft | None = None

    @property
    def idle(self) -> bool:
        return self.pending is None

    def offer(self, controller: DraftLengthController, drafter: Drafter, outlook: Outlook,
              k: int, context: list[int], written: int, remaining: int,
              params: SamplingParams, rng: np.random.Generator) -> None:
        """Where the controller chose to decode plainly (k = 0) and shadows this kind, hold
        the draft it would have proposed; `written`: the output tokens so far."""
        if k or not self.idle or not controller.shadows(outlook.kind) \
                or outlook.available == 0 or remaining < 2:
            return
        budget = Budget(min(controller.draft_max, remaining - 1))
        self.hold(outlook.kind, written, drafter.propose(context, budget, params, rng).tokens)

    def settle_into(self, controller: DraftLengthController, output: Sequence[int]) -> None:
        """After each step: a held draft the output has settled counts as the kind's pass."""
        settled = self.settle(output)
        if settled is not None:
            kind, verdicts = settled
            controller.observe(PassOutcome(kind, verdicts))

    def hold(self, kind: DraftKind, start: int, tokens: Sequence[int]) -> None:
        if tokens:
            self.pending = ShadowDraft(kind, start, tuple(tokens))

    def settle(self, output: Sequence[int]) -> tuple[DraftKind, list[bool]] | None:
        """The held draft's kind and its verdicts, position by position up to the first token
        the target wrote otherwise, once the output reaches that far (else None: wait)."""
        held = self.pending
        if held is None:
            return None
        written = output[held.start : held.start + len(held.tokens)]
        verdicts: list[bool] = []
        for drafted, wrote in zip(held.tokens, written, strict=False):
            verdicts.append(drafted == wrote)
            if drafted != wrote:
                break
        if (verdicts and not verdicts[-1]) or len(verdicts) == len(held.tokens):
            self.pending = None
            return held.kind, verdicts
        return None


def prefill(target: LanguageModel, prompt_ids: Sequence[int], trees: bool = False) -> None:
    """The prompt but its last token into the target's empty cache: the first step then
    passes the last token (with any draft), so its row is scored as every later one is.
    `trees`: the run will verify trees, and the target makes room for them first."""
    target.truncate(0)
    if trees:
        target.prepare_tree_passes()
    if len(prompt_ids) > 1:
        target.extend(prompt_ids[:-1], 0)
