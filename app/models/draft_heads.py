"""Draft heads as files: the training text the target writes itself, and the safetensors
file (head weights, the candidate vocabulary and the target's output rows for it, metadata
naming the target, n_embd, vocab, heads and rank), checked against the target on loading."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.engine.drafters.heads import HeadsWeights
from app.engine.protocol import HiddenStateModel, LanguageModel, OutputHeadModel
from app.errors import ModelFileError, SettingsError

FORMAT = "draftlens-heads-1"
MIN_POSITIONS = 64  # generation goes on past the time budget until it has this many
TOP_K_CANDIDATES = 8  # the target's top-k at every position join the candidate vocabulary

BUILTIN_PROMPTS = [
    "def fibonacci(n):\n",
    "import numpy as np\n\ndef normalize(rows):\n",
    "class Stack:\n    def __init__(self):\n",
    "Write a Python function that checks whether a string is a palindrome.\n",
    "def quicksort(items):\n",
    "# Read a CSV file and print the sum of each column\nimport csv\n",
    "The capital of France is",
    "Once upon a time, in a small village by the sea,",
    "Explain what a hash table is in two sentences.\n",
    "SELECT name, COUNT(*) FROM orders",
    "function debounce(fn, ms) {\n",
    "for i in range(10):\n",
    "#include <stdio.h>\n\nint main(void) {\n",
    "The three laws of thermodynamics are",
    "def parse_args():\n    parser = argparse.ArgumentParser(",
    "A recipe for pancakes:\n1.",
]


@dataclass
class HeadsData:
    """Training positions: hidden (N, d), labels (N, H) into vocab_ids (-1 past the text)."""

    hidden: np.ndarray
    labels: np.ndarray
    vocab_ids: np.ndarray
    output_rows: np.ndarray
    n_tokens: int  # tokens the target generated


def require_hidden(target: LanguageModel) -> HiddenStateModel:
    if not isinstance(target, HiddenStateModel) or not isinstance(target, OutputHeadModel):
        raise SettingsError(f"draft heads need the target's hidden states and output matrix, "
                            f"which the {target.backend} backend cannot give — use a draft "
                            "model or --ngram")
    return target


def read_prompts(path: str | None) -> list[str]:
    """The user's prompts, one per line (a literal \\n is a newline), or the built-in set."""
    if not path:
        return list(BUILTIN_PROMPTS)
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"cannot read prompts from {path}: {exc} — pass a UTF-8 text file "
                            "with one prompt per line") from exc
    prompts = [line.replace("\\n", "\n") for line in lines if line.strip()]
    if not prompts:
        raise SettingsError(f"{path} has no prompts — write one prompt per line")
    return prompts


def collect(
    target: LanguageModel,
    prompts: Sequence[str],
    n_heads: int,
    seconds: float,
    tokens_per_prompt: int = 128,
    say: Callable[[str], None] | None = None,
) -> HeadsData:
    """Greedy continuations of the prompts by the target itself, with its final hidden
    state at every generated position (the one it read the next token from), until the
    prompts or `seconds` run out (but not before MIN_POSITIONS)."""
    model = require_hidden(target)
    deadline = time.monotonic() + seconds
    states: list[np.ndarray] = []
    texts: list[list[int]] = []  # per prompt: the tokens each state produced, in order
    candidates: set[int] = set()
    n_tokens = 0
    last_logits = np.zeros(0)
    for n, prompt in enumerate(prompts):
        if time.monotonic() > deadline and n_tokens >= MIN_POSITIONS:
            break
        ids = target.tokenize(prompt)[: max(1, target.n_ctx - tokens_per_prompt - 1)]
        target.truncate(0)
        logits, hidden = model.extend_hidden(ids, 1)
        produced: list[int] = []
        while len(produced) < tokens_per_prompt:
            row = last_logits = logits[0]
            token = int(np.argmax(row))
            states.append(hidden[0])
            produced.append(token)
            candidates.update(int(t) for t in np.argpartition(row, -TOP_K_CANDIDATES)
                              [-TOP_K_CANDIDATES:])
            late = time.monotonic() > deadline and n_tokens + len(produced) >= MIN_POSITIONS
            if token in target.eos_ids or late:
                break
            logits, hidden = model.extend_hidden([token], 1)
        texts.append(produced)
        n_tokens += len(produced)
        if say:
            say(f"generated prompt {n + 1}/{len(prompts)}: {n_tokens} tokens so far")
    target.truncate(0)
    if n_tokens < 16:
        raise SettingsError(f"the target wrote only {n_tokens} tokens to learn from — give "
                            "more --minutes or longer prompts")
    vocab_ids = np.array(sorted(candidates | {t for text in texts for t in text}))
    index = {int(t): i for i, t in enumerate(vocab_ids)}
    labels = np.full((n_tokens, n_heads), -1, dtype=np.int64)
    row = 0
    for text in texts:
        # the state that produced text[j] is followed, head i, by text[j + i]
        for j in range(len(text)):
            for i in range(1, n_heads + 1):
                if j + i < len(text):
                    labels[row, i - 1] = index[text[j + i]]
            row += 1
    assert isinstance(target, OutputHeadModel)
    rows = np.asarray(target.output_rows([int(t) for t in vocab_ids]), dtype=np.float32)
    check_output_rows(last_logits[vocab_ids], states[-1], rows)
    return HeadsData(np.stack(states).astype(np.float32), labels, vocab_ids, rows, n_tokens)


