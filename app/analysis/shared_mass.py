"""How much of a cross-vocabulary draft's probability the shared tokens hold: what TLI keeps
of the draft's distribution (the rest is renormalised away), measured on a few prompts."""

from __future__ import annotations

import numpy as np

from app.engine.drafters.draft_model.vocab_bridge import VocabBridge
from app.engine.protocol import LanguageModel
from app.engine.sampling import softmax

SAMPLE_PROMPTS = (
    "def fibonacci(n):\n    ",
    "import numpy as np\n\ndef mean(values):",
    "The capital of France is",
    "Once upon a time, in a small village,",
)


def shared_mass(draft: LanguageModel, bridge: VocabBridge,
                prompts: tuple[str, ...] = SAMPLE_PROMPTS) -> float:
    """The draft's mean probability (temperature 1) on the shared tokens, over every next-
    token position of the prompts."""
    masses = []
    for prompt in prompts:
        ids = draft.tokenize(prompt)
        draft.truncate(0)
        rows = softmax(draft.extend(ids, len(ids))[:, : bridge.draft_vocab])  # (n, V_draft)
        masses.append(rows[:, bridge.draft_ids].sum(axis=1))
    draft.truncate(0)
    return float(np.mean(np.concatenate(masses)))
