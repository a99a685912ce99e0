"""The sampled half of check-exact: do the first two tokens of many seeded speculative runs
follow the target's own distribution?

Without speculation that distribution is known exactly (one target pass for the first token;
one per possible first token for the second token's marginal), so the samples are tested
against it with a G-test rather than against a second sample; top-k keeps the support small
enough for the test to have power. The prompt is chosen per target: of a few candidates, the
one whose first token the target is least sure of (measured), among those the drafter
drafts on; where the target is nearly certain every sampler emits the same tokens and the
test can tell nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from app.analysis.stats import g_test
from app.engine.decode_config import DecodeConfig
from app.engine.protocol import LanguageModel
from app.engine.sampling import SamplingParams, process
from app.engine.session import prefill
from app.models.loading import LoadedPair
from app.runs import build_session

# candidates of several kinds (code, prose, a repeating line for copying drafters); the one
# the target is least sure how to go on from is used
SAMPLED_PROMPTS = (
    "import numpy as np\nimport",
    "def parse(line):\n    return",
    "Once upon a time, there was a",
    "the cat sat on the mat. the cat sat on the",
    "x = [1, 2, 3]\nx = [1, 2, 3]\ny =",
)
NEARLY_SURE = 0.9  # a sampled distribution whose mode has more than this tests little
PROBE_RUNS = 10  # runs that must draft something before a prompt is kept

Progress = Callable[[str], None]


@dataclass
class SampledResult:
    prompt: str
    tokens: np.ndarray  # [samples, 2] the first two emitted tokens of each run
    first: np.ndarray  # [vocab] the target's exact distribution of the first token
    second: np.ndarray  # [vocab] and of the second, marginalised over the first
    drafted: int  # draft tokens the sampled runs judged
    accepted: int

    @property
    def p_first(self) -> float:
        return g_test(self.tokens[:, 0], self.first).p_value

    @property
    def p_second(self) -> float:
        return g_test(self.tokens[:, 1], self.second).p_value

    @property
    def modes(self) -> list[float]:
        return [float(self.first.max()), float(self.second.max())]


def first_step_logits(target: LanguageModel, prompt_ids: list[int]) -> np.ndarray:
    """The logits plain decoding draws its first token from: the prompt but its last token in
    one pass, then the last token alone (app.engine.session). One pass over the whole prompt
    gives that row other bits wherever kernels depend on the pass's size, and at a top-k
    boundary other tokens: a correct sampler then fails the G-test (p = 0 on the demo target,
    where a token 4% of plain runs draw was outside that pass's top 20)."""
    prefill(target, prompt_ids)
    return np.asarray(target.extend(prompt_ids[-1:], 1)[0])


def exact_first_two(pair: LoadedPair, prompt_ids: list[int],
                    params: SamplingParams) -> tuple[np.ndarray, np.ndarray]:
    """The target's distribution of the first generated token, and the second's marginal, as
    plain decoding computes them."""
    target = pair.target
    first = process(first_step_logits(target, prompt_ids), params)
    second = np.zeros_like(first)
    for token in np.flatnonzero(first):
        second += first[token] * process(target.extend([int(token)], 1)[0], params)
        target.truncate(len(prompt_ids))
    target.truncate(0)
    return first, second


def first_token_mode(pair: LoadedPair, prompt: str, params: SamplingParams) -> float:
    target = pair.target
    mode = float(process(first_step_logits(target, target.tokenize(prompt)), params).max())
    target.truncate(0)
    return mode


def _runs(pair: LoadedPair, config: DecodeConfig, prompt_ids: list[int], seeds: range,
          out: np.ndarray, progress: Progress | None) -> tuple[int, int]:
    """The first two tokens of a speculative run per seed into out; draft tokens judged and
    accepted, summed."""
    drafted = accepted = 0
    for row, seed in enumerate(seeds):
        if progress is not None and row % 50 == 0:
            progress(f"sampled runs {row}/{len(seeds)} more")
        session = build_session(pair, replace(config, sampling=replace(config.sampling,
                                                                       seed=seed)), plain=False)
        for _ in session.steps(prompt_ids):
            if len(session.output_ids) >= 2:
                break
        out[row] = list(session.output_ids)[:2]
        drafted += session.stats.drafted
        accepted += session.stats.accepted
    return drafted, accepted


def sampled_config(config: DecodeConfig, params: SamplingParams) -> DecodeConfig:
    """The user's settings for two tokens (adaptive k off: it may decode plainly here, and
    only the accept rule is under test)."""
    return replace(config, n_predict=2, stop_at_eos=False, adaptive=False, sampling=params)


def sampled_test(pair: LoadedPair, config: DecodeConfig, params: SamplingParams,
                 samples: int, seed: int, progress: Progress | None = None) -> SampledResult:
    """`samples` seeded runs on the candidate prompt the target is least sure of, skipping
    candidates on which the first PROBE_RUNS runs drafted nothing."""
    say = progress or (lambda message: None)
    run_config = sampled_config(config, params)
    ranked = sorted(SAMPLED_PROMPTS, key=lambda p: first_token_mode(pair, p, params))
    for prompt in ranked:
        prompt_ids = pair.target.tokenize(prompt)
        tokens = np.empty((samples, 2), dtype=np.int64)
        probe = min(PROBE_RUNS, samples)
        drafted, accepted = _runs(pair, run_config, prompt_ids, range(seed, seed + probe),
                                  tokens[:probe], None)
        if drafted == 0 and prompt != ranked[-1]:
            continue
        say(f"sampled test on {prompt!r}")
        more = _runs(pair, run_config, prompt_ids, range(seed + probe, seed + samples),
                     tokens[probe:], progress)
        say("the target's exact distributions")
        first, second = exact_first_two(pair, prompt_ids, params)
        return SampledResult(prompt, tokens, first, second, drafted + more[0],
                             accepted + more[1])
    raise AssertionError("unreachable: the last candidate is always used")
