"""PyTorch + transformers backend: a causal LM whose KV cache is cropped on rollback."""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from backends.base import BackendError, pick_device
from backends.torch_runtime import attention_kernels, dtype_for, torch_available, torch_devices
from backends.torch_skip import TorchSkipDraft, TorchSkipScorer

_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")


class TorchModel:
    backend = "torch"
    sampler_order = "transformers"  # generate()'s warpers: temperature first, top-k, top-p, min-p

    def __init__(
        self,
        path: str | os.PathLike[str],
        device: str = "auto",
        trust_remote_code: bool = False,
        allow_pickle: bool = False,
        dtype: str | None = None,
        batch_invariant: bool = False,
    ) -> None:
        ok, why = torch_available()
        if not ok:
            raise BackendError(why)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        if not os.environ.get("DRAFTLENS_DEBUG"):
            hf_logging.set_verbosity_error()

        self._torch = torch
        self._cache_cls = DynamicCache
        path = Path(path)
        if not path.exists():
            raise BackendError(f"model not found: {path} — check the path")
        folder, gguf_file = (path.parent, path.name) if path.is_file() else (path, None)
        if gguf_file is None:
            _refuse_pickle_only(folder, allow_pickle)
        self.device = pick_device(device, *torch_devices())
        torch_dtype = getattr(torch, dtype) if dtype else dtype_for(self.device)
        kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
        if gguf_file:
            kwargs["gguf_file"] = gguf_file
        else:
            kwargs["use_safetensors"] = not allow_pickle
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(folder, **kwargs)
            self.model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch_dtype, **kwargs)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            message = str(exc).strip()
            first_line = message.splitlines()[0] if message else type(exc).__name__
            raise BackendError(
                f"transformers could not load {path}: {first_line} — check it is a causal LM "
                "folder (config.json + safetensors) or a GGUF file"
            ) from exc
        self.model.to(self.device).eval()
        self.dtype = str(torch_dtype).removeprefix("torch.")
        self.name = path.name
        self.path = str(path)
        config = self.model.config
        self.n_vocab = int(self.model.get_output_embeddings().weight.shape[0])
        self.n_ctx = int(getattr(config, "max_position_embeddings", 4096) or 4096)
        self.eos_ids = frozenset(_eos_ids(self.model, self.tokenizer))
        self.caveats: list[str] = []
        self._cache = DynamicCache()
        self._cache_keyword = cache_keyword(self.model)
        self._n_cached = 0
        self._tree_start: int | None = None  # tokens cached before an unresolved tree pass
        # the exact mode: every pass runs one token at a time, the computation of a plain step,
        # so no row can depend on how many tokens a pass holds (torch's GEMM and attention
        # kernels do: rows of a pass differ from single steps in the last bits, on a CPU in
        # float32 as on CUDA). Slower; for check-exact. A tree pass then leaves the last
        # node's path in the cache (_tree_chain: tree indexes), keep_path the path asked.
        self.batch_invariant = batch_invariant
        self._tree_ids: list[int] = []
        self._tree_chain: list[int] = []
        self._text_cache: dict[int, str] = {}
        self.reference_passes = 0  # this model's forward passes in the last reference_generate

    @property
    def n_cached(self) -> int:
        return self._n_cached

    @property
    def speed_key(self) -> str:
        return f"dtype={self.dtype}"

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=add_special))

    def detokenize(self, ids: Sequence[int]) -> str:
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=False))

    def token_text(self, token: int) -> str:
        text = self._text_cache.get(token)
        if text is None:
            text = self.tokenizer.decode([token], skip_special_tokens=False)
            self._text_cache[token] = text
        return text

    def chat_prompt(self, user_text: str) -> str:
        if not getattr(self.tokenizer, "chat_template", None):
            raise BackendError(
                f"{self.name} has no chat template — run without --chat (raw prompt)"
            )
        messages = [{"role": "user", "content": user_text}]
        return str(self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        ))

    @property
    def n_embd(self) -> int:
        return int(self.model.config.hidden_size)

    def output_rows(self, ids: Sequence[int]) -> np.ndarray:
        weight = self.model.get_output_embeddings().weight
        with self._torch.no_grad():
            rows = weight[self._torch.as_tensor(list(ids), dtype=self._torch.long)]
            return np.asarray(rows.float().cpu().numpy(), dtype=np.float32)

    def extend(self, ids: Sequence[int], n_logits: int) -> np.ndarray:
        return self._forward(ids, n_logits, hidden=False)[0]

    def extend_hidden(self, ids: Sequence[int], n_logits: int) -> tuple[np.ndarray, np.ndarray]:
        logits, hidden = self._forward(ids, n_logits, hidden=True)
        assert hidden is not None
        return logits, hidden

    def _forward(
        self, ids: Sequence[int], n_logits: int, hidden: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        if not self.batch_invariant or len(ids) <= 1:
            return self._pass(ids, n_logits, hidden)
        rows, states = [], []
        for i, token in enumerate(ids):
            wanted = int(i >= len(ids) - n_logits)
            logits, state = self._pass([token], wanted, hidden)
            rows.append(logits)
            if state is not None:
                states.append(state)
        return (np.concatenate(rows), np.concatenate(states) if hidden else None)

    def _pass(
        self, ids: Sequence[int], n_logits: int, hidden: bool
    ) -> tuple[np.ndarray, np.ndarray | None]:
        torch = self._torch
        if not ids:
            return (np.zeros((0, self.n_vocab), dtype=np.float32),
                    np.zeros((0, self.n_embd), dtype=np.float32) if hidden else None)
        if self._n_cached + len(ids) > self.n_ctx:
            raise BackendError(
                f"context full ({self.n_ctx} tokens) — shorten the prompt or lower n-predict"
            )
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        with torch.inference_mode(), attention_kernels(self.device):
            out = self.model(
                input_ids=input_ids,
                use_cache=True,
                logits_to_keep=max(1, n_logits),
                output_hidden_states=hidden,
                **{self._cache_keyword: self._cache},
            )
        self._cache = getattr(out, self._cache_keyword)
        self._n_cached += len(ids)
        states = None
        if hidden:  # the last entry is after the final norm: what the output head reads
            last = out.hidden_states[-1][0, len(ids) - n_logits:] if n_logits else None
            states = (np.asarray(last.float().cpu().numpy()) if last is not None
                      else np.zeros((0, self.n_embd), dtype=np.float32))
        if n_logits == 0:
            return np.zeros((0, self.n_vocab), dtype=np.float32), states
        return self._rows(out.logits[0, -n_logits:]), states

    def _rows(self, logits: Any) -> np.ndarray:
        """Logits as numpy, float32 but for a float64 model: its rows stay float64 from the
        last hidden state on, as check-exact's float64 check of the batched path needs
        (float32 rounds a logit of 16 or more in steps of 1.9e-6, above that check's 1e-6)."""
        if logits.dtype != self._torch.float64:
            logits = logits.float()
        return np.asarray(logits.cpu().numpy())

    def truncate(self, n: int) -> None:
        if self._tree_start is not None:  # a tree pass not followed by keep_path
            self._tree_start = None
        self._crop(n)

    def _crop(self, n: int) -> None:
        if n >= self._n_cached:
            return
        if n == 0:
            self._cache = self._cache_cls()
        else:
            # transformers 5.x: a negative count removes that many tokens from the end
            self._cache.crop(n - self._n_cached)
        self._n_cached = n

    def extend_tree(
        self, ids: Sequence[int], parents: Sequence[int], n_skip: int
    ) -> tuple[np.ndarray, list[bool]]:
        """One forward pass with a 4-D attention mask (each token sees the cache and its
        ancestors) and positions by depth; in the exact mode, each node one token at a time
        on its own path."""
        torch = self._torch
        n = len(ids)
        if self._n_cached + n > self.n_ctx:
            raise BackendError(
                f"context full ({self.n_ctx} tokens) — shorten the prompt or lower n-predict"
            )
        if self.batch_invariant:
            return self._tree_one_at_a_time(ids, parents, n_skip)
        sees = torch.zeros((n, n), dtype=torch.bool)
        depths = [0] * n
        for i in range(n):
            if i > 0:
                sees[i] = sees[parents[i]]
                depths[i] = depths[parents[i]] + 1
            sees[i, i] = True
        past = self._n_cached
        allowed = torch.cat([torch.ones((n, past), dtype=torch.bool), sees], dim=1)
        dtype = self.model.dtype
        mask = torch.zeros((1, 1, n, past + n), dtype=dtype)
        mask.masked_fill_(~allowed, torch.finfo(dtype).min)
        positions = torch.tensor([[past + d for d in depths]], device=self.device)
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        with torch.inference_mode(), attention_kernels(self.device):
            out = self.model(
                input_ids=input_ids,
                attention_mask=mask.to(self.device),
                position_ids=positions,
                use_cache=True,
                logits_to_keep=n - n_skip,
                **{self._cache_keyword: self._cache},
            )
        self._cache = getattr(out, self._cache_keyword)
        self._tree_start = past
        self._n_cached = past + n
        return self._rows(out.logits[0, -(n - n_skip):]), [False] * (n - n_skip)

    def prepare_tree_passes(self) -> None:
        """A tree pass needs nothing made in advance here."""

    def keep_path(self, path: Sequence[int]) -> None:
        """Keeps exactly the path: the cache's tensors are re-indexed, nothing is recomputed."""
        if self._tree_start is None:
            raise BackendError("keep_path needs a tree pass first")
        past = self._tree_start
        if self.batch_invariant:
            self._tree_start = None
            self._go_to(past, self._tree_ids, list(path))
            return
        keep = self._torch.tensor([*range(past), *(past + i for i in path)], device=self.device)
        for layer in self._cache.layers:
            layer.keys = layer.keys.index_select(-2, keep)
            layer.values = layer.values.index_select(-2, keep)
        self._n_cached = past + len(path)
        self._tree_start = None

    def _tree_one_at_a_time(
        self, ids: Sequence[int], parents: Sequence[int], n_skip: int
    ) -> tuple[np.ndarray, list[bool]]:
        """Each node's row from a one-token step on the cache holding its ancestors (in
        preorder the path moves little from one node to the next): bit-identical to plain
        decoding of that path by construction."""
        past = self._n_cached
        self._tree_ids, self._tree_chain = list(ids), []
        rows = []
        for i in range(len(ids)):
            path = [i]
            while parents[path[0]] != -1:
                path.insert(0, parents[path[0]])
            self._go_to(past, ids, path[:-1])
            logits = self._pass([ids[i]], 1, hidden=False)[0]
            self._tree_chain.append(i)
            if i >= n_skip:
                rows.append(logits)
        self._tree_start = past
        return np.concatenate(rows), [True] * len(rows)

    def _go_to(self, past: int, ids: Sequence[int], path: list[int]) -> None:
        """Make the cache hold the `past` tokens and then the tree nodes of `path`: keep the
        part of the chain cached that starts the path, step through the rest."""
        same = 0
        while (same < min(len(path), len(self._tree_chain))
               and path[same] == self._tree_chain[same]):
            same += 1
        self._crop(past + same)
        for node in path[same:]:
            self._pass([ids[node]], 0, hidden=False)
        self._tree_chain = list(path)

    def reference_generate(
        self, prompt_ids: Sequence[int], n_new: int, assistant: object | None = None
    ) -> list[int]:
        """transformers' own greedy generate(), assisted by `assistant` (a TorchModel) if given:
        with another tokenizer than this model's, its universal assisted generation (the
        draft's text re-tokenized). `reference_passes` then counts this model's forward passes.

        It runs on its own cache, so this model's cache is left as it was."""
        torch = self._torch
        extra: dict[str, Any] = {}
        if assistant is not None:
            if not isinstance(assistant, TorchModel):
                raise BackendError("transformers' assisted generation needs a torch draft model")
            extra["assistant_model"] = assistant.model
            if assistant.tokenizer.get_vocab() != self.tokenizer.get_vocab():
                extra["tokenizer"] = self.tokenizer
                extra["assistant_tokenizer"] = assistant.tokenizer
        input_ids = torch.tensor([list(prompt_ids)], device=self.model.device)
        passes = [0]
        hook = self.model.register_forward_hook(lambda *_: passes.__setitem__(0, passes[0] + 1))
        try:  # the same attention kernels as this backend's own passes
            with torch.inference_mode(), attention_kernels(self.device):
                out = self.model.generate(
                    input_ids, attention_mask=torch.ones_like(input_ids), do_sample=False,
                    max_new_tokens=n_new, pad_token_id=self.tokenizer.eos_token_id, **extra,
                )
        finally:
            hook.remove()
        self.reference_passes = passes[0]
        return [int(t) for t in out[0, len(prompt_ids):].tolist()]

    @property
    def n_layers(self) -> int:
        return int(self.model.config.num_hidden_layers)

    def skip_draft(self, skip: frozenset[int], borrow: bool = True) -> TorchSkipDraft:
        """This model without the `skip` layers, as a draft (backends.torch_skip)."""
        return TorchSkipDraft(self, skip, borrow)

    def skip_scorer(self) -> TorchSkipScorer:
        return TorchSkipScorer(self)

    def close(self) -> None:
        self._cache = self._cache_cls()
        self.model = None


def cache_keyword(model: Any) -> str:
    """The name a model's forward() takes its KV cache by: `cache` since transformers 5.2x,
    `past_key_values` before (the old name warns there and is to go in 5.40)."""
    parameters = inspect.signature(model.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _refuse_pickle_only(folder: Path, allow_pickle: bool) -> None:
    has_safetensors = any(folder.glob("*.safetensors"))
    has_pickle = any(f.suffix in _PICKLE_SUFFIXES for f in folder.iterdir() if f.is_file())
    if not has_safetensors and has_pickle and not allow_pickle:
        raise BackendError(
            f"{folder} has only pickle weights (.bin/.pt), which can run code when loaded — "
            "convert them to safetensors, or pass --allow-pickle if you trust the source"
        )


def _eos_ids(model: Any, tokenizer: Any) -> set[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return ids
