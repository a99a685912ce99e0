"""The exactness check a user runs on their own pair.

1. Greedy identity, in two modes. In the mode the user runs (llama.cpp's fast kernels, torch's
   default dtype) a verify pass and a single step may sum in another order, so greedy texts can
   part where the target's two best tokens are nearly tied: each such divergence is listed with
   both runs' top-two margins and judged against the kernels' measured disagreement
   (app.analysis.divergence, app.analysis.kernel_noise). In the exact mode (llama.cpp's
   batch-invariant kernels, --exact-kernels; torch: every pass one token at a time), run in a
   child process because llama.cpp picks its CPU kernels once per process, speculative output
   must be bit-identical to plain
   decoding: that is what shows the algorithm right, and what catches an error that hides
   inside the noise bound.
2. Sampling: the first two tokens of many independently seeded speculative runs must follow
   the target's own distribution. Without speculation that distribution is known exactly (one
   target pass for the first token; one per possible first token for the second token's
   marginal), so the samples are tested against it with a G-test rather than against a second
   sample; top-k keeps the support small enough for the test to have power.
The p-value is the smaller of the two tests', Bonferroni-corrected (x 2).
It passes when the exact mode is identical, every divergence in the user's mode is a near-tie
and the sampled test passes.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from app.analysis.divergence import Divergence, MarginTap, explain_divergence
from app.analysis.exact_mode import (
    exact_mode_name,
    has_exact_mode,
    run_exact_mode,
)
from app.analysis.kernel_noise import cached_kernel_noise
from app.analysis.stats import g_test
from app.engine.decode_config import DecodeConfig
from app.engine.registry import DrafterChoice
from app.engine.sampling import SamplingParams, process
from app.engine.session import Session
from app.errors import SettingsError
from app.models.loading import LoadedPair
from app.runs import build_session

# What holds in which mode, said the same way by the README, `--help` and the window.
EXACTNESS_SENTENCE = (
    "Sampled output follows the target's distribution exactly in every mode; greedy output is "
    "bit-identical to plain decoding in the exact mode (--exact-kernels: llama.cpp's "
    "batch-invariant kernels; torch: one token per pass), and in the default fast mode may "
    "part from it only at near-ties "
    "within the kernels' measured noise — check your own pair with `draftlens check-exact`.")

GREEDY_PROMPTS = [
    "def fibonacci(n):\n",
    "The quick brown fox",
    "import numpy as np\n\nx = np.",
    "the cat sat on the mat. the cat sat on the",
]
# a prompt whose next two tokens a code model is unsure of: where the target is nearly
# certain, every sampler emits the same tokens and the G-test can tell nothing. Measured on the
# demo target (temperature 1, top-k 20): "def add(a, b):\n    return" put 0.995 on " a" and
# 0.96 on " +" (three different drafts got one p-value); this one 0.56 on " matplotlib" (8
# tokens above 1%) and 0.55 on ".pyplot" (6)
SAMPLED_PROMPT = "import numpy as np\nimport"
NEARLY_SURE = 0.9  # a sampled distribution whose mode has more than this tests little
P_THRESHOLD = 1e-3  # a correct engine fails this about once in a thousand checks
DEFAULT_TOP_K = 20

Progress = Callable[[str], None]


@dataclass
class GreedySuite:
    """The greedy prompt suite in one kernel mode: identical or where and why it parted."""
    mode: str
    identical: bool
    prompts: int
    divergences: list[dict[str, Any]] = field(default_factory=list)
    noise_bound: float | None = None  # what a verify pass may move a top-two gap by here
    drafted: int = 0  # draft tokens the speculative runs judged: identity means nothing at 0
    accepted: int = 0

    @property
    def all_near_ties(self) -> bool:
        """Every difference explained as a near-tie (a run that differs only in length, one
        text a prefix of the other, is not)."""
        if self.identical:
            return True
        return bool(self.divergences) and all(d["near_tie"] for d in self.divergences)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GreedySuite:
        return cls(mode=str(data["mode"]), identical=bool(data["identical"]),
                   prompts=int(data["prompts"]), divergences=list(data["divergences"]),
                   noise_bound=data.get("noise_bound"), drafted=int(data.get("drafted", 0)),
                   accepted=int(data.get("accepted", 0)))


@dataclass
class ExactReport:
    greedy: GreedySuite  # the user's mode
    exact: GreedySuite | None  # batch-invariant kernels; None where this backend has none
    p_value: float
    p_first: float
    p_second: float
    samples: int
    temperature: float
    top_k: int
    draft_max: int
    threshold: float = P_THRESHOLD
    notes: list[str] = field(default_factory=list)
    # the exact distributions' largest probabilities, first token and second: near 1, the
    # G-test has nothing to tell apart
    sampled_modes: list[float] = field(default_factory=list)

    @property
    def greedy_identical(self) -> bool:
        return self.greedy.identical

    @property
    def exact_kernels_identical(self) -> bool | None:
        return None if self.exact is None else self.exact.identical

    @property
    def passed(self) -> bool:
        return not self.failures()

    def failures(self) -> list[str]:
        """Why it fails, one reason each (empty when it passes)."""
        why = []
        if self.exact is not None and not self.exact.identical:
            d = self.exact.divergences[0] if self.exact.divergences else {}
            why.append(f"with {self.exact.mode} speculative output differs from plain decoding"
                       f"{_where(d)}: the algorithm is wrong, not the kernels")
        first = self.greedy.divergences[0] if self.greedy.divergences else {}
        if self.exact is None and not self.greedy.identical:
            why.append(f"greedy output differs from plain decoding{_where(first)} and this "
                       "backend has no batch-invariant mode to show it is only noise")
        elif not self.greedy.all_near_ties:
            d = next((d for d in self.greedy.divergences if not d["near_tie"]), first)
            reason = d.get("reason", "one text ends where the other goes on")
            why.append(f"in the {self.greedy.mode} mode greedy output differs{_where(d)} and it "
                       f"is not a near-tie ({reason})")
        if self.greedy.drafted == 0:
            why.append("the speculative runs of the greedy suite drafted nothing, so their "
                       "identity shows nothing about speculation — this drafter finds no "
                       "draft on the suite's prompts")
        if self.p_value < self.threshold:
            why.append(f"the sampled test failed: p = {self.p_value:.3g} < {self.threshold:g} "
                       "(the emitted tokens do not follow the target's distribution)")
        return why

    def verdict(self) -> str:
        """One line: what holds on this pair."""
        if not self.passed:
            return "FAIL: " + "; ".join(self.failures())
        exact = ("" if self.exact is None else
                 f"greedy output is bit-identical to plain decoding with {self.exact.mode}; ")
        n = len(self.greedy.divergences)
        default = (f"in the {self.greedy.mode} mode it is identical too; " if n == 0 else
                   f"in the {self.greedy.mode} mode it parts at {n} near-tie(s) within the "
                   f"measured kernel noise ({self.greedy.noise_bound:.3g} logits); ")
        if self.exact is not None and self.exact.mode == self.greedy.mode:
            default = ""
        return (f"PASS: {exact}{default}sampled output follows the target's distribution "
                f"(p = {self.p_value:.3g}); the greedy suite judged {self.greedy.drafted} draft "
                f"tokens and accepted {self.greedy.accepted}")

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed, "verdict": self.verdict(), "failures": self.failures(),
            "greedy_identical": self.greedy_identical,
            "exact_kernels_identical": self.exact_kernels_identical,
            "mode": self.greedy.mode, "exact_mode": self.exact.mode if self.exact else None,
            "divergences": self.greedy.divergences,
            "exact_kernels_divergences": self.exact.divergences if self.exact else [],
            "noise_bound": self.greedy.noise_bound, "greedy_prompts": self.greedy.prompts,
            "drafted": self.greedy.drafted, "accepted": self.greedy.accepted,
            "p_value": self.p_value, "p_first": self.p_first, "p_second": self.p_second,
            "samples": self.samples, "temperature": self.temperature, "top_k": self.top_k,
            "draft_max": self.draft_max, "threshold": self.threshold, "notes": self.notes,
            "sampled_modes": self.sampled_modes,
        }


def _where(d: dict[str, Any]) -> str:
    if not d:
        return ""
    return (f" at generated token {d['position']} of {d['prompt']!r} ({d['plain_text']!r} "
            f"plain, {d['other_text']!r} speculative)")


def _generate(pair: LoadedPair, config: DecodeConfig, prompt_ids: list[int],
              plain: bool, stop_after: int | None = None) -> list[int]:
    return list(_run(pair, config, prompt_ids, plain, stop_after).output_ids)


def _run(pair: LoadedPair, config: DecodeConfig, prompt_ids: list[int],
         plain: bool, stop_after: int | None = None) -> Session:
    session = build_session(pair, config, plain=plain)
    for _ in session.steps(prompt_ids):
        if stop_after is not None and len(session.output_ids) >= stop_after:
            break
    return session


def greedy_suite(pair: LoadedPair, choice: DrafterChoice, draft_max: int, n_predict: int,
                 prompts: list[str], mode: str, exact_kernels: bool) -> GreedySuite:
    """Plain and speculative greedy text for each prompt; each prompt's first difference with
    the target's top-two margins there in both runs, judged against the kernels' measured
    noise (zero with batch-invariant kernels: there every difference is a failure)."""
    config = DecodeConfig(n_predict=n_predict, draft_max=draft_max, drafter=choice)
    model = pair.target
    tap = MarginTap(model)
    pair.target = tap
    differing = []
    drafted = accepted = 0
    try:
        for prompt in prompts:
            ids = model.tokenize(prompt)
            tap.top = {}
            plain = _generate(pair, config, ids, plain=True)
            plain_top, tap.top = tap.top, {}
            session = _run(pair, config, ids, plain=False)
            spec = list(session.output_ids)
            drafted += session.stats.drafted
            accepted += session.stats.accepted
            if plain != spec:
                differing.append((prompt, len(ids), plain, spec, plain_top, dict(tap.top)))
    finally:
        pair.target = model
    suite = GreedySuite(mode=mode, identical=not differing, prompts=len(prompts),
                        drafted=drafted, accepted=accepted)
    if differing:
        suite.noise_bound = 0.0 if exact_kernels else cached_kernel_noise(model).bound
    for prompt, n_prompt, plain, spec, plain_top, spec_top in differing:
        found = explain_divergence(n_prompt, plain, spec, plain_top, spec_top, model.token_text,
                                   suite.noise_bound or 0.0)
        if found is not None:
            suite.divergences.append(divergence_entry(prompt, found))
    return suite


def divergence_entry(prompt: str, d: Divergence) -> dict[str, Any]:
    """A divergence as check-exact reports it: where, both runs' top-two margins, the bound."""
    return {"prompt": prompt, "position": d.position, "plain_text": d.plain_text,
            "other_text": d.other_text,
            "margins": {"plain": d.plain_logit_gap, "speculative": d.other_logit_gap},
            "gap_moved": d.gap_moved, "noise_bound": d.noise_bound, "near_tie": d.near_tie,
            "reason": d.reason}