def save_heads(path: str | Path, weights: HeadsWeights) -> None:
    from safetensors.numpy import save_file

    metadata = {"format": FORMAT, "target": weights.target, "n_embd": str(weights.n_embd),
                "vocab": str(weights.n_vocab), "heads": str(weights.n_heads),
                "rank": str(weights.rank)}
    save_file({"w1": np.ascontiguousarray(weights.w1, dtype=np.float32),
               "w2": np.ascontiguousarray(weights.w2, dtype=np.float32),
               "vocab_ids": np.ascontiguousarray(weights.vocab_ids, dtype=np.int64),
               "output_rows": np.ascontiguousarray(weights.output_rows, dtype=np.float32)},
              str(path), metadata=metadata)


def load_heads(path: str | Path, target: LanguageModel) -> HeadsWeights:
    """The heads file, refused unless it fits this target (hidden width and vocabulary)."""
    from safetensors import SafetensorError, safe_open

    file = Path(path)
    fix = f"train heads for this target: draftlens heads train --target {target.path} --out FILE"
    if not file.is_file():
        raise ModelFileError(f"draft heads not found: {path} — check the path, or {fix}")
    try:
        with safe_open(str(file), framework="numpy") as handle:
            meta = handle.metadata() or {}
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, ValueError) as exc:
        raise ModelFileError(f"{file.name} is not a draft-heads file ({exc}) — {fix}") from exc
    if meta.get("format") != FORMAT or not {"w1", "w2", "vocab_ids", "output_rows"} <= set(
            tensors):
        raise ModelFileError(f"{file.name} is not a DraftLens draft-heads file — {fix}")
    model = require_hidden(target)
    n_embd, vocab = int(meta["n_embd"]), int(meta["vocab"])
    if n_embd != model.n_embd or vocab != target.n_vocab:
        raise ModelFileError(
            f"{file.name} was trained on {meta.get('target') or 'another model'} (hidden size "
            f"{n_embd}, vocabulary {vocab}); {target.name} has hidden size {model.n_embd} and "
            f"vocabulary {target.n_vocab} — {fix}")
    return HeadsWeights(tensors["w1"], tensors["w2"], tensors["vocab_ids"],
                        tensors["output_rows"], vocab, meta.get("target", ""))


def check_output_rows(logits: np.ndarray, hidden: np.ndarray, rows: np.ndarray) -> None:
    """The heads assume the target's logits are its output rows times its final hidden state
    (no bias, no scaling); refuse a model where they are not (relative error over 5%)."""
    expected = rows @ hidden
    error = float(np.linalg.norm(logits - expected) / max(1e-6, np.linalg.norm(logits)))
    if error > 0.05:
        raise SettingsError(f"this target's logits are not its output matrix times its final "
                            f"hidden state (relative gap {error:.2f}: a bias or logit scaling) "
                            "— draft heads cannot reuse its head; use a draft model or --ngram")
