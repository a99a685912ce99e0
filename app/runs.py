"""Glue shared by the CLI and the GUI worker: prompt encoding, sessions, streamed text."""

from __future__ import annotations

import platform
from dataclasses import asdict

from app.calibration import cached_verify_curve, measure_token_cost
from app.drafters import Drafter
from app.loading import LoadedPair
from app.model_protocol import LanguageModel
from app.session import DecodeConfig, Session
from app.trace import TraceHeader


def encode_prompt(target: LanguageModel, prompt: str, chat: bool) -> list[int]:
    """Raw text as is, or wrapped in the target's chat template."""
    if chat:
        return target.tokenize(target.chat_prompt(prompt), add_special=False)
    return target.tokenize(prompt)


def make_session(pair: LoadedPair, config: DecodeConfig, plain: bool = False) -> Session:
    """A speculative session on the pair, or plain target decoding when plain=True."""
    return session_for(pair, None if plain else pair.drafter, config)


def session_for(pair: LoadedPair, drafter: Drafter | None, config: DecodeConfig) -> Session:
    """A session on the pair's target with this drafter (None: plain decoding).

    Adaptive mode starts from the verify-cost curve measured for this target and device
    (cached after the first measurement) and the draft model's measured step time.
    """
    curve = None
    if drafter is not None and config.adaptive:
        curve = cached_verify_curve(pair.target, config.draft_max)
        if pair.draft is not None and drafter.cost_hint == 0.0:
            drafter.cost_hint = measure_token_cost(pair.draft)
    return Session(pair.target, drafter, config, curve)


def trace_header(pair: LoadedPair, config: DecodeConfig, prompt: str, n_prompt: int,
                 mode: str) -> TraceHeader:
    spec = pair.spec
    draft = spec.draft or ("n-gram lookup" if spec.ngram else "")
    return TraceHeader(
        target=spec.target,
        draft=draft,
        backend=pair.target.backend,
        device=pair.target.device,
        settings={**asdict(config), "n_gpu_layers": spec.n_gpu_layers, "n_ctx": spec.n_ctx},
        versions=versions(),
        prompt=prompt,
        prompt_tokens=n_prompt,
        mode=mode,
    )


def versions() -> dict[str, str]:
    import numpy

    import app

    found = {"draftlens": app.__version__, "python": platform.python_version(),
             "numpy": numpy.__version__}
    for module, distribution in (("llama_cpp", "llama_cpp_python"), ("torch", "torch"),
                                 ("transformers", "transformers")):
        found[module] = _installed_version(module, distribution)
    return found


def _installed_version(module: str, distribution: str) -> str:
    """Read from package metadata, so asking for versions does not import torch."""
    from importlib import metadata
    from importlib.util import find_spec

    if find_spec(module) is None:
        return "not installed"
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:  # a frozen bundle may drop the metadata
        return str(getattr(__import__(module), "__version__", "unknown"))


class TextStream:
    """Turns the growing list of output ids into text increments, holding back a partial
    UTF-8 character until its last byte arrives."""

    def __init__(self, model: LanguageModel) -> None:
        self.model = model
        self.ids: list[int] = []
        self.shown = 0

    def push(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        text = self.model.detokenize(self.ids)
        ready = len(text)
        while ready > self.shown and text[ready - 1] == "\ufffd":
            ready -= 1
        piece = text[self.shown : ready]
        self.shown = ready
        return piece

    def text(self) -> str:
        return self.model.detokenize(self.ids)
