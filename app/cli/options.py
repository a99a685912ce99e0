"""The flags the commands share, and turning them, once, into a Plan: the run's settings (a
DecodeConfig, what drafts among them: a DrafterChoice from --spec-type and the older flags
that name a drafter, checked by the registry here), which models to load (a ModelSpec), the
prompts, and a layer sweep's settings."""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, replace

from app.cli.bench_tasks import SUITES
from app.draft_memory import DraftMemory
from app.engine.decode_config import DecodeConfig, DrafterChoice, DrafterOptions, SuffixOptions
from app.engine.drafters.registry import DRAFTERS, check, copies, parse_names
from app.engine.drafters.self_draft import is_auto
from app.engine.sampling import SamplingParams
from app.errors import SettingsError
from app.models.loading import ModelSpec

# the flags that name a drafter, kept as aliases of --spec-type: flag -> its name
ALIASES = {"--ngram": "ngram", "--suffix": "suffix", "--draft-mtp": "mtp",
           "--draft-heads": "heads", "--self-skip": "self", "-md": "draft"}


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("models")
    g.add_argument("-m", "--target", "--model", dest="target",
                   help="target model: a .gguf file or a transformers folder (default: demo pair)")
    g.add_argument("--spec-type", dest="spec_type", default=None, metavar="NAME[,NAME...]",
                   help="what drafts (llama.cpp's word): " + ", ".join(DRAFTERS) + "; a "
                        "comma list chains them in order of preference, e.g. ngram,draft "
                        "(default: draft with -md, else the demo pair's draft). The flags "
                        "below that name a drafter are the same as naming it here")
    g.add_argument("-md", "--draft", "--model-draft", dest="draft",
                   help="draft model file (--spec-type draft)")
    g.add_argument("--cross-vocab", dest="cross_vocab", default="auto",
                   choices=("auto", "tli", "string"),
                   help="a draft with another vocabulary than the target's: tli (draws among "
                        "the tokens both share; exact under sampling too), string (its greedy "
                        "text re-tokenized for the target) or auto (tli)")
    g.add_argument("--ngram", action="store_true",
                   help="--spec-type ngram: draft by n-gram / prompt lookup; with a draft "
                        "model, ngram,draft: look up first and use the draft model when the "
                        "context has no match")
    g.add_argument("--suffix", action="store_true",
                   help="--spec-type suffix: draft by suffix decoding: copy what most often "
                        "followed the last "
                        "tokens in the prompt, the output so far and (with --draft-memory) "
                        "earlier runs' outputs, as a tree of continuations by frequency")
    g.add_argument("--draft-memory", dest="draft_memory", default="", metavar="PATH",
                   help="with suffix: a file of earlier outputs of the same target to draft "
                        "from, updated after each speculative run (capped: the oldest go)")
    g.add_argument("--forget-draft-memory", action="store_true",
                   help="empty the --draft-memory file before starting")
    g.add_argument("--spec-factor", type=float, default=SuffixOptions.factor,
                   help="with --suffix: a match of m tokens drafts at most "
                        "spec-factor * m + spec-offset tokens (SuffixDecoding's default 1.0)")
    g.add_argument("--spec-offset", type=float, default=SuffixOptions.offset,
                   help="with --suffix: see --spec-factor (default 0)")
    g.add_argument("--spec-min-prob", type=float, default=SuffixOptions.min_prob,
                   help="with --suffix: a token whose estimated probability (how often the "
                        "text went on so) is below this is not drafted (default 0.1)")
    g.add_argument("--self-skip", dest="self_skip", default=None, metavar="RANGES|auto",
                   help="--spec-type self: draft with the target itself, these of its layers "
                        "left out (0-based ranges, e.g. 6-11,15-20; its first layer, final "
                        "norm and output head are kept), or auto: the layers chosen by "
                        "measurement on the prompt (the default for --spec-type self)")
    g.add_argument("--self-cost", dest="self_cost", type=float,
                   default=DrafterOptions.skip_cost, metavar="C",
                   help="with --self-skip auto: drop layers until a draft step is estimated "
                        "to cost C target steps (default %(default)s)")
    g.add_argument("--self-head", dest="self_head", type=int, default=ModelSpec.self_head,
                   metavar="N",
                   help="llama.cpp self-draft: its output head keeps the target's first N "
                        "token ids and its control tokens, so a draft step reads fewer "
                        "weights (q is 0 for the others; 0 keeps every token; default "
                        "%(default)s)")
    g.add_argument("--draft-heads", dest="draft_heads", default=None, metavar="HEADS",
                   help="--spec-type heads: draft with heads trained on the target's hidden "
                        "states (draftlens heads train)")
    g.add_argument("--draft-mtp", dest="draft_mtp", action="store_true",
                   help="--spec-type mtp: draft with the target's own multi-token-prediction "
                        "(MTP / NextN) "
                        "layers, where its GGUF has them (llama.cpp); no draft model needed")
    g.add_argument("--backend", choices=("auto", "llamacpp", "torch"), default="auto")
    g.add_argument("--device", default="auto", help="auto, cpu, cuda, mps (torch backend)")
    g.add_argument("-ngl", "--n-gpu-layers", "--gpu-layers", dest="n_gpu_layers", default="auto",
                   help="layers to offload with llama.cpp: a number or auto")
    g.add_argument("--rpc", default="", metavar="HOST:PORT[,HOST:PORT...]",
                   help="put the target's layers on llama.cpp rpc-servers on these machines "
                        "(trusted networks only: the RPC protocol is not secure)")
    g.add_argument("-c", "--ctx-size", dest="n_ctx", type=int, default=4096)
    g.add_argument("-t", "--threads", dest="n_threads", type=int, default=None)
    g.add_argument("--mmap", action=argparse.BooleanOptionalAction, default=None,
                   help="llama.cpp: map the model file (--mmap) or read its weights into "
                        "memory (--no-mmap); default: read where the model runs on the CPU "
                        "and takes at most half the free memory (plain decoding about 5-9%% "
                        "faster on the build machine), else map")
    kernels = g.add_mutually_exclusive_group()
    kernels.add_argument("--exact-kernels", action="store_true",
                         help="the exact mode: a verify pass gives bit-identical logits to "
                              "plain steps, so greedy output always equals plain decoding "
                              "(llama.cpp on CPU: batch-invariant kernels, about 25%% slower; "
                              "torch: every pass one token at a time, for checking only)")
    kernels.add_argument("--fast-kernels", action="store_true",
                         help="llama.cpp: the CPU's repacked kernels (the default)")
    g.add_argument("--trust-remote-code", action="store_true",
                   help="allow a transformers model to run its own Python code")
    g.add_argument("--allow-pickle", action="store_true",
                   help="allow loading pickle (.bin) weights, which can run code")


