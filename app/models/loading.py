"""Turning model files and where to run them into loaded models (what drafts is chosen per
run: DecodeConfig.drafter, built in app.runs).

GGUF files are checked before llama.cpp sees them (metadata, then a preflight in a child
process), because a malformed file can abort the whole process where no except reaches.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from app.engine.cost_curve import VerifyCostCurve
from app.engine.drafters.self_skip import SkipChoice, format_skip, parse_skip
from app.engine.protocol import LanguageModel, LayerSkipModel, SkipDraftModel
from app.errors import DraftLensError, ModelFileError, SettingsError
from app.models.pair_check import (
    CrossVocab,
    PairCheck,
    check_pair_files,
    is_gguf,
    model_size_bytes,
)

BACKENDS = ("llamacpp", "torch")
Progress = Callable[[str], None]


@dataclass
class ModelSpec:
    """Which models to load, and where: what drafts is no part of it (DecodeConfig.drafter)."""

    target: str
    draft: str | None = None  # a draft model file, where one drafts
    backend: str = "auto"
    device: str = "auto"
    n_gpu_layers: int | str = "auto"
    n_ctx: int = 4096
    n_threads: int | None = None
    trust_remote_code: bool = False
    allow_pickle: bool = False
    # True: the exact mode (llama.cpp's batch-invariant CPU kernels; torch one token per pass)
    batch_invariant: bool = False
    rpc: str = ""  # the target on llama.cpp rpc-servers: HOST:PORT[,HOST:PORT...]
    with_mtp: bool = False  # load the target's own MTP (NextN) layers too (llama.cpp)
    # skip sets given by hand ("6-11,15-20"): the target without those layers, loaded as a
    # draft of its own per set (a self-draft; one chosen by measurement is loaded once it is
    # chosen, app.models.self_skip)
    self_skips: tuple[str, ...] = ()
    # llama.cpp: the self-draft's output head keeps this many of the target's tokens (the
    # earliest ids and every control token: app.models.early_exit); 0 keeps them all
    self_head: int = 32768
    # llama.cpp: map the GGUF (True) or read its weights into memory (False); None: read where
    # the weights stay on the CPU and fit (backends.llamacpp_load.weights_read_into_memory)
    mmap: bool | None = None

    def resolved_backend(self) -> str:
        """The backend named, or auto's: llama.cpp for a .gguf target, else torch."""
        if self.backend != "auto" and self.backend not in BACKENDS:
            raise SettingsError(f"unknown backend '{self.backend}' — use llamacpp or torch")
        backend = self.backend if self.backend != "auto" else (
            "llamacpp" if is_gguf(self.target) else "torch")
        if self.rpc and backend != "llamacpp":
            raise SettingsError("--rpc works with the llama.cpp backend only — pick a .gguf "
                                "target (or drop --rpc)")
        return backend


@dataclass
class LoadedPair:
    target: LanguageModel
    draft: LanguageModel | None
    check: PairCheck | None
    spec: ModelSpec
    warnings: list[str] = field(default_factory=list)
    # self-drafts by skip set and whether they borrow the target's cache (app.models.self_skip)
    self_drafts: dict[tuple[str, bool], LanguageModel] = field(default_factory=dict)
    # the figures each skip set was chosen by, by set (app.models.self_skip.settle_self_skip)
    skip_choices: dict[str, SkipChoice] = field(default_factory=dict)
    # what the target's passes cost, as timed on this pair by the runs of this process (each
    # session adds its passes; app.runs.build_session reads the stored curve into it once)
    verify_curve: VerifyCostCurve | None = None

    @property
    def cross(self) -> CrossVocab | None:
        """What the vocabularies share, where the draft's differs from the target's."""
        if self.check is None or self.check.compatible:
            return None
        return self.check.cross

    def close(self) -> None:
        for model in {id(m): m for m in self.self_drafts.values()}.values():
            if model is not self.draft:
                model.close()
        self.target.close()
        if self.draft is not None:
            self.draft.close()

    def self_draft(self, skip: str, borrow: bool = True) -> LanguageModel:
        """The target without the `skip` layers ("6-11,15-20") as a draft model, loaded with
        the pair (ModelSpec.self_skips) or by load_self_draft: building a run loads no model.
        torch: inside the target's forward and (borrow) its KV cache; without borrow, a cache
        of its own (for timing it). llama.cpp: a file of the kept blocks, its own cache."""
        key = self._key(skip, borrow)
        model = self.self_drafts.get(key)
        if model is None:
            raise SettingsError(f"the target without layers {key[0]} was not loaded as a "
                                f"draft — load the pair with self_skips=('{key[0]}',) (the "
                                "command line does so for --self-skip)")
        return model

    def load_self_draft(self, skip: str, borrow: bool = True) -> LanguageModel:
        """Load the target without the `skip` layers as a draft model, once per pair and set."""
        key = self._key(skip, borrow)
        model = self.self_drafts.get(key)
        if model is None:
            model = load_self_draft(self.target, self.spec, *key)
            self.self_drafts[key] = model
        return model

    def _key(self, skip: str, borrow: bool) -> tuple[str, bool]:
        """One name per set, checked against the target's layers; llama.cpp's draft has its
        own cache either way."""
        target = self.target
        n_layers = target.n_layers if isinstance(target, LayerSkipModel) else None
        return (format_skip(parse_skip(skip, n_layers)),
                borrow if target.backend == "torch" else True)


