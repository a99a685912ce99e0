"""The exactness check a user runs on their own pair, with their own decode settings.

1. Greedy identity, in two modes, over the user's settings and also a tree (width 2) and
   adaptive k where the user runs neither. In the mode the user runs (llama.cpp's fast
   kernels, torch's default dtype) a verify pass and a single step may sum in another order,
   so greedy texts can part where the target's two best tokens are nearly tied: each such
   divergence is listed with both runs' top-two margins and judged against the kernels'
   measured disagreement (app.analysis.divergence, app.analysis.kernel_noise), and a measured
   disagreement above what the arithmetic can explain (its ceiling) fails by itself. In the
   exact mode, run in a child process (llama.cpp picks its CPU kernels once per process):
   llama.cpp's batch-invariant kernels on the CPU, or torch one token per pass; speculative
   output must be bit-identical to plain decoding there. The child also measures its batched
   path against single steps where the arithmetic allows no doubt (llama.cpp's exact kernels:
   chain passes must be bit-identical; torch: batched passes and tree masks in float64), so a
   bug in the batched path cannot hide in the noise bound nor in one-token-per-pass runs.
2. Sampling (app.analysis.exact_sampled): the first two tokens of many independently seeded
   speculative runs must follow the target's own distribution (a G-test).
The p-value is the smaller of the two tests', Bonferroni-corrected (x 2). Every part must
have drafted: identity of runs that never drafted shows nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from app.analysis.divergence import Divergence, MarginTap, explain_divergence
from app.analysis.exact_mode import (
    batched_path_check,
    exact_mode_name,
    has_exact_mode,
    run_exact_mode,
)
from app.analysis.exact_sampled import NEARLY_SURE, sampled_test
from app.analysis.kernel_noise import cached_kernel_noise, noise_ceiling
from app.engine.decode_config import DecodeConfig, DrafterChoice
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.errors import SettingsError
from app.models.loading import LoadedPair
from app.runs import build_session

# What holds in which mode, said the same way by the README, `--help` and the window.
EXACTNESS_SENTENCE = (
    "Greedy output is bit-identical to plain decoding in the exact mode (--exact-kernels: "
    "llama.cpp's batch-invariant kernels, which hold on the CPU only; torch: one token per "
    "pass); in the default fast mode it may part from plain decoding only at near-ties within "
    "the kernels' measured noise, and sampled output follows the target's distribution as the "
    "verify pass computes it, which differs from plain steps by up to that noise — check your "
    "own pair and settings with `draftlens check-exact`.")

GREEDY_PROMPTS = [
    "def fibonacci(n):\n",
    "The quick brown fox",
    "import numpy as np\n\nx = np.",
    "the cat sat on the mat. the cat sat on the",
]
P_THRESHOLD = 1e-3  # a correct engine fails this about once in a thousand checks
DEFAULT_TOP_K = 20
DEFAULT_N_PREDICT = 32

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
    # per decode setting the suite ran ("your settings", "tree width 2", "adaptive k"):
    # [draft tokens judged, accepted]
    settings: dict[str, list[int]] = field(default_factory=dict)
    # the most the arithmetic can move a gap (app.analysis.kernel_noise.noise_ceiling)
    noise_ceiling: float | None = None
    # the batched path against single steps where the arithmetic allows no doubt (the exact
    # mode only): what was measured, the largest gap moved, and the most allowed
    batched_what: str = ""
    batched_bound: float | None = None
    batched_ceiling: float | None = None

    @property
    def all_near_ties(self) -> bool:
        """Every difference explained as a near-tie (a run that differs only in length, one
        text a prefix of the other, is not)."""
        if self.identical:
            return True
        return bool(self.divergences) and all(d["near_tie"] for d in self.divergences)

    @property
    def noise_beyond_kernels(self) -> bool:
        return (self.noise_bound is not None and self.noise_ceiling is not None
                and self.noise_bound > self.noise_ceiling)

    @property
    def batched_path_wrong(self) -> bool:
        return (self.batched_bound is not None and self.batched_ceiling is not None
                and self.batched_bound > self.batched_ceiling)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GreedySuite:
        return cls(mode=str(data["mode"]), identical=bool(data["identical"]),
                   prompts=int(data["prompts"]), divergences=list(data["divergences"]),
                   noise_bound=data.get("noise_bound"), drafted=int(data.get("drafted", 0)),
                   accepted=int(data.get("accepted", 0)),
                   settings={str(k): [int(x) for x in v]
                             for k, v in data.get("settings", {}).items()},
                   noise_ceiling=data.get("noise_ceiling"),
                   batched_what=str(data.get("batched_what", "")),
                   batched_bound=data.get("batched_bound"),
                   batched_ceiling=data.get("batched_ceiling"))


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
    sampled_prompt: str = ""
    sampled_drafted: int = 0  # draft tokens the sampled runs judged
    sampled_accepted: int = 0

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
        exact = self.exact
        if exact is not None and not exact.identical:
            d = exact.divergences[0] if exact.divergences else {}
            why.append(f"with {exact.mode} speculative output differs from plain decoding"
                       f"{_where(d)}: the algorithm is wrong, not the kernels")
        for suite in {id(s): s for s in (exact, self.greedy) if s is not None}.values():
            if suite.batched_path_wrong:
                why.append(f"with {suite.batched_what} the batched pass differs from single "
                           f"steps by {suite.batched_bound:.3g} logits; kernels do not explain "
                           f"that (at most {suite.batched_ceiling:g} there): the batched path "
                           "(tree mask, positions or kept cache) is wrong")
        if exact is not None and exact is not self.greedy and exact.drafted == 0:
            why.append(f"the {exact.mode} run (a child process) drafted nothing, so its "
                       "identity shows nothing about speculation")
        first = self.greedy.divergences[0] if self.greedy.divergences else {}
        if self.greedy.noise_beyond_kernels:
            why.append(f"in the {self.greedy.mode} mode the batched pass differs from single "
                       f"steps by {self.greedy.noise_bound:.3g} logits; kernels do not explain "
                       f"that (at most {self.greedy.noise_ceiling:g} in this arithmetic)")
        if exact is None and not self.greedy.identical:
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
        if self.sampled_drafted == 0:
            why.append("the sampled runs drafted nothing, so the sampled test shows nothing "
                       "about the accept/reject rule")
        if self.p_value < self.threshold:
            why.append(f"the sampled test failed: p = {self.p_value:.3g} < {self.threshold:g} "
                       "(the emitted tokens do not follow the target's distribution)")
        return why

    def counts(self) -> str:
        """Draft tokens judged and accepted by each part of the check."""
        parts = [f"{self.greedy.mode} greedy {self.greedy.drafted} drafted / "
                 f"{self.greedy.accepted} accepted"]
        if self.exact is not None and self.exact is not self.greedy:
            parts.append(f"{self.exact.mode} greedy {self.exact.drafted} / "
                         f"{self.exact.accepted}")
        parts.append(f"sampled {self.sampled_drafted} / {self.sampled_accepted}")
        return "; ".join(parts)

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
        idle = self.idle_settings()
        untested = (f"; {', '.join(idle)} drafted nothing on these prompts (the drafter or "
                    "controller declined every draft), so this check shows nothing about "
                    f"{'it' if len(idle) == 1 else 'them'}") if idle else ""
        return (f"PASS: {exact}{default}sampled output follows the target's distribution "
                f"(p = {self.p_value:.3g}); draft tokens judged / accepted: {self.counts()}"
                f"{untested}")

    def idle_settings(self) -> list[str]:
        """The suite's settings whose speculative runs judged no draft token, in any mode."""
        suites = [s for s in (self.greedy, self.exact) if s is not None]
        return [name for name in self.greedy.settings
                if any(s.settings.get(name, [0])[0] == 0 for s in suites)]

    def to_dict(self) -> dict[str, Any]:
        exact = self.exact
        return {
            "passed": self.passed, "verdict": self.verdict(), "failures": self.failures(),
            "greedy_identical": self.greedy_identical,
            "exact_kernels_identical": self.exact_kernels_identical,
            "mode": self.greedy.mode, "exact_mode": exact.mode if exact else None,
            "divergences": self.greedy.divergences,
            "exact_kernels_divergences": exact.divergences if exact else [],
            "noise_bound": self.greedy.noise_bound, "noise_ceiling": self.greedy.noise_ceiling,
            "greedy_prompts": self.greedy.prompts, "settings": self.greedy.settings,
            "drafted": self.greedy.drafted, "accepted": self.greedy.accepted,
            "exact_drafted": exact.drafted if exact else None,
            "exact_accepted": exact.accepted if exact else None,
            "exact_settings": exact.settings if exact else {},
            "settings_that_drafted_nothing": self.idle_settings(),
            "batched_what": exact.batched_what if exact else "",
            "batched_bound": exact.batched_bound if exact else None,
            "batched_ceiling": exact.batched_ceiling if exact else None,
            "sampled_drafted": self.sampled_drafted,
            "sampled_accepted": self.sampled_accepted, "sampled_prompt": self.sampled_prompt,
            "p_value": self.p_value, "p_first": self.p_first, "p_second": self.p_second,
            "samples": self.samples, "temperature": self.temperature, "top_k": self.top_k,
            "draft_max": self.draft_max, "threshold": self.threshold, "notes": self.notes,
            "sampled_modes": self.sampled_modes,
        }


