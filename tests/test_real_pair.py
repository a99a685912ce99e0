"""On the real demo pair (Qwen2.5-Coder 1.5B / 0.5B). Marked real_models: the benchmark
script runs these; CI does not, since they need the 1.6 GB download."""

from __future__ import annotations

import pytest

from app.engine.decode_config import DecodeConfig
from app.engine.drafters.chain import ChainDrafter
from app.engine.drafters.draft_model import ModelDrafter
from app.engine.drafters.lookup.edits import EditAwareLookup
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.models.demo import demo_installed, demo_paths
from app.models.pair_check import check_pair_files
from tests.helpers import assert_drafted

pytestmark = [
    pytest.mark.real_models,
    pytest.mark.skipif(not demo_installed(), reason="demo pair not installed"),
]

PROMPT = "def fibonacci(n):\n"
# resolved at import, before the per-test fixture points DRAFTLENS_HOME at a temp folder
DEMO_PATHS = demo_paths()


@pytest.fixture(scope="module")
def demo_pair():
    from backends.llamacpp import LlamaCppModel

    target, draft = (LlamaCppModel(p, n_ctx=1024) for p in DEMO_PATHS)
    yield target, draft
    target.close()
    draft.close()


def test_demo_pair_is_compatible():
    check = check_pair_files(*DEMO_PATHS)
    assert check.compatible and not check.warnings


def _generate(target, drafter, k=4, n=64):
    session = Session(target, drafter, DecodeConfig(n_predict=n, draft_max=k,
                                                    sampling=SamplingParams()))
    steps = list(session.steps(target.tokenize(PROMPT)))
    return session.output_ids, steps


@pytest.mark.parametrize("make_drafter", [
    lambda draft: ModelDrafter(draft),
    lambda draft: EditAwareLookup(),
    lambda draft: ChainDrafter([EditAwareLookup(n_min=2), ModelDrafter(draft)]),
], ids=["draft-model", "ngram", "hybrid"])
def test_greedy_speculative_equals_plain_on_the_demo_pair(demo_pair, make_drafter):
    target, draft = demo_pair
    expected, _ = _generate(target, None)
    got, steps = _generate(target, make_drafter(draft))
    assert got == expected
    assert_drafted(steps)