def add_decode_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("decoding")
    g.add_argument("-n", "--n-predict", dest="n_predict", type=int, default=128)
    g.add_argument("--draft-max", "--draft-n", dest="draft_max", type=int, default=None,
                   help="draft length k (max under --adaptive); default 8, 32 with --ngram "
                        "or --suffix")
    g.add_argument("--draft-min", type=int, default=0)
    g.add_argument("--draft-p-min", type=float, default=None,
                   help="stop drafting where the draft's best candidate is below this")
    g.add_argument("--tree-width", type=int, default=1,
                   help="children a draft node may have (1 = a chain); --draft-max stays "
                        "the depth")
    g.add_argument("--tree-nodes", type=int, default=16, help="draft nodes per pass at most")
    g.add_argument("--draft-p-split", type=float, default=0.1,
                   help="a draft model branches where another candidate has at least this "
                        "probability")
    g.add_argument("--adaptive", action="store_true",
                   help="choose k from measured acceptance and verify cost; plain when none "
                        "pays; a draft model's draft (up to --draft-max) ends where its own "
                        "confidence says no longer draft would pay for its time")
    g.add_argument("--temp", "--temperature", dest="temp", type=float, default=0.0,
                   help="0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("-s", "--seed", type=int, default=None)
    g.add_argument("--chat", action="store_true", help="apply the target's chat template")


def drafter_choice(args: argparse.Namespace) -> DrafterChoice:
    """What drafts, as the flags say (choice_from_flags), checked by the registry."""
    choice = choice_from_flags(args)
    check(choice)
    return choice


def choice_from_flags(args: argparse.Namespace) -> DrafterChoice:
    """What drafts: --spec-type's names, or those the older flags name (ALIASES), with the
    drafters' options; not yet checked by the registry (checked_config, drafter_choice)."""
    skip = getattr(args, "self_skip", None) or ""
    named = {"ngram": bool(getattr(args, "ngram", False)),
             "suffix": bool(getattr(args, "suffix", False)),
             "mtp": bool(getattr(args, "draft_mtp", False)),
             "heads": bool(getattr(args, "draft_heads", None)),
             "self": bool(skip), "draft": bool(getattr(args, "draft", None))}
    options = DrafterOptions(
        cross_vocab=getattr(args, "cross_vocab", "auto") or "auto", skip=skip,
        skip_cost=getattr(args, "self_cost", DrafterOptions.skip_cost),
        heads=getattr(args, "draft_heads", None) or "",
        memory=getattr(args, "draft_memory", "") or "",
        suffix=SuffixOptions(factor=getattr(args, "spec_factor", SuffixOptions.factor),
                             offset=getattr(args, "spec_offset", SuffixOptions.offset),
                             min_prob=getattr(args, "spec_min_prob", SuffixOptions.min_prob)))
    text = getattr(args, "spec_type", None)
    if text:
        names = parse_names(text)
        flags = [f for f, name in ALIASES.items() if named[name] and name not in names
                 and name != "draft"]
        if flags:
            raise SettingsError(f"{flags[0]} names a drafter that --spec-type {text} leaves "
                                f"out — add {ALIASES[flags[0]]} to --spec-type, or drop "
                                f"{flags[0]}")
    else:
        names = alias_names(named, getattr(args, "target", None) is None)
    if named["draft"] and "draft" not in names:
        raise SettingsError("-md is the draft model of --spec-type draft — add draft to "
                            "--spec-type, or drop -md")
    return DrafterChoice(names, options)


def alias_names(named: dict[str, bool], demo: bool) -> tuple[str, ...]:
    """The drafter the older flags name (as before --spec-type): one of them, the lookup
    before a draft model or a self-draft; nothing named: a draft model."""
    models = [n for n in ("draft", "self", "heads", "mtp", "suffix") if named[n]]
    if len(models) > 1 or (named["ngram"] and models and models[0] in ("mtp", "suffix")):
        raise SettingsError("pick one draft: -md DRAFT, --self-skip RANGES|auto, "
                            "--draft-heads HEADS, --draft-mtp, --ngram or --suffix (or chain "
                            "them with --spec-type, e.g. ngram,draft)")
    if named["ngram"]:
        return ("ngram", *models)
    return tuple(models) or ("draft",)


def model_spec(args: argparse.Namespace, choice: DrafterChoice) -> ModelSpec:
    """Which models to load for `choice`: the target (the demo pair's without -m), its MTP
    layers where they draft, the draft model file where one drafts, and the target without
    the layers a self-draft skips, where they are given (a set chosen by measurement is
    loaded once chosen, before the run: app.models.self_skip)."""
    # read from the names, not asked of other modules: the command line's settings are read
    # here in one go, and checked after (checked_config)
    drafts = set(choice.names)
    skips = ((choice.options.skip,) if "self" in drafts and not is_auto(choice.options.skip)
             else ())
    target, draft = args.target, args.draft
    if target is None:
        from app.models.demo import demo_installed, demo_paths

        if not demo_installed():
            raise SettingsError("no target model given and the demo pair is not installed — "
                                "pass -m FILE, or run: draftlens models fetch-demo")
        demo_target, demo_draft = demo_paths()
        target = str(demo_target)
        if draft is None and "draft" in drafts:
            draft = str(demo_draft)
    if draft is None and "draft" in drafts:
        raise SettingsError("no draft given — pass -md DRAFT_FILE, --ngram for prompt lookup, "
                            "or --spec-type self for the target with layers skipped")
    if getattr(args, "self_head", 0) < 0:
        raise SettingsError(f"--self-head is how many tokens the self-draft's head keeps, 0 "
                            f"or more (0 keeps them all; got {args.self_head})")
    layers = args.n_gpu_layers
    if layers != "auto":
        try:
            layers = int(layers)
        except ValueError as exc:
            raise SettingsError(f"--n-gpu-layers must be a number or auto (got {layers})") from exc
    return ModelSpec(
        target=target, draft=draft if "draft" in drafts else None, backend=args.backend,
        device=args.device, n_gpu_layers=layers, n_ctx=args.n_ctx, n_threads=args.n_threads,
        trust_remote_code=args.trust_remote_code, allow_pickle=args.allow_pickle,
        batch_invariant=args.exact_kernels, rpc=args.rpc.strip(), with_mtp="mtp" in drafts,
        mmap=args.mmap, self_skips=skips,
        self_head=getattr(args, "self_head", ModelSpec.self_head),
    )


@dataclass(frozen=True)
class Plan:
    """A command line, once: the settings of each run it makes, which models to load for all
    of them, the prompts, and the draft memory file to empty first ("": none)."""

    runs: tuple[DecodeConfig, ...]
    spec: ModelSpec
    prompts: tuple[str, ...]
    forget_memory: str = ""


def plan(args: argparse.Namespace) -> Plan:
    """The command line as a Plan: every flag read first (what drafts, the models to load,
    the run's settings, the prompts), then the drafter checked by the registry and the
    settings validated, once. Every model the run drafts with is in the spec, so building a
    run loads none (a self-draft's layers chosen by measurement are loaded once chosen)."""
    choice = choice_from_flags(args)
    spec = model_spec(args, choice)
    config = config_from_flags(args, choice)
    prompts = read_prompts(args.prompt, args.prompt_file, args.suite)
    forget = memory_to_forget(getattr(args, "forget_draft_memory", False),
                              getattr(args, "draft_memory", "") or "")
    return Plan((checked_config(config, default_k=args.draft_max is None),), spec,
                tuple(prompts), forget)


def settings(args: argparse.Namespace) -> tuple[DecodeConfig, ModelSpec]:
    """The command line, once: the run's settings (what drafts among them) and which models
    to load."""
    config = decode_config(args)
    return config, model_spec(args, config.drafter)


def decode_config(args: argparse.Namespace,
                  choice: DrafterChoice | None = None) -> DecodeConfig:
    """The run's settings, checked; what drafts is `choice`, or what the flags say."""
    choice = choice_from_flags(args) if choice is None else choice
    return checked_config(config_from_flags(args, choice), default_k=args.draft_max is None)


def config_from_flags(args: argparse.Namespace, choice: DrafterChoice) -> DecodeConfig:
    """The run's settings as the flags give them (DecodeConfig's k where none is given;
    checked_config sets a lookup's default)."""
    return DecodeConfig(
        n_predict=args.n_predict,
        draft_max=args.draft_max if args.draft_max is not None else DecodeConfig.draft_max,
        draft_min=args.draft_min,
        draft_p_min=args.draft_p_min or 0.0, adaptive=args.adaptive,
        tree_width=args.tree_width, tree_nodes=args.tree_nodes,
        draft_p_split=args.draft_p_split,
        sampling=SamplingParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p,
                                min_p=args.min_p, seed=args.seed),
        drafter=choice,
    )


