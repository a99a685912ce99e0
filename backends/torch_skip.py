"""The target with a set of its decoder layers left out, for a self-draft (transformers).

The skipped model is a shallow copy of the loaded one: the same parameter tensors, a layer
list of the kept layers, a config that says how many. Each kept layer keeps its own index,
so it reads and writes its own slot of a KV cache: the draft runs inside the target's own
cache (`borrow`), where the verify pass has written every layer's keys and values for the
committed text. What the draft appends to its kept layers past the target's tokens it drops
again (release) before the target's next pass, as any draft rolls back its own tokens.

A draft without `borrow` holds its own cache for its kept layers: the same computation per
step, for timing it where the target's cache must stay as it is.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import numpy as np

from backends.base import BackendError
from backends.torch_runtime import attention_kernels


def without_layers(model: Any, skip: frozenset[int]) -> Any:
    """A shallow copy of a causal LM that runs only the layers not in `skip` (the same
    parameters; only the module dicts on the path to the layer list are new). The config copy
    says how many layers run and of which attention type each is (transformers' decoder
    loops run `layers[:config.num_hidden_layers]` and pick each one's mask by its place)."""
    import torch

    base_name = model.base_model_prefix
    base = getattr(model, base_name)
    kept = [i for i in range(len(base.layers)) if i not in skip]
    config = copy.copy(model.config)
    types = getattr(model.config, "layer_types", None)
    if types:
        config.layer_types = [types[i] for i in kept]
    config.num_hidden_layers = len(kept)
    inner = copy.copy(base)
    inner.__dict__["_modules"] = dict(base._modules)
    inner.layers = torch.nn.ModuleList([base.layers[i] for i in kept])
    inner.config = config
    outer = copy.copy(model)
    outer.__dict__["_modules"] = dict(model._modules)
    setattr(outer, base_name, inner)
    outer.config = config
    return outer


def check_skip_set(skip: frozenset[int], n_layers: int, name: str) -> None:
    if not skip or min(skip) < 1 or max(skip) >= n_layers:
        raise BackendError(f"{name} has {n_layers} layers; a self-draft skips some of layers "
                           f"1 to {n_layers - 1} (got {sorted(skip)})")


class TorchSkipDraft:
    """The target without the `skip` layers, as a model of its own (see the module doc)."""

    backend = "torch"
    sampler_order = "transformers"

    def __init__(self, target: Any, skip: frozenset[int], borrow: bool) -> None:
        """target: the loaded backends.torch_hf.TorchModel."""
        check_skip_set(skip, target.n_layers, target.name)
        self._target = target
        self._torch = target._torch
        self.skip = skip
        self.kept = [i for i in range(target.n_layers) if i not in skip]
        self.model = without_layers(target.model, skip)
        self.borrow = borrow
        # the caller names it (app.models.self_skip: the skip set in the project's words)
        self.name = f"{target.name} · {len(self.kept)} of {target.n_layers} layers"
        self.path = target.path
        self.device = target.device
        self.n_vocab = target.n_vocab
        self.n_ctx = target.n_ctx
        self.eos_ids = target.eos_ids
        self.caveats: list[str] = []
        self._own_cache = target._cache_cls()  # without borrow: its kept layers' cache
        self._appended = 0  # tokens in its kept layers past the target's (borrow)
        self._cache_seen: Any = None  # the target cache object those were appended to

    # --- what it shares with the target --------------------------------------------------
    @property
    def speed_key(self) -> str:
        return f"{self._target.speed_key}|skip={','.join(map(str, sorted(self.skip)))}"

    @property
    def n_embd(self) -> int:
        return int(self._target.n_embd)

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return [int(t) for t in self._target.tokenize(text, add_special)]

    def detokenize(self, ids: Sequence[int]) -> str:
        return str(self._target.detokenize(ids))

    def token_text(self, token: int) -> str:
        return str(self._target.token_text(token))

    def chat_prompt(self, user_text: str) -> str:
        return str(self._target.chat_prompt(user_text))

    # --- its cache -----------------------------------------------------------------------
    def _cache(self) -> Any:
        return self._target._cache if self.borrow else self._own_cache

    @property
    def n_cached(self) -> int:
        if not self.borrow:
            return self._own_length()
        if self._cache_seen is not self._target._cache:
            self._appended = 0  # the target started a new cache: nothing of ours is in it
        return int(self._target.n_cached) + self._appended

    def _own_length(self) -> int:
        layers = self._own_cache.layers
        first = self.kept[0]
        return int(layers[first].get_seq_length()) if len(layers) > first else 0

    def truncate(self, n: int) -> None:
        """Roll back to the first n tokens; a borrowing draft cannot go below the target's."""
        drop = self.n_cached - n
        if drop <= 0:
            return
        if self.borrow and n < self._target.n_cached:
            raise BackendError("a self-draft inside the target's cache cannot roll back the "
                               f"target's tokens (asked for {n} of {self._target.n_cached})")
        if not self.borrow and n == 0:
            self._own_cache = self._target._cache_cls()
            return
        layers = self._cache().layers
        for i in self.kept:
            layers[i].crop(-drop)
        if self.borrow:
            self._appended -= drop

    def release(self) -> None:
        """Drop what this draft appended to the target's cache (borrow): the target's next
        pass must find every layer holding its tokens only."""
        if self.borrow:
            self.truncate(self._target.n_cached)

    # --- passes --------------------------------------------------------------------------
    def extend(self, ids: Sequence[int], n_logits: int) -> np.ndarray:
        return self._pass(ids, n_logits, hidden=False)[0]

    def extend_hidden(self, ids: Sequence[int], n_logits: int) -> tuple[np.ndarray, np.ndarray]:
        logits, hidden = self._pass(ids, n_logits, hidden=True)
        assert hidden is not None
        return logits, hidden

    def _pass(self, ids: Sequence[int], n_logits: int, hidden: bool
              ) -> tuple[np.ndarray, np.ndarray | None]:
        torch = self._torch
        start = self.n_cached
        if start + len(ids) > self.n_ctx:
            raise BackendError(f"context full ({self.n_ctx} tokens) — shorten the prompt or "
                               "lower n-predict")
        cache = self._cache()
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        positions = torch.arange(start, start + len(ids), device=self.device).unsqueeze(0)
        with torch.inference_mode(), attention_kernels(self.device):
            out = self.model(input_ids=input_ids, position_ids=positions, use_cache=True,
                             logits_to_keep=max(1, n_logits), output_hidden_states=hidden,
                             **{self._target._cache_keyword: cache})
        if self.borrow:
            self._appended += len(ids)
            self._cache_seen = cache
        states = None
        if hidden:  # the last entry is after the final norm: what the output head reads
            last = out.hidden_states[-1][0, len(ids) - n_logits:]
            states = np.asarray(last.float().cpu().numpy())
        if n_logits == 0:
            return np.zeros((0, self.n_vocab), dtype=np.float32), states
        return self._target._rows(out.logits[0, -n_logits:]), states

    def extend_tree(self, ids: Sequence[int], parents: Sequence[int], n_skip: int
                    ) -> tuple[np.ndarray, list[bool]]:
        raise BackendError("a self-draft drafts chains; the target verifies trees")

    def prepare_tree_passes(self) -> None:
        """A draft verifies no trees."""

    def keep_path(self, path: Sequence[int]) -> None:
        raise BackendError("a self-draft drafts chains; the target verifies trees")

    def close(self) -> None:
        self.release()
        self._own_cache = self._target._cache_cls()


class TorchSkipScorer:
    """The target without a set of layers, read for the self-draft's search: the argmax at
    every position from one pass without a cache (the target's own cache is not touched)."""

    def __init__(self, target: Any) -> None:
        self._target = target
        self.n_layers = int(target.n_layers)

    def skipped_argmax(self, ids: Sequence[int], skip: frozenset[int],
                       head: np.ndarray | None = None) -> np.ndarray:
        target = self._target
        torch = target._torch
        model = without_layers(target.model, skip) if skip else target.model
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=target.device)
        with torch.inference_mode(), attention_kernels(target.device):
            out = model(input_ids=input_ids, use_cache=False, logits_to_keep=0)
        logits = out.logits[0]
        if head is None:
            return np.asarray(logits.argmax(-1).cpu().numpy())
        rows = torch.as_tensor(head, dtype=torch.long, device=logits.device)
        return np.asarray(np.asarray(head)[logits[:, rows].argmax(-1).cpu().numpy()])

    def layer_bytes(self) -> tuple[int, list[int]]:
        """The output head's weight bytes (with the final norm), and each decoder layer's."""
        model = self._target.model
        base = getattr(model, model.base_model_prefix)

        def size(module: Any) -> int:
            return sum(p.numel() * p.element_size() for p in module.parameters())

        head = size(model.get_output_embeddings()) + size(base.norm)
        return head, [size(layer) for layer in base.layers]

    def close(self) -> None:
        """Holds nothing of its own."""