def _where(d: dict[str, Any]) -> str:
    if not d:
        return ""
    setting = f" with {d['setting']}" if d.get("setting") else ""
    return (f" at generated token {d['position']} of {d['prompt']!r}{setting} "
            f"({d['plain_text']!r} plain, {d['other_text']!r} speculative)")


def _run(pair: LoadedPair, config: DecodeConfig, prompt_ids: list[int],
         plain: bool) -> Session:
    session = build_session(pair, config, plain=plain)
    for _ in session.steps(prompt_ids):
        pass
    return session


def suite_settings(config: DecodeConfig) -> list[tuple[str, DecodeConfig]]:
    """The user's settings, greedy; and a tree and adaptive k where the user runs neither, so
    their code paths are checked too."""
    greedy = replace(config, sampling=SamplingParams())
    settings = [("your settings", greedy)]
    if config.tree_width == 1:  # branching wherever the draft has a second candidate
        settings.append(("tree width 2", replace(greedy, tree_width=2, draft_p_split=0.0)))
    if not config.adaptive:
        settings.append(("adaptive k", replace(greedy, adaptive=True)))
    return settings


def greedy_suite(pair: LoadedPair, config: DecodeConfig, prompts: list[str], mode: str,
                 exact_kernels: bool) -> GreedySuite:
    """Plain and speculative greedy text for each prompt and each of suite_settings; each
    run's first difference with the target's top-two margins there in both runs, judged
    against the kernels' measured noise (zero in the exact mode: there every difference is a
    failure)."""
    model = pair.target
    tap = MarginTap(model)
    pair.target = tap
    differing = []
    suite = GreedySuite(mode=mode, identical=True, prompts=len(prompts))
    try:
        settings = suite_settings(config)
        for prompt in prompts:
            ids = model.tokenize(prompt)
            tap.top = {}
            plain = list(_run(pair, settings[0][1], ids, plain=True).output_ids)
            plain_top = tap.top
            for name, setting in settings:
                tap.top = {}
                session = _run(pair, setting, ids, plain=False)
                counts = suite.settings.setdefault(name, [0, 0])
                counts[0] += session.stats.drafted
                counts[1] += session.stats.accepted
                spec = list(session.output_ids)
                if plain != spec:
                    differing.append((prompt, name, len(ids), plain, spec, plain_top,
                                      dict(tap.top)))
    finally:
        pair.target = model
    suite.drafted = sum(c[0] for c in suite.settings.values())
    suite.accepted = sum(c[1] for c in suite.settings.values())
    suite.identical = not differing
    if differing and not exact_kernels:
        suite.noise_bound = cached_kernel_noise(model).bound
        suite.noise_ceiling = noise_ceiling(model)
    for prompt, name, n_prompt, plain, spec, plain_top, spec_top in differing:
        found = explain_divergence(n_prompt, plain, spec, plain_top, spec_top, model.token_text,
                                   suite.noise_bound or 0.0)
        if found is not None:
            suite.divergences.append(divergence_entry(prompt, found, name))
    return suite


