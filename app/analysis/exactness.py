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
have drafted: identity of runs that never drafted shows nothing. The user's own settings are
judged first: where they drafted no token in the greedy suite, the check says "not checked"
(what the added settings showed is about other settings), and lists any failure found besides.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from app.analysis.divergence import Divergence, MarginTap, explain_divergence
from app.analysis.exact_mode import (
    batched_path_check,
    exact_mode_name,
    has_exact_mode,
    run_exact_mode,
)
from app.analysis.exact_report import YOUR_SETTINGS, ExactReport, GreedySuite
from app.analysis.exact_sampled import NEARLY_SURE, sampled_test
from app.analysis.kernel_noise import cached_kernel_noise, noise_ceiling
from app.engine.decode_config import DecodeConfig, DrafterChoice
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.errors import SettingsError
from app.models.loading import LoadedPair
from app.runs import build_session

# ExactReport and GreedySuite live in app.analysis.exact_report; the window imports them here
__all__ = ["DEFAULT_N_PREDICT", "EXACTNESS_SENTENCE", "GREEDY_PROMPTS", "ExactReport",
           "GreedySuite", "check_exact", "check_greedy", "divergence_entry",
           "exact_mode_suite", "greedy_suite", "suite_settings", "user_mode"]

# What holds in which mode, said the same way by the README, `--help` and the window.
EXACTNESS_SENTENCE = (
    "Greedy output is bit-identical to plain decoding in the exact mode (--exact-kernels: "
    "llama.cpp's batch-invariant kernels, which hold on the CPU only; torch: one token per "
    "pass); in the default fast mode it may part from plain decoding only at near-ties within "
    "the kernels' measured noise, and sampled output follows the target's distribution as the "
    "verify pass computes it, which differs from plain steps by up to that noise — check your "
    "own pair and settings with `draftlens check-exact`.")

GREEDY_PROMPTS = (
    "def fibonacci(n):\n",
    "The quick brown fox",
    "import numpy as np\n\nx = np.",
    "the cat sat on the mat. the cat sat on the",
)
DEFAULT_TOP_K = 20
DEFAULT_N_PREDICT = 32

Progress = Callable[[str], None]


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
    settings = [(YOUR_SETTINGS, greedy)]
    if config.tree_width == 1:  # branching wherever the draft has a second candidate
        settings.append(("tree width 2", replace(greedy, tree_width=2, draft_p_split=0.0)))
    if not config.adaptive:
        settings.append(("adaptive k", replace(greedy, adaptive=True)))
    return settings


def greedy_suite(pair: LoadedPair, config: DecodeConfig, prompts: Sequence[str], mode: str,
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
        noise = cached_kernel_noise(model)
        suite.noise_bound, suite.tree_noise_bound = noise.chain_bound, noise.tree_bound
        suite.noise_ceiling = noise_ceiling(model)
    trees = {name for name, setting in settings if setting.tree_width > 1}
    for prompt, name, n_prompt, plain, spec, plain_top, spec_top in differing:
        bound = max(suite.noise_bound or 0.0, suite.tree_noise_bound or 0.0) if name in trees \
            else suite.noise_bound or 0.0  # a chain run's rows are chain rows only
        found = explain_divergence(n_prompt, plain, spec, plain_top, spec_top, model.token_text,
                                   bound)
        if found is not None:
            suite.divergences.append(divergence_entry(prompt, found, name))
    return suite


def exact_mode_suite(pair: LoadedPair, config: DecodeConfig, prompts: Sequence[str],
                     progress: Progress | None = None) -> GreedySuite:
    """The greedy suite in the exact mode, and the batched path measured against single
    steps where the arithmetic allows no doubt."""
    say = progress or (lambda message: None)
    say("the batched path against single steps")
    check = batched_path_check(pair)
    if check is not None:  # rows not marked exact are trusted only beyond their noise
        config = replace(config, tie_bound=max(config.tie_bound, check.tree_bound))
    suite = greedy_suite(pair, config, prompts, user_mode(pair)[0], exact_kernels=True)
    if check is not None:
        suite.batched_what, suite.batched_bound = check.what, check.bound
        suite.batched_ceiling = check.ceiling
        suite.batched_tree_bound, suite.batched_tree_ceiling = (check.tree_bound,
                                                                check.tree_ceiling)
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


def check_greedy(pair: LoadedPair, config: DecodeConfig, progress: Progress | None = None,
                 cancelled: Callable[[], bool] | None = None,
                 prompts: Sequence[str] = GREEDY_PROMPTS,
                 ) -> tuple[GreedySuite, GreedySuite | None]:
    """The greedy suite on `prompts` in the user's mode, and in the exact mode (the same
    suite when the user runs that already; None where the backend has no such mode here).
    `cancelled()` True while the exact-mode child runs ends it (CheckCancelled)."""
    say = progress or (lambda message: None)
    mode, already_exact = user_mode(pair)
    prompts = list(prompts)
    say(f"greedy identity over {len(prompts)} prompts ({mode})")
    if already_exact:
        suite = exact_mode_suite(pair, config, prompts, say)
        return suite, suite
    suite = greedy_suite(pair, config, prompts, mode, exact_kernels=False)
    if not has_exact_mode(pair.target.backend):
        return suite, None
    say(f"greedy identity again with {exact_mode_name(pair.spec)} (a child process)")
    own = [] if prompts == list(GREEDY_PROMPTS) else prompts  # the child has these
    exact = GreedySuite.from_dict(run_exact_mode(pair.spec, config, cancelled, own))
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
                config: DecodeConfig | None = None,
                cancelled: Callable[[], bool] | None = None,
                prompts: Sequence[str] = GREEDY_PROMPTS) -> ExactReport:
    """What drafts is `choice`. `config`: the user's decode settings (the CLI's flags);
    without it, a chain of draft_max with the sampled test at `temperature` and `top_k`.
    `cancelled()` True while the exact-mode child runs ends it (CheckCancelled). `prompts`:
    the greedy suite's (the sampled test picks among its own, SAMPLED_PROMPTS)."""
    if not choice:
        raise SettingsError("check-exact needs a draft — give a draft model, --ngram, "
                            "--suffix, --draft-heads, --spec-type self or --draft-mtp")
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
    if not prompts or not all(prompt.strip() for prompt in prompts):
        raise SettingsError("the greedy suite needs prompts with some text (-p)")
    greedy, exact = check_greedy(pair, config, say, cancelled, prompts)
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