def exact_first_two(pair: LoadedPair, prompt_ids: list[int],
                    params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """The target's distribution of the first generated token, and the second's marginal."""
    target = pair.target
    target.truncate(0)
    first = process(target.extend(prompt_ids, 1)[0], params)
    second = np.zeros_like(first)
    for token in np.flatnonzero(first):
        second += first[token] * process(target.extend([int(token)], 1)[0], params)
        target.truncate(len(prompt_ids))
    target.truncate(0)
    return first, second


def sampled_tokens(pair: LoadedPair, choice: DrafterChoice, prompt_ids: list[int],
                   params: SamplingParams, draft_max: int, samples: int, seed: int,
                   progress: Progress | None = None) -> np.ndarray:
    """The first two tokens of `samples` speculative runs, seeds seed, seed + 1, ..."""
    out = np.empty((samples, 2), dtype=np.int64)
    for i in range(samples):
        if progress is not None and i % 50 == 0:
            progress(f"sampled runs {i}/{samples}")
        config = DecodeConfig(n_predict=2, draft_max=draft_max, stop_at_eos=False,
                              sampling=replace(params, seed=seed + i), drafter=choice)
        out[i] = _generate(pair, config, prompt_ids, plain=False, stop_after=2)[:2]
    return out


def user_mode(pair: LoadedPair) -> tuple[str, bool]:
    """The mode this pair runs in, and whether it is already the exact one."""
    target = pair.target
    exact = pair.spec.batch_invariant
    if target.backend == "llamacpp":
        return ("exact kernels" if exact else "fast kernels"), exact
    dtype = str(getattr(target, "dtype", "default dtype"))
    return (f"torch {dtype}, one token per pass" if exact else f"torch {dtype}"), exact


def check_greedy(pair: LoadedPair, choice: DrafterChoice, draft_max: int = 4,
                 n_predict: int = 32, progress: Progress | None = None,
                 ) -> tuple[GreedySuite, GreedySuite | None]:
    """The greedy suite in the user's mode, and with batch-invariant kernels (the same suite
    when the user runs those already; None where the backend has no such mode here)."""
    say = progress or (lambda message: None)
    mode, already_exact = user_mode(pair)
    say(f"greedy identity over {len(GREEDY_PROMPTS)} prompts ({mode})")
    suite = greedy_suite(pair, choice, draft_max, n_predict, GREEDY_PROMPTS, mode,
                         already_exact)
    if already_exact:
        return suite, suite
    if not has_exact_mode(pair.target.backend):
        return suite, None
    say(f"greedy identity again with {exact_mode_name(pair.target.backend)} (a child process)")
    exact = GreedySuite.from_dict(run_exact_mode(pair.spec, choice, draft_max, n_predict))
    return suite, exact


def check_exact(pair: LoadedPair, choice: DrafterChoice, samples: int = 200,
                draft_max: int = 4, temperature: float = 1.0, top_k: int = DEFAULT_TOP_K,
                n_predict: int = 32, seed: int = 0,
                progress: Progress | None = None) -> ExactReport:
    if not choice:
        raise SettingsError("check-exact needs a draft — give a draft model, --ngram, "
                            "--suffix, --draft-heads, --self-draft-layers or --draft-mtp")
    if samples < 20:
        raise SettingsError(f"--samples must be at least 20 for the test to mean anything "
                            f"(got {samples})")
    if temperature <= 0:
        raise SettingsError("the sampled test needs a temperature above 0 (e.g. --temp 1)")
    say = progress or (lambda message: None)
    greedy, exact = check_greedy(pair, choice, draft_max, n_predict, say)
    # the exact distributions in the target runtime's sampler order, as the session uses
    params = SamplingParams(temperature=temperature, top_k=top_k,
                            order=pair.target.sampler_order)
    params.validate()
    prompt_ids = pair.target.tokenize(SAMPLED_PROMPT)
    say("the target's exact distributions")
    first, second = exact_first_two(pair, prompt_ids, params)
    tokens = sampled_tokens(pair, choice, prompt_ids, params, draft_max, samples, seed, say)
    p_first = g_test(tokens[:, 0], first).p_value
    p_second = g_test(tokens[:, 1], second).p_value
    notes = []
    modes = [float(first.max()), float(second.max())]
    if min(modes) > NEARLY_SURE:
        notes.append(f"the target is nearly sure of both sampled tokens here (modes "
                     f"{modes[0]:.2f} and {modes[1]:.2f}): the sampled test can tell little")
    if choice.names[0] in ("ngram", "suffix") and not choice.uses("draft"):
        kind = "n-gram" if choice.names[0] == "ngram" else "suffix"
        notes.append(f"{kind} drafts are one-hot: the sampled test checks accept/reject only "
                     "where the prompt repeats")
    if exact is None:
        notes.append(f"{pair.target.backend} on {pair.target.device} has no batch-invariant "
                     "mode here: greedy output must be identical in the mode it runs")
    return ExactReport(
        greedy=greedy, exact=exact, p_value=min(1.0, 2.0 * min(p_first, p_second)),
        p_first=p_first, p_second=p_second, samples=samples, temperature=temperature,
        top_k=top_k, draft_max=draft_max, notes=notes, sampled_modes=modes,
    )
