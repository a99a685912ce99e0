"""The one place a run is built, for the CLI, the bench and the window alike: a loaded pair
and decode settings become a drafter, a session and the trace header that describes them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.draft_memory import DraftMemory, prompt_fingerprint
from app.engine.cost_curve import cached_verify_curve, measure_token_cost
from app.engine.cross_vocab import TLIDrafter
from app.engine.decode_config import DecodeConfig
from app.engine.draft_model import ModelDrafter
from app.engine.drafters import Drafter
from app.engine.heads import HeadsDrafter
from app.engine.hybrid import HybridDrafter
from app.engine.lookup import block_limit
from app.engine.lookup_edits import EditAwareLookup
from app.engine.mtp import MtpDrafter
from app.engine.protocol import LanguageModel, MtpModel
from app.engine.session import Session
from app.engine.string_draft import StringDrafter
from app.engine.suffix import (
    SUFFIX_LABEL,
    RememberedRun,
    SuffixDrafter,
    SuffixOptions,
    memory_buffer,
)
from app.engine.trace import MODE_PLAIN, MODE_SPECULATIVE, TraceHeader, TraceWriter
from app.errors import SettingsError
from app.models.draft_heads import load_heads
from app.models.loading import LoadedPair, ModelSpec
from app.models.mtp import OWN_MTP_LABEL
from app.versions import versions

NGRAM_LABEL = "n-gram lookup"
# the last prompt tokens kept before each remembered output, so that the memory can draft an
# answer's first tokens too (they follow the prompt's end: a chat template's turn header)
MEMORY_LEAD_TOKENS = 4


def remembered_tokens(prompt_ids: Sequence[int], output: Sequence[int]) -> list[int]:
    """What the draft memory keeps of a run: the prompt's last MEMORY_LEAD_TOKENS, then the
    output."""
    return [*prompt_ids[-MEMORY_LEAD_TOKENS:], *output]


@dataclass
class Run:
    """A session ready to iterate over `prompt_ids`, and the header its trace starts with."""

    session: Session
    prompt_ids: list[int]
    header: TraceHeader


def finish_trace(
    writer: TraceWriter | None,
    session: Session,
    baseline: Session | None = None,
    interrupted: bool = False,
    error: str = "",
) -> dict[str, Any]:
    """The run's summary, written as the trace's last line — also when the run was cut short
    (then it says so, and why) — unless the trace itself could no longer be written."""
    summary = session.summary(baseline, interrupted=interrupted, error=error)
    if writer is not None and not writer.failed:
        writer.summary(summary)
    return summary


def encode_prompt(target: LanguageModel, prompt: str, chat: bool) -> list[int]:
    """Raw text as is, or wrapped in the target's chat template."""
    if chat:
        return target.tokenize(target.chat_prompt(prompt), add_special=False)
    return target.tokenize(prompt)


def build_drafter(pair: LoadedPair, config: DecodeConfig,
                  avoid_prompt: Sequence[int] | None = None) -> Drafter | None:
    """A fresh drafter for one run (drafters keep per-run state), or None for plain decoding.
    A suffix drafter leaves out remembered answers to `avoid_prompt` (a benchmark's prompt
    must not draft from its own earlier answer)."""
    if pair.spec.suffix:
        return suffix_drafter(pair, config, avoid_prompt)
    if pair.spec.draft_mtp:
        return mtp_drafter(pair, config)
    if pair.draft is not None:
        drafter = model_drafter(pair, pair.draft, config)
        if pair.spec.self_draft_layers:
            drafter.name = self_draft_label(pair.spec.self_draft_layers)
        if pair.spec.ngram:
            lookup = EditAwareLookup(n_min=2, limit=block_limit(pair.target))
            return HybridDrafter(drafter, lookup)
        return drafter
    if pair.spec.draft_heads:
        return heads_drafter(pair)
    if pair.spec.ngram:
        return EditAwareLookup(limit=block_limit(pair.target))
    return None