def exact_mode_suite(pair: LoadedPair, config: DecodeConfig, prompts: list[str],
                     progress: Progress | None = None) -> GreedySuite:
    """The greedy suite in the exact mode, and the batched path measured against single
    steps where the arithmetic allows no doubt."""
    say = progress or (lambda message: None)
    say("the batched path against single steps")
    check = batched_path_check(pair)
    if check is not None:  # tree rows off the first path are trusted only beyond their noise
        config = replace(config, tie_bound=max(config.tie_bound, check.tree_bound))
    suite = greedy_suite(pair, config, prompts, user_mode(pair)[0], exact_kernels=True)
    if check is not None:
        suite.batched_what, suite.batched_bound = check.what, check.bound
        suite.batched_ceiling = check.ceiling
    return suite


def divergence_entry(prompt: str, d: Divergence, setting: str = "") -> dict[str, Any]:
    """A divergence as check-exact reports it: where, both runs' top-two margins, the bound."""
    return {"prompt": prompt, "setting": setting, "position": d.position,
            "plain_text": d.plain_text, "other_text": d.other_text,
            "margins": {"plain": d.plain_logit_gap, "speculative": d.other_logit_gap},
            "gap_moved": d.gap_moved, "noise_bound": d.noise_bound, "near_tie": d.near_tie,
            "reason": d.reason}


