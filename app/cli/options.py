"""The flags the commands share, and turning them into a ModelSpec and a DecodeConfig."""

from __future__ import annotations

import argparse

from app.draft_memory import DraftMemory
from app.engine.decode_config import DecodeConfig
from app.engine.sampling import SamplingParams
from app.engine.suffix import SuffixOptions
from app.errors import SettingsError
from app.models.loading import ModelSpec


def add_model_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("models")
    g.add_argument("-m", "--target", "--model", dest="target",
                   help="target model: a .gguf file or a transformers folder (default: demo pair)")
    g.add_argument("-md", "--draft", "--model-draft", dest="draft", help="draft model")
    g.add_argument("--cross-vocab", dest="cross_vocab", default="auto",
                   choices=("auto", "tli", "string"),
                   help="a draft with another vocabulary than the target's: tli (draws among "
                        "the tokens both share; exact under sampling too), string (its greedy "
                        "text re-tokenized for the target) or auto (tli)")
    g.add_argument("--ngram", action="store_true",
                   help="draft by n-gram / prompt lookup; with a draft model, look up first "
                        "and use the draft model when the context has no match")
    g.add_argument("--suffix", action="store_true",
                   help="draft by suffix decoding: copy what most often followed the last "
                        "tokens in the prompt, the output so far and (with --draft-memory) "
                        "earlier runs' outputs, as a tree of continuations by frequency")
    g.add_argument("--draft-memory", dest="draft_memory", default="", metavar="PATH",
                   help="with --suffix: a file of earlier outputs of the same target to draft "
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
    g.add_argument("--self-draft-layers", dest="self_draft_layers", default=None, metavar="N",
                   help="draft with the target's own first N layers (then its final norm and "
                        "output head); bench takes a list, e.g. 4,8,12, for a layer sweep")
    g.add_argument("--draft-heads", dest="draft_heads", default=None, metavar="HEADS",
                   help="draft with heads trained on the target's hidden states "
                        "(draftlens heads train)")
    g.add_argument("--draft-mtp", dest="draft_mtp", action="store_true",
                   help="draft with the target's own multi-token-prediction (MTP / NextN) "
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
                        "pays; a draft model's draft (up to --draft-max) ends where its "
                        "confidence says one more token would not pay")
    g.add_argument("--temp", "--temperature", dest="temp", type=float, default=0.0,
                   help="0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--min-p", type=float, default=0.0)
    g.add_argument("-s", "--seed", type=int, default=None)
    g.add_argument("--chat", action="store_true", help="apply the target's chat template")


def self_draft_layers(args: argparse.Namespace) -> list[int]:
    """The N values of --self-draft-layers (empty when not given)."""
    text = getattr(args, "self_draft_layers", None)
    if not text:
        return []
    try:
        values = [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError as exc:
        raise SettingsError(f"--self-draft-layers takes layer counts like 8 or 4,8,12 "
                            f"(got {text})") from exc
    if not values or min(values) < 1:
        raise SettingsError(f"--self-draft-layers must be 1 or more (got {text})")
    return values


def model_spec(args: argparse.Namespace) -> ModelSpec:
    target, draft = args.target, args.draft
    layers_list = self_draft_layers(args)
    heads = getattr(args, "draft_heads", None)
    suffix = getattr(args, "suffix", False)
    memory = getattr(args, "draft_memory", "") or ""
    mtp = getattr(args, "draft_mtp", False)
    if (sum(bool(x) for x in (layers_list, draft, heads, suffix, mtp)) > 1
            or ((suffix or mtp) and args.ngram)):
        raise SettingsError("pick one draft: -md DRAFT, --self-draft-layers N, "
                            "--draft-heads HEADS, --draft-mtp, --ngram or --suffix")
    if memory and not suffix:
        raise SettingsError("--draft-memory is the memory of suffix decoding — add --suffix")
    drafts_without_a_model = bool(args.ngram or layers_list or heads or suffix or mtp)
    if target is None:
        from app.models.demo import demo_installed, demo_paths

        if not demo_installed():
            raise SettingsError("no target model given and the demo pair is not installed — "
                                "pass -m FILE, or run: draftlens models fetch-demo")
        demo_target, demo_draft = demo_paths()
        target = str(demo_target)
        if draft is None and not drafts_without_a_model:
            draft = str(demo_draft)
    if draft is None and not drafts_without_a_model:
        raise SettingsError("no draft given — pass -md DRAFT_FILE, --ngram for prompt lookup, "
                            "or --self-draft-layers N for the target's own first layers")
    layers = args.n_gpu_layers
    if layers != "auto":
        try:
            layers = int(layers)
        except ValueError as exc:
            raise SettingsError(f"--n-gpu-layers must be a number or auto (got {layers})") from exc
    return ModelSpec(
        target=target, draft=draft, ngram=args.ngram, backend=args.backend, device=args.device,
        n_gpu_layers=layers, n_ctx=args.n_ctx, n_threads=args.n_threads,
        trust_remote_code=args.trust_remote_code, allow_pickle=args.allow_pickle,
        batch_invariant=args.exact_kernels, rpc=args.rpc.strip(),
        self_draft_layers=layers_list[0] if layers_list else 0,
        draft_heads=heads or "", suffix=suffix, draft_memory=memory, draft_mtp=mtp,
        cross_vocab=getattr(args, "cross_vocab", "auto"),
    )


def decode_config(args: argparse.Namespace) -> DecodeConfig:
    copying = args.ngram or getattr(args, "suffix", False)
    draft_max = args.draft_max if args.draft_max is not None else (32 if copying else 8)
    config = DecodeConfig(
        n_predict=args.n_predict, draft_max=draft_max, draft_min=args.draft_min,
        draft_p_min=args.draft_p_min or 0.0, adaptive=args.adaptive,
        tree_width=args.tree_width, tree_nodes=args.tree_nodes,
        draft_p_split=args.draft_p_split,
        suffix=SuffixOptions(factor=getattr(args, "spec_factor", SuffixOptions.factor),
                             offset=getattr(args, "spec_offset", SuffixOptions.offset),
                             min_prob=getattr(args, "spec_min_prob", SuffixOptions.min_prob)),
        sampling=SamplingParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p,
                                min_p=args.min_p, seed=args.seed),
    )
    config.validate()
    return config


def forget_draft_memory(args: argparse.Namespace) -> None:
    """--forget-draft-memory: empty the memory file (also one that is damaged)."""
    if not getattr(args, "forget_draft_memory", False):
        return
    if not getattr(args, "draft_memory", ""):
        raise SettingsError("--forget-draft-memory needs the file: --draft-memory PATH")
    DraftMemory(args.draft_memory).save()