def model_drafter(pair: LoadedPair, draft: LanguageModel, config: DecodeConfig) -> Drafter:
    """A draft model's drafter: of the target's vocabulary, or across vocabularies (TLI, or
    string-level as --cross-vocab asks)."""
    cross = pair.cross
    if cross is None:
        return ModelDrafter(draft, p_min=config.draft_p_min, draft_min=config.draft_min,
                            target_vocab=pair.target.n_vocab,
                            with_hidden=bool(pair.spec.self_draft_layers))
    if pair.spec.cross_vocab == "string":
        return StringDrafter(pair.target, draft)
    return TLIDrafter(pair.target, draft, cross.bridge, p_min=config.draft_p_min,
                      draft_min=config.draft_min)


def suffix_drafter(pair: LoadedPair, config: DecodeConfig | None = None,
                   avoid_prompt: Sequence[int] | None = None) -> SuffixDrafter:
    """Suffix decoding over the prompt, the output and the pair's draft memory: its global
    suffix tree is built once and extended as runs end (rebuilt only when the runs it must
    hold change otherwise: the oldest dropped, another prompt's answers left out)."""
    options = config.suffix if config is not None else SuffixOptions()
    limit = block_limit(pair.target)
    memory = draft_memory(pair)
    if memory is None:
        return SuffixDrafter(limit=limit, options=options)
    avoid = prompt_fingerprint(avoid_prompt) if avoid_prompt is not None else ""
    runs = memory.runs(memory_key(pair), avoid, n_vocab=pair.target.n_vocab)
    held = (tuple(o.run for o in runs), options.max_depth)
    if pair.memory_index is None or pair.memory_index[0] != held:
        tree = memory_buffer([RememberedRun(o.run, o.tokens) for o in runs], options.max_depth)
        pair.memory_index = (held, tree)
    return SuffixDrafter(pair.memory_index[1], limit=limit, options=options)


def draft_memory(pair: LoadedPair) -> DraftMemory | None:
    """The pair's draft memory (--draft-memory), read once; None without one."""
    if not pair.spec.draft_memory:
        return None
    if pair.memory is None:
        pair.memory = DraftMemory.load(pair.spec.draft_memory)
    return pair.memory


def memory_key(pair: LoadedPair) -> str:
    """The target's identity in the draft memory: its file name and size (a folder: its
    name), so outputs are only ever read back as token ids of the same model."""
    path = Path(pair.spec.target)
    size = path.stat().st_size if path.is_file() else 0
    return f"{path.name}:{size}"


def remember_output(pair: LoadedPair, session: Session, prompt_ids: Sequence[int]) -> None:
    """Keep a speculative run's output in the pair's draft memory, and save it. Plain runs
    never write: a benchmark's speculative run must not draft from the plain run beside it."""
    memory = draft_memory(pair)
    if memory is None or session.drafter is None or not session.output_ids:
        return
    held = pair.memory_index
    output = memory.add(memory_key(pair), prompt_fingerprint(prompt_ids),
                        remembered_tokens(prompt_ids, session.output_ids))
    memory.save()
    if held is not None and held[0][0] == tuple(o.run for o in memory.runs(memory_key(pair))
                                               if o.run != output.run):
        # the global tree held every earlier run: it takes this one too, in place
        held[1].extend(output.run, output.tokens)
        pair.memory_index = (((*held[0][0], output.run), held[0][1]), held[1])


def heads_drafter(pair: LoadedPair) -> HeadsDrafter:
    """A drafter from the pair's heads file, read once per pair (checked against the target)."""
    if pair.heads is None:
        pair.heads = load_heads(pair.spec.draft_heads, pair.target)
    return HeadsDrafter(pair.heads, heads_label(pair.spec.draft_heads))


def mtp_drafter(pair: LoadedPair, config: DecodeConfig) -> MtpDrafter:
    """The target's own MTP layers as the drafter (the target was loaded with them)."""
    target = pair.target
    if not isinstance(target, MtpModel):
        raise SettingsError(f"{target.name} was not loaded with its MTP layers — load it "
                            "again with --draft-mtp (llama.cpp backend)")
    return MtpDrafter(target.mtp_heads(), mtp_label(target.n_mtp_heads),
                      p_min=config.draft_p_min, draft_min=config.draft_min,
                      eos_ids=target.eos_ids)


