"""What the engine, the bench and the window need from a loaded model: all of it is here.

Backends satisfy these protocols structurally (they never import the engine); a type checker
proves it (see app.models.loading). Nothing outside backends/ reaches past them into a
runtime's own objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import numpy as np


class LanguageModel(Protocol):
    backend: str  # "llamacpp" or "torch"
    device: str
    name: str  # the file or folder name, for labels
    path: str  # the file or folder it was loaded from
    n_vocab: int  # rows of logits a pass returns
    n_ctx: int
    eos_ids: frozenset[int]
    caveats: list[str]  # what the user should know about how it runs here, e.g. inexact kernels
    # whose sampler semantics apply to this runtime: "llama.cpp" or "transformers" (see
    # app.engine.sampling); the session processes p and q with the target's
    sampler_order: str

    @property
    def n_cached(self) -> int:
        """Tokens currently held in the KV cache."""
        ...

    @property
    def speed_key(self) -> str:
        """The load settings besides file and device that change how long a pass takes
        (GPU layers, kernels); keys the cached verify-cost curve."""
        ...

    def tokenize(self, text: str, add_special: bool = True) -> list[int]: ...

    def detokenize(self, ids: Sequence[int]) -> str: ...

    def token_text(self, token: int) -> str: ...

    def chat_prompt(self, user_text: str) -> str:
        """The user's text wrapped in the model's chat template, ready to tokenize."""
        ...

    def extend(self, ids: Sequence[int], n_logits: int) -> np.ndarray:
        """Append ids to the cache; return logits (n_logits, n_vocab) for the last positions."""
        ...

    def truncate(self, n: int) -> None:
        """Roll the cache back to its first n tokens."""
        ...

    def extend_tree(
        self, ids: Sequence[int], parents: Sequence[int], n_skip: int
    ) -> tuple[np.ndarray, list[bool]]:
        """Append a tree of tokens in one pass: ids[0] follows the cached tokens, ids[i]'s
        parent is ids[parents[i]] (parents come first; parents[0] == -1); each token sees
        only its ancestors. Returns logits for ids[n_skip:] and, per returned row, whether it
        is bit-identical to plain one-token decoding (rows off the first path may be summed
        in another order). Until keep_path, the cache holds the whole tree."""
        ...

    def prepare_tree_passes(self) -> None:
        """Called before a run that verifies trees, with the cache empty: a runtime whose
        chains run faster without room for trees makes that room now, not in a timed pass."""
        ...

    def keep_path(self, path: Sequence[int]) -> None:
        """After extend_tree: keep the nodes of `path` (indexes into ids, a chain from 0) as
        the continuation of the cache and drop the rest. A runtime may keep only a leading
        part of the path (n_cached says how much); the caller sends the rest again."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class ReferenceGenerator(Protocol):
    """A runtime that can also generate with its own decoding loop (greedy), plainly or with
    its own assisted generation, so the bench can time the peer beside DraftLens."""

    reference_passes: int  # the target's forward passes in the last reference_generate

    def reference_generate(
        self, prompt_ids: Sequence[int], n_new: int, assistant: object | None = None
    ) -> list[int]:
        """Greedy continuation of prompt_ids by the runtime itself (at most n_new tokens);
        with `assistant` (a model of the same runtime), its own speculative decoding."""
        ...


class SkipScorer(Protocol):
    """The target with a set of its layers left out, read for a self-draft's search
    (app.engine.drafters.self_skip)."""

    @property
    def n_layers(self) -> int: ...

    def skipped_argmax(self, ids: Sequence[int], skip: frozenset[int],
                       head: np.ndarray | None = None) -> np.ndarray:
        """The argmax (len(ids),) of the target without the `skip` layers at every position of
        ids, read in one pass from an empty cache (the target's own cache is left as it
        was); with `head` (token ids), the argmax among those tokens only."""
        ...

    def layer_bytes(self) -> tuple[int, list[int]]:
        """The weight bytes a step reads besides the blocks (the output head), and each
        block's."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class LayerSkipModel(Protocol):
    """A runtime that can run with a set of its layers left out (a self-draft's layers are
    chosen so)."""

    @property
    def n_layers(self) -> int: ...

    def skip_scorer(self) -> SkipScorer: ...


@runtime_checkable
class SkipDraftModel(Protocol):
    """A runtime that drafts with a set of its layers left out of its own forward, sharing its
    weights and (borrow) its KV cache: the draft's kept layers read the keys and values the
    verify pass wrote for the committed text."""

    def skip_draft(self, skip: frozenset[int], borrow: bool = True) -> LanguageModel: ...


@runtime_checkable
class BorrowingDraft(Protocol):
    """A draft that runs inside its target's KV cache: what it appended there must go before
    the target's next pass (release), and it cannot roll back below the target's tokens."""

    def release(self) -> None: ...


@runtime_checkable
class HiddenStateModel(Protocol):
    """A runtime that returns, with the logits of a pass, the final hidden state of those
    positions (after the final norm: the vector the output head reads)."""

    @property
    def n_embd(self) -> int: ...

    def extend_hidden(self, ids: Sequence[int], n_logits: int) -> tuple[np.ndarray, np.ndarray]:
        """As extend(), plus the hidden states (n_logits, n_embd) of the same rows."""
        ...


def returns_hidden(model: LanguageModel) -> bool:
    """Whether the model returns hidden states with its logits (a HiddenStateModel)."""
    return isinstance(model, HiddenStateModel)


@runtime_checkable
class ThreadedModel(Protocol):
    """A runtime whose passes run on CPU threads that can change between passes. Its models
    in one process share the cores, so a limit applies to all of them at once."""

    n_threads: int  # the threads it was loaded with: never more
    threads_now: int  # the threads its last pass ran on
    threads_auto: bool  # no thread count was asked for: the engine may decode on fewer

    def limit_threads(self, n: int | None) -> None:
        """Run the next passes (this runtime's, in this process) on at most n threads; None:
        on the threads each model was loaded with."""
        ...


@runtime_checkable
class OutputHeadModel(Protocol):
    """A runtime that can hand out rows of its output matrix: the logits of a final hidden
    state h are output_rows(ids) @ h for those ids (draft heads reuse the target's head)."""

    def output_rows(self, ids: Sequence[int]) -> np.ndarray:
        """Rows (len(ids), n_embd) of the output matrix, as float32."""
        ...


class MtpHeads(Protocol):
    """A model's own multi-token-prediction layers (llama.cpp's NextN blocks), run beside the
    target: they read the target's hidden state with the token it produced, and their own
    state after that, to guess the tokens after the next one."""

    n_heads: int  # the NextN blocks in the file (head 0 drafts every position here)

    def reset(self) -> None:
        """Forget the last generation."""
        ...

    def start(self, context: Sequence[int]) -> np.ndarray | None:
        """Catch up with the target (whose cache holds context[:-1]) and run on context[-1]:
        logits (n_vocab,) for the token after it; None where the target's cache is not
        context[:-1]."""
        ...

    def step(self, token: int) -> np.ndarray:
        """Feed the token just drafted: logits (n_vocab,) for the one after it."""
        ...


@runtime_checkable
class MtpModel(Protocol):
    """A target loaded with its own MTP layers, which keeps the hidden state of every cached
    position for them."""

    @property
    def n_mtp_heads(self) -> int: ...

    def mtp_heads(self) -> MtpHeads: ...