def checked_config(config: DecodeConfig, default_k: bool) -> DecodeConfig:
    """The settings once checked: what drafts by the registry, k's default where none was
    given (32 where a lookup leads: its drafts are long), and the settings' own limits."""
    if default_k and copies(config.drafter):
        config = replace(config, draft_max=32)
    check(config.drafter)
    config.validate()
    return config


def memory_to_forget(forget: bool, memory: str) -> str:
    """The file --forget-draft-memory empties ("" without the flag); `memory`: --draft-memory."""
    if not forget:
        return ""
    if not memory:
        raise SettingsError("--forget-draft-memory needs the file: --draft-memory PATH")
    return memory


def forget_memory(path: str) -> None:
    """Empty a draft memory file (also one that is damaged); "" is none."""
    if path:
        DraftMemory(path).save()


def forget_draft_memory(args: argparse.Namespace) -> None:
    """--forget-draft-memory: empty the memory file."""
    forget_memory(memory_to_forget(getattr(args, "forget_draft_memory", False),
                                   getattr(args, "draft_memory", "") or ""))


def read_prompts(given: list[str] | None, prompt_file: str | None, suite: str) -> list[str]:
    """-p's prompts (repeatable) and --prompt-file's lines (one JSON string each), else the
    built-in prompts of --suite."""
    prompts = list(given or [])
    if prompt_file:
        try:
            with open(prompt_file, encoding="utf-8") as f:
                for number, line in enumerate(f, start=1):
                    if line.strip():
                        try:
                            prompts.append(str(json.loads(line)))
                        except json.JSONDecodeError as exc:
                            raise SettingsError(
                                f"{prompt_file} line {number} is not a JSON string — "
                                'write one prompt per line, e.g. "def f(x):\\n"'
                            ) from exc
        except OSError as exc:
            raise SettingsError(f"cannot read prompt file {prompt_file}: "
                                f"{exc.strerror}") from exc
    return prompts or SUITES[suite]