def load_self_draft(target: LanguageModel, spec: ModelSpec, skip: str,
                    borrow: bool) -> LanguageModel:
    """torch: the loaded target without those layers (shared weights); llama.cpp: a GGUF of
    its other blocks, written once into the data folder (app.models.early_exit)."""
    skipped = parse_skip(skip, target.n_layers if isinstance(target, LayerSkipModel) else None)
    if isinstance(target, SkipDraftModel):
        from backends.base import BackendError

        try:
            model = target.skip_draft(skipped, borrow)
        except BackendError as exc:
            raise SettingsError(str(exc)) from exc
    elif target.backend == "llamacpp":
        from app.models.early_exit import block_count, kept_blocks_gguf

        head = head_tokens(spec, target)
        model = load_model(str(kept_blocks_gguf(target.path, skipped, head)), spec,
                           head_subset_of=target if head else None)
        total = block_count(Path(target.path))
        model.name = f"{target.name} · {total - len(skipped)} of {total} layers"
        from backends.llamacpp_head_subset import LlamaCppHeadSubsetModel

        if isinstance(model, LlamaCppHeadSubsetModel):  # its rows: the ids and control tokens
            model.name += f", head {model.head_tokens:,} of {target.n_vocab:,} tokens"
    else:
        raise SettingsError(f"the {target.backend} backend cannot leave layers out as a draft "
                            "— use a draft model or --ngram")
    model.name += f" (skips {skip})"
    return model


def head_tokens(spec: ModelSpec, target: LanguageModel) -> int:
    """How many of the target's first token ids a llama.cpp self-draft's head keeps (its
    control and byte tokens come on top); 0 for the whole head (torch's draft shares the
    target's)."""
    if target.backend != "llamacpp" or spec.self_head <= 0 or spec.self_head >= target.n_vocab:
        return 0
    return spec.self_head


def validate_model_file(path: str, backend: str) -> None:
    """Refuse a missing or malformed file with a message, before any runtime loads it."""
    file = Path(path)
    if not file.exists():
        raise ModelFileError(f"model not found: {path} — check the path")
    if backend == "llamacpp":
        if not file.is_file():
            raise ModelFileError(
                f"{path} is a folder; the llama.cpp backend needs a .gguf file — "
                "pick the file, or use --backend torch for a transformers folder"
            )
        from app.models.gguf_check import check_gguf
        from app.models.preflight import preflight_gguf

        check_gguf(file)
        preflight_gguf(file)


def load_model(path: str, spec: ModelSpec, rpc: str = "", mtp: bool = False,
               head_subset_of: LanguageModel | None = None) -> LanguageModel:
    """Load one model of the pair; `rpc` puts its layers on those rpc-servers; `mtp` loads
    its own MTP layers too, to draft with (llama.cpp only); `head_subset_of`: the file is a
    self-draft of that target whose head keeps some of its tokens (app.models.early_exit)."""
    from backends.base import BackendError

    backend = spec.resolved_backend()
    validate_model_file(path, backend)
    free = available_memory()  # before: a failed load holds what it got until it unwinds
    # the annotations make the type checker prove that each backend satisfies the protocol
    model: LanguageModel
    try:
        if backend == "llamacpp" and mtp:
            from backends.llamacpp_mtp import LlamaCppMtpModel

            model = LlamaCppMtpModel(path, n_gpu_layers=spec.n_gpu_layers, n_ctx=spec.n_ctx,
                                     n_threads=spec.n_threads,
                                     batch_invariant=spec.batch_invariant, rpc=rpc,
                                     mmap=spec.mmap, memory_available=free)
        elif backend == "llamacpp" and head_subset_of is not None:
            from backends.llamacpp_head_subset import LlamaCppHeadSubsetModel

            model = LlamaCppHeadSubsetModel(
                path, text_of=head_subset_of, n_gpu_layers=spec.n_gpu_layers,
                n_ctx=spec.n_ctx, n_threads=spec.n_threads,
                batch_invariant=spec.batch_invariant, mmap=spec.mmap, memory_available=free)
        elif backend == "llamacpp":
            from backends.llamacpp import LlamaCppModel

            model = LlamaCppModel(path, n_gpu_layers=spec.n_gpu_layers, n_ctx=spec.n_ctx,
                                  n_threads=spec.n_threads, batch_invariant=spec.batch_invariant,
                                  rpc=rpc, mmap=spec.mmap, memory_available=free)
        else:
            from backends.torch_hf import TorchModel

            model = TorchModel(path, device=spec.device, trust_remote_code=spec.trust_remote_code,
                               allow_pickle=spec.allow_pickle,
                               batch_invariant=spec.batch_invariant)
    except MemoryError as exc:
        raise out_of_memory(path, free) from exc
    except BackendError as exc:
        too_big = not rpc and free is not None and model_size_bytes(Path(path)) > free
        if too_big or _sounds_like_memory(str(exc)):
            raise out_of_memory(path, free) from exc
        raise DraftLensError(str(exc)) from exc
    return model