def user_mode(pair: LoadedPair) -> tuple[str, bool]:
    """The mode this pair runs in, and whether it is already the exact one."""
    target = pair.target
    exact = pair.spec.batch_invariant
    if target.backend == "llamacpp":
        if exact and target.device != "cpu":  # the exact kernels are CPU settings
            return f"exact kernels asked, with layers on the {target.device}", False
        return ("exact kernels on the CPU" if exact else "fast kernels"), exact
    dtype = str(getattr(target, "dtype", "default dtype"))
    return (f"torch {dtype}, one token per pass" if exact else f"torch {dtype}"), exact


def check_greedy(pair: LoadedPair, config: DecodeConfig,
                 progress: Progress | None = None) -> tuple[GreedySuite, GreedySuite | None]:
    """The greedy suite in the user's mode, and in the exact mode (the same suite when the
    user runs that already; None where the backend has no such mode here)."""
    say = progress or (lambda message: None)
    mode, already_exact = user_mode(pair)
    say(f"greedy identity over {len(GREEDY_PROMPTS)} prompts ({mode})")
    if already_exact:
        suite = exact_mode_suite(pair, config, GREEDY_PROMPTS, say)
        return suite, suite
    suite = greedy_suite(pair, config, GREEDY_PROMPTS, mode, exact_kernels=False)
    if not has_exact_mode(pair.target.backend):
        return suite, None
    say(f"greedy identity again with {exact_mode_name(pair.spec)} (a child process)")
    exact = GreedySuite.from_dict(run_exact_mode(pair.spec, config))
    return suite, exact


def sampling_params(config: DecodeConfig, target_order: str) -> tuple[SamplingParams, list[str]]:
    """The user's sampling settings for the sampled test, made testable: a temperature
    above 0 and a small support (top-k) where the user gives none; notes say what changed."""
    user = config.sampling
    notes = []
    temperature = user.temperature if user.temperature > 0 else 1.0
    top_k = user.top_k if user.top_k > 0 else DEFAULT_TOP_K
    if user.temperature <= 0:
        notes.append("your settings are greedy: the sampled test runs at temperature 1")
    if user.top_k <= 0:
        notes.append(f"the sampled test adds top-k {DEFAULT_TOP_K} (a small support gives "
                     "the G-test its power)")
    params = replace(user, temperature=temperature, top_k=top_k, order=target_order, seed=None)
    params.validate()
    return params, notes


def check_exact(pair: LoadedPair, choice: DrafterChoice, samples: int = 200,
                draft_max: int = 4, temperature: float = 1.0, top_k: int = DEFAULT_TOP_K,
                n_predict: int = DEFAULT_N_PREDICT, seed: int = 0,
                progress: Progress | None = None,
                config: DecodeConfig | None = None) -> ExactReport:
    """What drafts is `choice`. `config`: the user's decode settings (the CLI's flags);
    without it, a chain of draft_max with the sampled test at `temperature` and `top_k`."""
    if not choice:
        raise SettingsError("check-exact needs a draft — give a draft model, --ngram, "
                            "--suffix, --draft-heads, --self-draft-layers or --draft-mtp")
    if samples < 20:
        raise SettingsError(f"--samples must be at least 20 for the test to mean anything "
                            f"(got {samples})")
    if config is None:
        if temperature <= 0:
            raise SettingsError("the sampled test needs a temperature above 0 (e.g. --temp 1)")
        config = DecodeConfig(n_predict=n_predict, draft_max=draft_max,
                              sampling=SamplingParams(temperature=temperature, top_k=top_k))
    config = replace(config, drafter=choice)
    config.validate()
    say = progress or (lambda message: None)
    greedy, exact = check_greedy(pair, config, say)
    # the exact distributions in the target runtime's sampler order, as the session uses
    params, notes = sampling_params(config, pair.target.sampler_order)
    sampled = sampled_test(pair, config, params, samples, seed, say)
    p_first, p_second = sampled.p_first, sampled.p_second
    modes = sampled.modes
    if config.adaptive:
        notes.append("the sampled runs draft every step (adaptive k off): only the accept "
                     "rule is under test there")
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
    elif pair.target.backend == "llamacpp" and pair.target.device != "cpu":
        notes.append(f"the exact-kernels run used the CPU only (-ngl 0, no RPC): llama.cpp's "
                     f"batch-invariant kernels are CPU settings, so on {pair.target.device} "
                     "greedy identity is checked on the CPU, not on your device")
    return ExactReport(
        greedy=greedy, exact=exact, p_value=min(1.0, 2.0 * min(p_first, p_second)),
        p_first=p_first, p_second=p_second, samples=samples, temperature=params.temperature,
        top_k=params.top_k, draft_max=config.draft_max, notes=notes, sampled_modes=modes,
        sampled_prompt=sampled.prompt, sampled_drafted=sampled.drafted,
        sampled_accepted=sampled.accepted,
    )