def mtp_label(n_heads: int) -> str:
    return f"own MTP layers ({n_heads})"


def heads_label(path: str) -> str:
    return f"draft heads ({Path(path).name})"


def self_draft_label(n_layers: int) -> str:
    return f"self-draft (first {n_layers} layers)"


def build_self_drafter(pair: LoadedPair, n_layers: int, config: DecodeConfig) -> Drafter:
    """A drafter from the target's own first n_layers (for a ranking or a layer sweep), on
    any loaded pair: torch shares the target's weights; llama.cpp loads a GGUF of its first
    blocks, written once. The early-exit model is kept with the pair and closed with it."""
    drafter = ModelDrafter(pair.self_draft(n_layers), p_min=config.draft_p_min,
                           draft_min=config.draft_min, with_hidden=True)
    drafter.name = self_draft_label(n_layers)
    return drafter


def build_session(pair: LoadedPair, config: DecodeConfig, plain: bool = False,
                  diagnostics: bool = True,
                  avoid_prompt: Sequence[int] | None = None) -> Session:
    """A speculative session on the pair, or plain target decoding when plain=True
    (`avoid_prompt`: see build_drafter).

    Adaptive mode starts from the verify-cost curve measured for this target and device
    (cached after the first measurement) and the draft model's measured step time.
    """
    drafter = None if plain else build_drafter(pair, config, avoid_prompt)
    curve = None
    if drafter is not None and config.adaptive:
        curve = cached_verify_curve(pair.target, config.draft_max)
        if pair.draft is not None:
            if not pair.draft_step_seconds:
                pair.draft_step_seconds = measure_token_cost(pair.draft)
            drafter.cost_hint = pair.draft_step_seconds
    return Session(pair.target, drafter, config, curve, diagnostics)


def prepare_run(
    pair: LoadedPair,
    config: DecodeConfig,
    prompt: str,
    chat: bool,
    plain: bool = False,
    extra_settings: dict[str, Any] | None = None,
) -> Run:
    """Encode the prompt, check it fits, build the session and its trace header."""
    prompt_ids = encode_prompt(pair.target, prompt, chat)
    session = build_session(pair, config, plain)
    session.check_prompt(prompt_ids)
    header = trace_header(pair, session.config, prompt, len(prompt_ids), chat,
                          plain=session.drafter is None, extra_settings=extra_settings)
    return Run(session, prompt_ids, header)


def draft_label(spec: ModelSpec) -> str:
    """What drafts in a run of this spec, as the trace header names it."""
    if spec.suffix:
        return SUFFIX_LABEL
    if spec.draft_mtp:
        return OWN_MTP_LABEL
    if spec.self_draft_layers:
        label = self_draft_label(spec.self_draft_layers)
        return f"{NGRAM_LABEL} + {label}" if spec.ngram else label
    if spec.draft_heads:
        return heads_label(spec.draft_heads)
    if spec.draft and spec.ngram:
        return f"{NGRAM_LABEL} + {spec.draft}"
    return spec.draft or (NGRAM_LABEL if spec.ngram else "")


def trace_header(
    pair: LoadedPair,
    config: DecodeConfig,
    prompt: str,
    n_prompt: int,
    chat: bool,
    plain: bool = False,
    extra_settings: dict[str, Any] | None = None,
) -> TraceHeader:
    spec = pair.spec
    settings = {**asdict(config), "chat": chat, "n_gpu_layers": spec.n_gpu_layers,
                "n_ctx": spec.n_ctx, "batch_invariant": spec.batch_invariant, "rpc": spec.rpc,
                **(extra_settings or {})}
    return TraceHeader(
        target=spec.target,
        draft="" if plain else draft_label(spec),
        backend=pair.target.backend,
        device=pair.target.device,
        settings=settings,
        versions=versions(),
        prompt=prompt,
        prompt_tokens=n_prompt,
        mode=MODE_PLAIN if plain else MODE_SPECULATIVE,
    )