def check_rpc_servers(spec: ModelSpec) -> None:
    """Refuse a bad --rpc list, an unreachable server or a build without RPC before any
    model file is read."""
    from backends.base import BackendError
    from backends.llamacpp_rpc import checked_servers

    spec.resolved_backend()
    try:
        checked_servers(spec.rpc)
    except BackendError as exc:
        raise SettingsError(str(exc)) from exc


def rpc_problem(text: str) -> str:
    """What is wrong with an --rpc list's form, or "" (servers are greeted only at load)."""
    from backends.base import BackendError
    from backends.llamacpp_rpc import parse_rpc_servers

    if not text.strip():
        return ""
    try:
        parse_rpc_servers(text)
    except BackendError as exc:
        return str(exc)
    return ""


def available_memory() -> int | None:
    """Bytes of memory this process could still get: the system's available memory, capped by
    an address-space limit if one is set (None where neither can be read)."""
    found: list[int] = []
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit != resource.RLIM_INFINITY:
            used = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
            found.append(max(0, limit - used))
    except (ImportError, OSError, ValueError):
        pass
    return min(found) if found else None


def out_of_memory(path: str, free: int | None) -> ModelFileError:
    size = model_size_bytes(Path(path))
    have = f"{free / 1e9:.2f} GB" if free is not None else "an unknown amount"
    return ModelFileError(
        f"out of memory loading {Path(path).name}: the model is {size / 1e9:.2f} GB on disk "
        f"and {have} of memory is available — close other programs, or pick a smaller model "
        "(fewer parameters or a smaller quantisation)"
    )


def _sounds_like_memory(message: str) -> bool:
    text = message.lower()
    return any(word in text for word in ("out of memory", "not enough memory", "alloc"))



def _size(path: str) -> str:
    file = Path(path)
    return f" ({file.stat().st_size / 1e9:.1f} GB)" if file.is_file() else ""


def load_pair(spec: ModelSpec, progress: Progress | None = None) -> LoadedPair:
    """Check the pair, then load target and draft. Incompatible pairs are refused."""
    report = progress or (lambda message: None)
    phases = 1 + bool(spec.rpc) + 2 * bool(spec.draft) + len(spec.self_skips)
    done = 0

    def say(message: str) -> None:  # "step 2 of 3: loading target x.gguf (1.1 GB)"
        nonlocal done
        done += 1
        report(f"step {done} of {phases}: {message}")

    check = None
    warnings: list[str] = []
    if spec.rpc:
        say("greeting the rpc-servers")
        check_rpc_servers(spec)
    if spec.with_mtp:
        from app.models.mtp import require_mtp

        require_mtp(spec.target, spec.resolved_backend())
    if spec.draft:
        say("checking that the pair shares a vocabulary")
        check = check_pair_files(spec.target, spec.draft)
        check.raise_if_incompatible()
        warnings.extend(check.warnings)
    say(f"loading target {Path(spec.target).name}{_size(spec.target)}")
    target = load_model(spec.target, spec, rpc=spec.rpc, mtp=spec.with_mtp)
    draft = None
    if spec.draft:
        say(f"loading draft {Path(spec.draft).name}{_size(spec.draft)}")
        try:
            # logit widths may differ (padded output matrices); the engine aligns p and q
            draft = load_model(spec.draft, spec)
        except Exception:
            target.close()
            raise
    warnings.extend(target.caveats)
    pair = LoadedPair(target, draft, check, spec, warnings)
    try:
        for skip in spec.self_skips:
            say(f"loading the target without layers {skip} as a draft")
            pair.load_self_draft(skip)
    except Exception:
        pair.close()
        raise
    return pair
