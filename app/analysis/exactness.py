"""The exactness check a user runs on their own pair.

1. Greedy identity: over a built-in prompt suite, speculative decoding must emit exactly the
   tokens plain decoding emits.
2. Sampling: the first two tokens of many independently seeded speculative runs must follow
   the target's own distribution. Without speculation that distribution is known exactly (one
   target pass for the first token; one per possible first token for the second token's
   marginal), so the samples are tested against it with a G-test rather than against a second
   sample; top-k keeps the support small enough for the test to have power.
The p-value is the smaller of the two tests', Bonferroni-corrected (x 2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from app.analysis.stats import g_test
from app.engine.sampling import SamplingParams, process
from app.engine.session import DecodeConfig
from app.errors import SettingsError
from app.models.loading import LoadedPair
from app.runs import build_session

GREEDY_PROMPTS = [
    "def fibonacci(n):\n",
    "The quick brown fox",
    "import numpy as np\n\nx = np.",
    "the cat sat on the mat. the cat sat on the",
]
SAMPLED_PROMPT = "def add(a, b):\n    return"
P_THRESHOLD = 1e-3  # a correct engine fails this about once in a thousand checks
DEFAULT_TOP_K = 20

Progress = Callable[[str], None]


@dataclass
class ExactReport:
    greedy_identical: bool
    greedy_prompts: int
    first_difference: dict[str, Any] | None
    p_value: float
    p_first: float
    p_second: float
    samples: int
    temperature: float
    top_k: int
    draft_max: int
    threshold: float = P_THRESHOLD
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return self.greedy_identical and self.p_value >= self.threshold

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "passed": self.passed}


def _generate(pair: LoadedPair, config: DecodeConfig, prompt_ids: list[int],
              plain: bool, stop_after: int | None = None) -> list[int]:
    session = build_session(pair, config, plain=plain)
    for _ in session.steps(prompt_ids):
        if stop_after is not None and len(session.output_ids) >= stop_after:
            break
    return list(session.output_ids)


def greedy_identity(pair: LoadedPair, draft_max: int, n_predict: int,
                    prompts: list[str]) -> tuple[bool, dict[str, Any] | None]:
    """Speculative vs plain greedy output over the prompts; the first difference, if any."""
    config = DecodeConfig(n_predict=n_predict, draft_max=draft_max)
    for prompt in prompts:
        ids = pair.target.tokenize(prompt)
        plain = _generate(pair, config, ids, plain=True)
        spec = _generate(pair, config, ids, plain=False)
        if plain != spec:
            at = next((i for i, (a, b) in enumerate(zip(plain, spec, strict=False)) if a != b),
                      min(len(plain), len(spec)))
            return False, {"prompt": prompt, "position": at,
                           "plain": pair.target.detokenize(plain[: at + 1]),
                           "speculative": pair.target.detokenize(spec[: at + 1])}
    return True, None


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


def sampled_tokens(pair: LoadedPair, prompt_ids: list[int], params: SamplingParams,
                   draft_max: int, samples: int, seed: int,
                   progress: Progress | None = None) -> np.ndarray:
    """The first two tokens of `samples` speculative runs, seeds seed, seed + 1, ..."""
    out = np.empty((samples, 2), dtype=np.int64)
    for i in range(samples):
        if progress is not None and i % 50 == 0:
            progress(f"sampled runs {i}/{samples}")
        config = DecodeConfig(n_predict=2, draft_max=draft_max, stop_at_eos=False,
                              sampling=replace(params, seed=seed + i))
        out[i] = _generate(pair, config, prompt_ids, plain=False, stop_after=2)[:2]
    return out


def check_exact(pair: LoadedPair, samples: int = 200, draft_max: int = 4,
                temperature: float = 1.0, top_k: int = DEFAULT_TOP_K, n_predict: int = 32,
                seed: int = 0, progress: Progress | None = None) -> ExactReport:
    if pair.draft is None and not pair.spec.ngram and not pair.spec.suffix:
        raise SettingsError("check-exact needs a draft — give a draft model, --ngram or "
                            "--suffix")
    if samples < 20:
        raise SettingsError(f"--samples must be at least 20 for the test to mean anything "
                            f"(got {samples})")
    if temperature <= 0:
        raise SettingsError("the sampled test needs a temperature above 0 (e.g. --temp 1)")
    say = progress or (lambda message: None)
    say(f"greedy identity over {len(GREEDY_PROMPTS)} prompts")
    identical, difference = greedy_identity(pair, draft_max, n_predict, GREEDY_PROMPTS)
    # the exact distributions in the target runtime's sampler order, as the session uses
    params = SamplingParams(temperature=temperature, top_k=top_k,
                            order=pair.target.sampler_order)
    params.validate()
    prompt_ids = pair.target.tokenize(SAMPLED_PROMPT)
    say("the target's exact distributions")
    first, second = exact_first_two(pair, prompt_ids, params)
    tokens = sampled_tokens(pair, prompt_ids, params, draft_max, samples, seed, say)
    p_first = g_test(tokens[:, 0], first).p_value
    p_second = g_test(tokens[:, 1], second).p_value
    notes = []
    if (pair.spec.ngram or pair.spec.suffix) and pair.draft is None:
        kind = "n-gram" if pair.spec.ngram else "suffix"
        notes.append(f"{kind} drafts are one-hot: the sampled test checks accept/reject only "
                     "where the prompt repeats")
    return ExactReport(
        greedy_identical=identical, greedy_prompts=len(GREEDY_PROMPTS),
        first_difference=difference, p_value=min(1.0, 2.0 * min(p_first, p_second)),
        p_first=p_first, p_second=p_second, samples=samples, temperature=temperature,
        top_k=top_k, draft_max=draft_max, notes=notes,
    )
