"""The one place a run is built, for the CLI, the bench and the window alike: a loaded pair
and decode settings become a drafter, a session and the trace header that describes them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.draft_memory import DraftMemory, RememberedOutput, prompt_fingerprint
from app.engine.cost_curve import (
    VerifyCostCurve,
    calibrate_verify_curve,
    machine_busy,
    store_verify_curve,
    stored_verify_curve,
)
from app.engine.decode_config import DecodeConfig
from app.engine.drafters import Drafter
from app.engine.drafters.draft_model.vocab_bridge import VocabBridge
from app.engine.drafters.heads import HeadsWeights
from app.engine.drafters.registry import build_drafter, label
from app.engine.drafters.self_skip import SkipChoice
from app.engine.drafters.suffix import RememberedRun, memory_buffer
from app.engine.drafters.suffix.retry_copy import EarlierAnswer
from app.engine.drafters.suffix.tree import SuffixTree
from app.engine.protocol import LanguageModel
from app.engine.session import Session
from app.engine.trace import MODE_PLAIN, MODE_SPECULATIVE, TraceHeader, TraceWriter
from app.errors import SettingsError
from app.models.loading import LoadedPair
from app.models.self_skip import Searching, settle_self_skip
from app.versions import versions

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


class PairSources:
    """What the drafters of one run may draw on (app.engine.drafters.registry's factories): the
    pair's models and files. `avoid_prompt`: the memory leaves out remembered answers to it
    (a benchmark's prompt must not draft from its own earlier answer)."""

    def __init__(self, pair: LoadedPair, avoid_prompt: Sequence[int] | None = None) -> None:
        self.pair = pair
        self.avoid_prompt = avoid_prompt

    @property
    def target(self) -> LanguageModel:
        return self.pair.target

    def draft_model(self) -> LanguageModel:
        if self.pair.draft is None:
            raise SettingsError("the draft model was not loaded — pass -md DRAFT_FILE")
        return self.pair.draft

    def bridge(self) -> VocabBridge | None:
        cross = self.pair.cross
        return None if cross is None else cross.bridge

    def self_draft(self, skip: str) -> LanguageModel:
        return self.pair.self_draft(skip)

    def skip_choice(self, skip: str) -> SkipChoice | None:
        return self.pair.skip_choices.get(skip)

    def heads(self, path: str) -> HeadsWeights:
        from app.models.draft_heads import load_heads

        return load_heads(path, self.pair.target)

    def memory(self, path: str, max_depth: int) -> SuffixTree:
        """The memory file's earlier outputs of this target in one global suffix tree: built
        once, extended as runs end (remember_output), rebuilt only when the runs it must
        hold change otherwise (the oldest dropped, another prompt's answers left out)."""
        held = held_memory(self.pair, path)
        runs = self._remembered(held)
        holds = (tuple(o.run for o in runs), max_depth)
        if held.tree is None or held.holds != holds:
            held.tree = memory_buffer([RememberedRun(o.run, o.tokens) for o in runs], max_depth)
            held.holds = holds
        return held.tree

    def answers_to(self, path: str, prompt_ids: Sequence[int]) -> list[EarlierAnswer]:
        """The answers the memory file kept for this very prompt (a retried request), the
        latest first; none where this prompt's answers are left out (avoid_prompt)."""
        fingerprint = prompt_fingerprint(prompt_ids)
        lead = len(prompt_ids[-MEMORY_LEAD_TOKENS:])
        return [EarlierAnswer(output.run, output.tokens[lead:])
                for output in reversed(self._remembered(held_memory(self.pair, path)))
                if output.prompt == fingerprint]

    def _remembered(self, held: HeldMemory) -> list[RememberedOutput]:
        """The memory's outputs of this target that this run may read (not those answering
        avoid_prompt), oldest first."""
        avoid = prompt_fingerprint(self.avoid_prompt) if self.avoid_prompt is not None else ""
        return held.memory.runs(memory_key(self.pair), avoid, n_vocab=self.pair.target.n_vocab)


@dataclass
class HeldMemory:
    """A draft memory file as this process holds it: read once, written after each run,
    and its outputs of one target in a global suffix tree, with the runs and depth it
    holds."""

    memory: DraftMemory
    tree: SuffixTree | None = None
    holds: tuple[tuple[int, ...], int] | None = None


# the draft memories this process has read, by file and target: the engine host (one per
# window session; a new one after the window forgets a memory) and a benchmark read a file
# once and keep its tree while they run; only the current target's are kept
_HELD: dict[tuple[str, str], HeldMemory] = {}


def held_memory(pair: LoadedPair, path: str) -> HeldMemory:
    target = memory_key(pair)
    for stale in [key for key in _HELD if key[1] != target]:
        del _HELD[stale]  # another target's trees: never read by this pair
    key = (str(Path(path).resolve()), target)
    if key not in _HELD:
        _HELD[key] = HeldMemory(DraftMemory.load(path))
    return _HELD[key]


def new_drafter(pair: LoadedPair, config: DecodeConfig,
                avoid_prompt: Sequence[int] | None = None) -> Drafter | None:
    """A fresh drafter for one run (drafters keep per-run state), or None for plain
    decoding (`avoid_prompt`: see PairSources)."""
    sources = PairSources(pair, avoid_prompt)
    return build_drafter(config.drafter, sources, config.stop_rule)


def memory_key(pair: LoadedPair) -> str:
    """The target's identity in the draft memory: its file name and size (a folder: its
    name), so outputs are only ever read back as token ids of the same model."""
    path = Path(pair.spec.target)
    size = path.stat().st_size if path.is_file() else 0
    return f"{path.name}:{size}"


def remember_output(pair: LoadedPair, session: Session, prompt_ids: Sequence[int]) -> None:
    """Keep a speculative run's output in its draft memory file (the suffix drafter's
    `memory` option), and save it. Plain runs never write: a benchmark's speculative run
    must not draft from the plain run beside it."""
    path = session.config.drafter.options.memory
    if not path or session.drafter is None or not session.output_ids:
        return
    held = held_memory(pair, path)
    output = held.memory.add(memory_key(pair), prompt_fingerprint(prompt_ids),
                             remembered_tokens(prompt_ids, session.output_ids))
    held.memory.save()
    runs_before = tuple(o.run for o in held.memory.runs(memory_key(pair)) if o.run != output.run)
    if held.tree is not None and held.holds is not None and held.holds[0] == runs_before:
        # the global tree held every earlier run: it takes this one too, in place
        held.tree.extend(output.run, output.tokens)
        held.holds = ((*runs_before, output.run), held.holds[1])


def build_session(pair: LoadedPair, config: DecodeConfig, plain: bool = False,
                  diagnostics: bool = True,
                  avoid_prompt: Sequence[int] | None = None) -> Session:
    """A speculative session on the pair, or plain target decoding when plain=True
    (`avoid_prompt`: see PairSources). Nothing is measured here: every session prices passes
    from the pair's timings (pair_prices), and the first token comes at once."""
    drafter = None if plain else new_drafter(pair, config, avoid_prompt)
    return Session(pair.target, drafter, config, pair_prices(pair), diagnostics)


def pair_prices(pair: LoadedPair) -> VerifyCostCurve:
    """The pair's pass timings, shared by its sessions: started from the curve stored for the
    target (read only, nothing measured) and grown by every pass the sessions time."""
    if pair.verify_curve is None:
        pair.verify_curve = stored_verify_curve(pair.target)
    return pair.verify_curve


def calibrate_pair(pair: LoadedPair, draft_max: int) -> VerifyCostCurve:
    """Benchmarks only: time every pass size up to draft_max + 1 now, before anything they
    time, so that adaptive runs start from the machine's whole curve; stored unless the
    machine is busy. Runs never calibrate."""
    measured = calibrate_verify_curve(pair.target, draft_max)
    pair.verify_curve = VerifyCostCurve(measured.points, stored_at=measured.stored_at)
    return pair.verify_curve


def remember_prices(pair: LoadedPair) -> None:
    """Store the pair's quiet pass prices for later runs (never while the machine is busy)."""
    if pair.verify_curve is not None and not machine_busy():
        store_verify_curve(pair.target, pair.verify_curve.quiet_medians())


def prepare_run(
    pair: LoadedPair,
    config: DecodeConfig,
    prompt: str,
    chat: bool,
    plain: bool = False,
    extra_settings: dict[str, Any] | None = None,
    progress: Callable[[str], None] | None = None,
    searching: Searching | None = None,
) -> Run:
    """Encode the prompt, check it fits, build the session and its trace header (`progress`
    hears of work before the run: a self-draft's choice of layers; `searching`, where given,
    of every set that choice scores: app.models.self_skip)."""
    prompt_ids = encode_prompt(pair.target, prompt, chat)
    skip_choice = None
    if not plain:  # a self-draft's layers, chosen on this prompt (cached per text)
        config, skip_choice = settle_self_skip(pair, config, [prompt_ids], progress,
                                                   searching)
    session = build_session(pair, config, plain)
    session.check_prompt(prompt_ids)
    if skip_choice is not None:
        extra_settings = {**(extra_settings or {}), "self_skip": skip_choice.to_dict()}
    header = trace_header(pair, session.config, prompt, len(prompt_ids), chat,
                          plain=session.drafter is None, extra_settings=extra_settings)
    return Run(session, prompt_ids, header)


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
        draft="" if plain else label(config.drafter, spec.draft or ""),
        backend=pair.target.backend,
        device=pair.target.device,
        settings=settings,
        versions=versions(),
        prompt=prompt,
        prompt_tokens=n_prompt,
        mode=MODE_PLAIN if plain else MODE_SPECULATIVE,
    )
