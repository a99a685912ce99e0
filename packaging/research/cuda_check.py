#!/usr/bin/env python3
"""What DraftLens's torch backend does on a CUDA GPU, measured: run it on the GPU machine.

    python3 packaging/research/cuda_check.py --device cuda --out DIR     # the full check
    python3 packaging/research/cuda_check.py --device cpu --quick --out DIR   # small, to debug it

Random-weight models only (built here; nothing is downloaded). Four parts (--parts):

identity  Greedy identity: for each drafting scheme of the torch backend (draft model chain,
          tree, adaptive k, self-speculation from the target's first layers, random draft
          heads, n-gram lookup, suffix decoding, a draft of another vocabulary through TLI)
          speculative greedy text against plain decoding of the same prompts
          (app.analysis.exactness.GREEDY_PROMPTS), in the default dtype (bfloat16 on CUDA) and
          in float32 with TF32 off, and in the exact mode (--exact-kernels: every pass one
          token at a time), where any difference is a bug. Each difference is explained the
          way `check-exact` does: the target's top-two logit gap in both runs at the first
          differing token, judged
          against the kernel noise measured on the same model (app.analysis.divergence,
          app.analysis.kernel_noise).
batch     Batch invariance: the logits of each position scored by one-token steps against the
          same positions scored in passes of n tokens (the verify pass), on a fresh cache
          and on a cache written by such passes; how many rows are bit-identical, the largest
          |Δ logit| and app.analysis.kernel_noise's bound, in bfloat16 and float32 (TF32 off),
          for the tiny model and the speed part's target.
sampled   The sampled exactness test: `check-exact`'s own check_exact() on the tiny pair, and
          the G-test of the first two emitted tokens (chain and tree drafts) against the
          target's exact distributions, with the two planted bugs of the test suite
          (resampling from p; always accepting) that a working test must reject.
speed     `draftlens bench` (the project's CLI, in a child process) on a larger random-weight
          Llama-shaped pair: the target (TinyLlama-1.1B's shape, 22 layers) and, as the draft,
          the target's own first 2 layers saved as a model of their own (so that acceptance is
          not zero), greedy; DraftLens plain against chain k = 2 and 4, a tree, adaptive k
          and the early-exit self-draft, and transformers' own generate(), plain and assisted
          (--compare-hf).

Everything goes to DIR/cuda_check.json (and the log to stdout).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("DRAFTLENS_IN_PROCESS", "1")  # the bench child measures in-process

import numpy as np  # noqa: E402

T0 = time.time()


def say(message: str) -> None:
    print(f"[{time.time() - T0:7.1f}s] {message}", flush=True)


# --- models ------------------------------------------------------------------------------

PRINTABLE = [chr(c) for c in range(32, 127)] + ["\n", "\t"]
SPECIALS = ["<s>", "</s>", "<unk>"]


def write_char_tokenizer(folder: Path, n_vocab: int) -> None:
    """A character tokenizer (printable ASCII) padded with filler tokens to n_vocab ids, so
    every id a random model emits decodes."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    names = SPECIALS + PRINTABLE
    names += [f"<x{i}>" for i in range(n_vocab - len(names))]
    tokenizer = Tokenizer(models.WordLevel({t: i for i, t in enumerate(names)},
                                           unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                            unk_token="<unk>").save_pretrained(folder)


def write_random_llama(folder: Path, draft_folder: Path, *, vocab: int, hidden: int,
                       layers: int, inter: int, heads: int, kv_heads: int, draft_layers: int,
                       device: str, seed: int = 0) -> dict[str, Any]:
    """A random-weight LlamaForCausalLM (bfloat16 safetensors) and, as its draft, its own
    first draft_layers layers with its embeddings, final norm and output head, saved as a
    model of its own. The special tokens' output rows are zero (never the argmax in
    practice), so greedy runs do not stop at a random EOS."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    def config(n_layers: int) -> Any:
        return LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
                           num_hidden_layers=n_layers, num_attention_heads=heads,
                           num_key_value_heads=kv_heads, max_position_embeddings=4096,
                           bos_token_id=0, eos_token_id=1, tie_word_embeddings=False)

    torch.manual_seed(seed)
    with torch.device(device):
        model = LlamaForCausalLM(config(layers))
    with torch.no_grad():
        model.lm_head.weight[: len(SPECIALS)] = 0
    model = model.to(torch.bfloat16)
    tuning = quiet_deep_layers(model, draft_layers, device)
    n_target = sum(p.numel() for p in model.parameters())
    state = model.state_dict()
    keep = {k: v for k, v in state.items()
            if not k.startswith("model.layers.") or int(k.split(".")[2]) < draft_layers}
    with torch.device(device):
        draft = LlamaForCausalLM(config(draft_layers)).to(torch.bfloat16)
    draft.load_state_dict(keep)
    n_draft = sum(p.numel() for p in draft.parameters())
    for out, m in ((folder, model), (draft_folder, draft)):
        m.save_pretrained(out)
        write_char_tokenizer(out, vocab)
    del model, draft, state, keep
    if device == "cuda":
        torch.cuda.empty_cache()
    return {"target_params": n_target, "draft_params": n_draft, "deep_layer_scale": tuning,
            "vocab": vocab,
            "hidden": hidden, "layers": layers, "intermediate": inter, "heads": heads,
            "kv_heads": kv_heads, "draft_layers": draft_layers}


AGREEMENT = 0.7  # the draft's top-1 agreement with the target the deep layers are tuned to


def quiet_deep_layers(model: Any, draft_layers: int, device: str) -> list[list[float]]:
    """At random init every layer adds about as much to the residual stream as the others,
    so a model's first layers would not predict its output at all (acceptance 0). Scale the
    output projections (o_proj, down_proj) of the layers after the first draft_layers down,
    step by step, until the first layers' top-1 agrees with the whole model's on AGREEMENT
    of the positions of a code text (teacher-forced): a target whose later layers refine
    what its first ones say. The cost of a pass is unchanged. Returns (scale, agreement)
    per step tried."""
    import torch

    from app.analysis.kernel_noise import SAMPLE_TEXT

    ids = torch.tensor([[3 + PRINTABLE.index(c) for c in SAMPLE_TEXT if c in PRINTABLE]],
                       device=device)
    deep = model.model.layers[draft_layers:]
    tried, current = [], 1.0
    for scale in (1.0, 0.5, 0.3, 0.2, 0.1, 0.05, 0.03, 0.02, 0.01, 0.005):
        with torch.no_grad():
            for layer in deep:
                layer.self_attn.o_proj.weight.mul_(scale / current)
                layer.mlp.down_proj.weight.mul_(scale / current)
            current = scale
            out = model(input_ids=ids, output_hidden_states=True)
            # hidden_states[i]: the residual stream after layer i (the last entry is normed)
            early = model.lm_head(model.model.norm(out.hidden_states[draft_layers]))
            agree = float((early.argmax(-1) == out.logits.argmax(-1)).float().mean())
        tried.append([scale, agree])
        if agree >= AGREEMENT:
            break
    return tried


def tiny_models(root: Path) -> dict[str, Path]:
    """The test suite's tiny pair (tests/tiny_hf.py), a draft of another vocabulary, and
    random draft heads for the target."""
    from tests.tiny_hf import CHARS, write_tiny_hf

    target = write_tiny_hf(root / "target", seed=0)
    draft = write_tiny_hf(root / "draft", seed=0, noise=0.3)
    # another vocabulary: the same characters in another order, some missing, some added
    other = [c for c in reversed(CHARS) if c not in "qxz"] + list("0123456789")
    cross = write_tiny_hf(root / "cross", seed=0, noise=0.3, chars=other, rows_from=target)
    return {"target": target, "draft": draft, "cross": cross}


def write_random_heads(target: Any, path: Path, n_heads: int = 3, rank: int = 8) -> None:
    """Untrained heads (small random blocks) over the target's own output rows, read through
    the backend (TorchModel.output_rows), so they mostly propose what the target would say
    next from the same hidden state."""
    from app.engine.drafters.heads import HeadsWeights
    from app.models.draft_heads import save_heads

    rng = np.random.default_rng(0)
    d, v = target.n_embd, target.n_vocab
    ids = np.arange(v)
    heads = HeadsWeights(
        (0.3 * rng.standard_normal((n_heads, rank, d)) / np.sqrt(d)).astype(np.float32),
        (0.3 * rng.standard_normal((n_heads, d, rank)) / np.sqrt(rank)).astype(np.float32),
        ids, target.output_rows(ids), v, target.path)
    save_heads(path, heads)


# --- dtype modes -------------------------------------------------------------------------

def set_tf32(enabled: bool) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled


@contextmanager
def torch_dtype(name: str | None):
    """Load models in `name` (None: the backend's own default for the device), by replacing
    the backend's dtype choice for the duration; the bench CLI always uses the default."""
    import torch

    import backends.torch_hf as torch_hf

    saved = torch_hf.dtype_for
    if name:
        torch_hf.dtype_for = lambda device: getattr(torch, name)
    try:
        yield
    finally:
        torch_hf.dtype_for = saved


# --- part 1: greedy identity ---------------------------------------------------------------

def run_session(pair: Any, config: Any, ids: list[int], plain: bool) -> Any:
    from app.runs import build_session

    session = build_session(pair, config, plain=plain)
    session.tree_steps = sum(1 for step in session.steps(ids) if step.is_tree)
    return session


def greedy_identity(pair: Any, config: Any, prompts: list[str]) -> dict[str, Any]:
    """check-exact's greedy suite (app.analysis.exactness.greedy_suite) with any decode
    config (a tree too): plain and speculative text per prompt, the first difference of each
    explained against the measured kernel noise."""
    from app.analysis.divergence import MarginTap, explain_divergence, first_difference
    from app.analysis.exactness import divergence_entry
    from app.analysis.kernel_noise import cached_kernel_noise

    model = pair.target
    tap = MarginTap(model)
    pair.target = tap
    differing, per_prompt = [], []
    drafted = accepted = tokens = tree_steps = 0
    try:
        for prompt in prompts:
            ids = model.tokenize(prompt)
            tap.top = {}
            plain = list(run_session(pair, config, ids, plain=True).output_ids)
            plain_top, tap.top = tap.top, {}
            session = run_session(pair, config, ids, plain=False)
            spec = list(session.output_ids)
            drafted += session.stats.drafted
            accepted += session.stats.accepted
            tree_steps += session.tree_steps
            tokens += len(plain)
            where = first_difference(plain, spec)
            per_prompt.append({"prompt": prompt, "tokens": len(plain),
                               "first_difference": where,
                               "drafted": session.stats.drafted,
                               "accepted": session.stats.accepted})
            if where is not None:
                differing.append((prompt, len(ids), plain, spec, plain_top, dict(tap.top)))
    finally:
        pair.target = model
    result: dict[str, Any] = {"identical": not differing, "prompts": len(prompts),
                              "tokens": tokens, "drafted": drafted, "accepted": accepted,
                              "tree_steps": tree_steps,
                              "per_prompt": per_prompt, "divergences": [],
                              "noise_bound": None}
    if differing:
        result["noise_bound"] = cached_kernel_noise(model).bound
        for prompt, n_prompt, plain, spec, plain_top, spec_top in differing:
            found = explain_divergence(n_prompt, plain, spec, plain_top, spec_top,
                                       model.token_text, result["noise_bound"])
            if found is None:  # one text a prefix of the other
                result["divergences"].append({"prompt": prompt, "near_tie": False,
                                              "reason": "one text ends where the other goes on"})
            else:
                result["divergences"].append(divergence_entry(prompt, found))
    result["all_near_ties"] = (not differing) or all(d["near_tie"]
                                                     for d in result["divergences"])
    return result


MODES = {"default", "float32, TF32 off", "exact mode"}  # --identity-modes


def identity_part(models: dict[str, Path], heads: Path, device: str,
                  n_predict: int) -> list[dict[str, Any]]:
    from app.analysis.exactness import GREEDY_PROMPTS
    from app.engine.decode_config import DecodeConfig, DrafterChoice, DrafterOptions
    from app.models.loading import ModelSpec, load_pair

    target, draft, cross = (str(models[k]) for k in ("target", "draft", "cross"))
    chain = DecodeConfig(n_predict=n_predict, draft_max=4)
    def draws(names: str, **options: Any) -> DrafterChoice:
        return DrafterChoice(tuple(names.split(",")), DrafterOptions(**options))

    schemes = [
        ("draft model, chain k=4", draft, draws("draft"), chain),
        ("draft model, tree (width 2, 8 nodes, depth 4)", draft, draws("draft"),
         replace(chain, tree_width=2, tree_nodes=8)),
        ("draft model, adaptive k (max 8)", draft, draws("draft"),
         replace(chain, draft_max=8, adaptive=True)),
        ("self-draft, layer 1 of 2 skipped, k=4", None, draws("self", skip="1"), chain),
        ("draft heads (3 random heads)", None, draws("heads", heads=str(heads)), chain),
        ("n-gram lookup, k=8", None, draws("ngram"), replace(chain, draft_max=8)),
        ("suffix decoding, k=8", None, draws("suffix"), replace(chain, draft_max=8)),
        ("suffix decoding, tree (width 2)", None, draws("suffix"),
         replace(chain, draft_max=8, tree_width=2, tree_nodes=8)),
        ("suffix decoding, adaptive (max 16, declined drafts shadow-checked)", None,
         draws("suffix"), replace(chain, draft_max=16, adaptive=True)),
        ("n-gram lookup, adaptive (max 16)", None, draws("ngram"),
         replace(chain, draft_max=16, adaptive=True)),
        ("suffix then draft model (chain), k=8", draft, draws("suffix,draft"),
         replace(chain, draft_max=8)),
        ("draft of another vocabulary (TLI), k=4", cross, draws("draft"), chain),
    ]
    rows = []
    modes = (("default", None, False), ("float32, TF32 off", "float32", False),
             ("exact mode", None, True))  # exact: --exact-kernels, one token per pass
    for mode, dtype, exact in modes:
        if mode not in MODES:
            continue
        for name, draft_file, choice, scheme_config in schemes:
            config = replace(scheme_config, drafter=choice)
            spec = ModelSpec(target=target, draft=draft_file, backend="torch", device=device,
                             batch_invariant=exact,
                             self_skips=(choice.options.skip,) if choice.uses("self") else ())
            dtype_name = dtype or "default"
            try:  # a broken scheme is a finding, not the end of the run
                with torch_dtype(dtype):
                    pair = load_pair(spec)
                dtype_name = str(pair.target.dtype)
                try:
                    result = greedy_identity(pair, config, GREEDY_PROMPTS)
                finally:
                    pair.close()
            except Exception as exc:
                result = {"error": f"{type(exc).__name__}: {exc}"}
            row = {"mode": mode, "dtype": dtype_name, "scheme": name, **result}
            rows.append(row)
            say(f"identity {mode:17} {dtype_name:9} {name:48} " + identity_line(row))
    return rows


def identity_line(row: dict[str, Any]) -> str:
    if "error" in row:
        return f"ERROR {row['error']}"
    text = (f"identical {row['identical']}, drafted {row['drafted']}, "
            f"accepted {row['accepted']}, {row['tokens']} tokens, tree passes "
            f"{row['tree_steps']}")
    for d in row["divergences"]:
        m = d.get("margins", {})
        text += (f"\n      diverges at token {d.get('position')} of {d['prompt']!r}: "
                 f"{d.get('plain_text')!r} vs {d.get('other_text')!r}, top-2 gap plain "
                 f"{fmt(m.get('plain'))} spec {fmt(m.get('speculative'))}, moved "
                 f"{fmt(d.get('gap_moved'))} vs noise bound {fmt(d.get('noise_bound'))}: "
                 f"{'near-tie' if d['near_tie'] else 'NOT a near-tie'} ({d.get('reason')})")
    return text


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


# --- part 2: batch invariance ----------------------------------------------------------------

def row_invariance(model: Any, positions: int, sizes: tuple[int, ...]) -> dict[str, Any]:
    """Single-step logits per position against the same positions' rows from passes of n
    tokens: on a fresh cache (each pass starts on rows written by single steps) and carried
    (every row written by passes, as when all drafts are accepted). Bit-identical rows,
    largest |Δ logit|, argmax flips."""
    from app.analysis.kernel_noise import _PROMPT_TOKENS, sample_ids

    positions = max(1, min(positions, model.n_ctx - _PROMPT_TOKENS))
    ids = sample_ids(model, _PROMPT_TOKENS + positions)
    prompt, stretch = ids[:_PROMPT_TOKENS], ids[_PROMPT_TOKENS:]
    model.truncate(0)
    model.extend(prompt, 0)
    ref = np.stack([model.extend([t], 1)[0] for t in stretch])
    # the one-token path run twice: is it even deterministic?
    model.truncate(_PROMPT_TOKENS)
    again = np.stack([model.extend([t], 1)[0] for t in stretch])
    out: dict[str, Any] = {"positions": positions,
                           "single_step_repeatable": bool(np.array_equal(ref, again)),
                           "sizes": {}}
    for n in sizes:
        starts = list(range(0, positions, n))
        fresh = [None] * len(starts)
        for i in reversed(range(len(starts))):
            s = starts[i]
            model.truncate(_PROMPT_TOKENS + s)
            fresh[i] = model.extend(stretch[s:s + n], len(stretch[s:s + n]))
        model.truncate(_PROMPT_TOKENS)
        carried = [model.extend(stretch[s:s + n], len(stretch[s:s + n])) for s in starts]
        entry = {}
        for label, rows in (("fresh", np.concatenate(fresh)), ("carried", np.concatenate(carried))):
            same = np.all(rows == ref, axis=1)
            # the first row of each fresh pass follows single-step rows only; the others are
            # the ones a verify pass changes
            entry[label] = {"identical_rows": int(same.sum()), "rows": int(len(same)),
                            "max_abs_diff": float(np.abs(rows - ref).max()),
                            "argmax_flips": int((rows.argmax(1) != ref.argmax(1)).sum())}
        out["sizes"][n] = entry
    model.truncate(0)
    return out


def batch_part(paths: dict[str, Path], device: str, positions: int,
               sizes: tuple[int, ...]) -> list[dict[str, Any]]:
    from app.analysis.kernel_noise import measure_kernel_noise
    from backends.torch_hf import TorchModel

    rows = []
    for label, path in paths.items():
        for dtype in ("bfloat16", "float32"):
            model = TorchModel(path, device=device, dtype=dtype)
            try:
                inv = row_invariance(model, positions, sizes)
                noise = measure_kernel_noise(model, positions, sizes)
            finally:
                model.close()
            row = {"model": label, "dtype": dtype, **inv, "kernel_noise_bound": noise.bound,
                   "kernel_noise": noise.as_dict()}
            rows.append(row)
            parts = [f"n={n}: fresh {e['fresh']['identical_rows']}/{e['fresh']['rows']} "
                     f"max|Δ| {e['fresh']['max_abs_diff']:.3g}, carried "
                     f"{e['carried']['identical_rows']}/{e['carried']['rows']} max|Δ| "
                     f"{e['carried']['max_abs_diff']:.3g}" for n, e in inv["sizes"].items()]
            say(f"batch invariance {label} {dtype}: single steps repeatable "
                f"{inv['single_step_repeatable']}; kernel-noise bound {noise.bound:.4g}\n      "
                + "\n      ".join(parts))
    return rows


# --- part 3: sampled exactness ------------------------------------------------------------

@contextmanager
def planted(bug: str):
    """The test suite's planted bugs (tests/helpers.py), swapped into app.engine.acceptance,
    which the chain and the tree verifier both call."""
    import app.engine.acceptance as acceptance

    saved = acceptance.residual_distribution, acceptance.judge
    if bug == "resample from p":
        acceptance.residual_distribution = lambda p, q: p
    elif bug == "always accept":
        right = acceptance.judge

        def wrong(token, p, q, params, rng):  # type: ignore[no-untyped-def]
            if params.greedy:
                return right(token, p, q, params, rng)
            return acceptance.Judgement(True, float(rng.random()))

        acceptance.judge = wrong
    try:
        yield
    finally:
        acceptance.residual_distribution, acceptance.judge = saved


def first_two_draws(pair: Any, config: Any, prompt_ids: list[int], samples: int,
                    seed: int) -> np.ndarray:
    """The first two tokens of `samples` speculative runs, seeds seed, seed + 1, ...
    (app.analysis.exactness.sampled_tokens, with any decode config)."""
    from app.runs import build_session

    out = np.empty((samples, 2), dtype=np.int64)
    for i in range(samples):
        run = replace(config, sampling=replace(config.sampling, seed=seed + i))
        session = build_session(pair, run)
        for _ in session.steps(prompt_ids):
            if len(session.output_ids) >= 2:
                break
        out[i] = session.output_ids[:2]
    return out


def sampled_part(models: dict[str, Path], device: str, samples: int,
                 power_samples: int) -> dict[str, Any]:
    from app.analysis.exact_sampled import exact_first_two
    from app.analysis.exactness import check_exact
    from app.analysis.stats import g_test
    from app.engine.decode_config import DecodeConfig, DrafterChoice
    from app.engine.sampling import SamplingParams
    from app.models.loading import ModelSpec, load_pair

    spec = ModelSpec(target=str(models["target"]), draft=str(models["draft"]),
                     backend="torch", device=device)
    pair = load_pair(spec)
    out: dict[str, Any] = {"dtype": pair.target.dtype}
    try:
        say(f"check-exact's check_exact() on the tiny pair, {samples} samples")
        report = check_exact(pair, DrafterChoice(("draft",)), samples=samples, draft_max=4)
        out["check_exact"] = report.to_dict()
        say(f"check_exact: {report.verdict()}")
        # the test suite's power check: top-k 5 makes the draft's and the target's supports
        # differ, so resampling from p instead of the residual moves the first token's law
        prompt_ids = pair.target.tokenize("def add(a, b):\n    return")
        params = SamplingParams(temperature=1.0, top_k=5, order=pair.target.sampler_order)
        first, second = exact_first_two(pair, prompt_ids, params)
        out["power"] = []
        drafter = DrafterChoice(("draft",))
        configs = {"chain k=3": DecodeConfig(n_predict=4, draft_max=3, stop_at_eos=False,
                                             sampling=params, drafter=drafter),
                   "tree width 2, 6 nodes": DecodeConfig(n_predict=4, draft_max=3,
                                                         stop_at_eos=False, sampling=params,
                                                         tree_width=2, tree_nodes=6,
                                                         drafter=drafter)}
        for cname, config in configs.items():
            for bug in ("none", "resample from p", "always accept"):
                with planted(bug):
                    tokens = first_two_draws(pair, config, prompt_ids, power_samples, 50_000)
                p1 = g_test(tokens[:, 0], first).p_value
                p2 = g_test(tokens[:, 1], second).p_value
                row = {"drafts": cname, "bug": bug, "samples": power_samples,
                       "p_first": p1, "p_second": p2}
                out["power"].append(row)
                say(f"sampled G-test {cname:22} planted bug: {bug:17} p(first) {p1:.3g}, "
                    f"p(second) {p2:.3g} -> "
                    + ("PASS" if min(p1, p2) > 1e-3 else "FAIL") + " at 1e-3")
    finally:
        pair.close()
    return out


# --- part 4: speed ------------------------------------------------------------------------

def bench(args_list: list[str], home: Path, timeout: int) -> dict[str, Any]:
    """One `draftlens bench --json` in a child process (the project's own CLI path)."""
    command = [sys.executable, "-m", "app.cli.main", "bench", "--json", *args_list]
    env = dict(os.environ, DRAFTLENS_HOME=str(home), PYTHONPATH=os.pathsep.join(
        [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))
    start = time.time()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    result: dict[str, Any] = {"command": "draftlens bench --json " + " ".join(args_list),
                              "exit": done.returncode, "seconds": time.time() - start}
    if lines:
        result["report"] = json.loads(lines[-1])
    else:
        result["stderr_tail"] = done.stderr[-3000:]
    return result


def speed_part(root: Path, device: str, quick: bool, n_predict: int, rounds: int,
               home: Path) -> dict[str, Any]:
    shape = (dict(vocab=512, hidden=128, layers=6, inter=256, heads=4, kv_heads=2,
                  draft_layers=1) if quick else
             dict(vocab=32000, hidden=2048, layers=22, inter=5632, heads=32, kv_heads=4,
                  draft_layers=2))
    target, draft = root / "speed-target", root / "speed-draft"
    say(f"building the speed pair {shape}")
    info = write_random_llama(target, draft, device=device, **shape)
    say(f"built: target {info['target_params'] / 1e6:.0f}M params, draft "
        f"{info['draft_params'] / 1e6:.0f}M params; deep-layer output scale and the "
        f"draft's top-1 agreement (teacher-forced): {info['deep_layer_scale']}")
    base = ["-m", str(target), "--backend", "torch", "--device", device, "-n", str(n_predict),
            "--rounds", str(rounds)]
    rows = [
        ("chain k=2", ["-md", str(draft), "--draft-max", "2"]),
        ("chain k=4, with transformers plain and assisted", ["-md", str(draft), "--draft-max",
                                                             "4", "--compare-hf"]),
        ("tree width 2, 8 nodes (depth 4), and the chain beside it",
         ["-md", str(draft), "--draft-max", "4", "--tree-width", "2", "--tree-nodes", "8"]),
        ("adaptive k (max 8)", ["-md", str(draft), "--draft-max", "8", "--adaptive"]),
        (f"self-draft (first {shape['draft_layers']} layers kept, shared weights), k=4",
         ["--self-skip", f"{shape['draft_layers']}-{shape['layers'] - 1}", "--draft-max",
          "4"]),
    ]
    out: dict[str, Any] = {"shape": info, "n_predict": n_predict, "rounds": rounds,
                           "rows": []}
    for name, flags in rows:
        say(f"bench: {name}")
        result = bench(base + flags, home, timeout=900)
        result["row"] = name
        out["rows"].append(result)
        say("      " + speed_line(result))
    out["target_path"], out["draft_path"] = str(target), str(draft)
    return out


def speed_line(result: dict[str, Any]) -> str:
    r = result.get("report")
    if r is None:
        return f"FAILED (exit {result['exit']}): {result.get('stderr_tail', '')[-800:]}"
    text = (f"plain {r['plain_tok_s']:.1f} tok/s, speculative {r['spec_tok_s']:.1f} tok/s "
            f"({r['speedup']:.2f}x), acceptance {r['acceptance']:.3f}, tokens/pass "
            f"{r['tokens_per_pass']:.2f}, mean k {r['mean_k']:.2f}, identical {r['identical']}; "
            f"step {1000 * r['t_target_step']:.2f} ms, draft/verify/engine per step "
            f"{1000 * r['t_draft_per_step']:.2f}/{1000 * r['t_verify_per_step']:.2f}/"
            f"{1000 * r['t_overhead_per_step']:.2f} ms")
    if "chain_tok_s" in r:
        text += (f"; chain same depth {r['chain_tok_s']:.1f} tok/s ({r['chain_speedup']:.2f}x, "
                 f"identical {r['chain_identical']})")
    if "hf_plain_tok_s" in r:
        text += (f"; transformers plain {r['hf_plain_tok_s']:.1f} tok/s, assisted "
                 f"{r['hf_assisted_tok_s']:.1f} tok/s ({r['hf_assisted_speedup']:.2f}x, "
                 f"{r['hf_assisted_tokens_per_pass']:.2f} tokens/pass, identical "
                 f"{r['hf_identical']}); with prefill DraftLens plain "
                 f"{r['plain_tok_s_with_prefill']:.1f}, spec {r['spec_tok_s_with_prefill']:.1f}")
    for d in r.get("divergences") or []:
        text += (f"\n      diverges at token {d['position']}: {d['plain_text']!r} vs "
                 f"{d['other_text']!r}, gaps {fmt(d['plain_logit_gap'])}/"
                 f"{fmt(d['other_logit_gap'])}, moved {fmt(d.get('gap_moved'))} vs bound "
                 f"{fmt(d.get('noise_bound'))}: {'near-tie' if d['near_tie'] else 'NOT near-tie'}")
    return text


# --- main ---------------------------------------------------------------------------------

def environment(device: str) -> dict[str, Any]:
    import torch
    import transformers

    env = {"python": platform.python_version(), "torch": torch.__version__,
           "transformers": transformers.__version__, "numpy": np.__version__,
           "device": device, "cuda_matmul_allow_tf32_default":
               bool(torch.backends.cuda.matmul.allow_tf32),
           "float32_matmul_precision": torch.get_float32_matmul_precision()}
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name(0)
        env["cuda"] = torch.version.cuda
        env["bf16_supported"] = torch.cuda.is_bf16_supported()
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", required=True, help="folder for cuda_check.json")
    parser.add_argument("--parts", default="identity,batch,sampled,speed")
    parser.add_argument("--quick", action="store_true", help="small sizes (a CPU debug run)")
    parser.add_argument("--samples", type=int, default=None, help="check_exact's samples")
    parser.add_argument("--power-samples", type=int, default=None,
                        help="draws per planted-bug G-test")
    parser.add_argument("-n", type=int, default=None, help="tokens per speed run")
    parser.add_argument("--rounds", type=int, default=1, help="speed: alternations per prompt")
    parser.add_argument("--tag", default="", help="written to cuda_check-TAG.json")
    parser.add_argument("--identity-modes", default=",".join(sorted(MODES)),
                        help="identity: which of " + ", ".join(sorted(MODES)))
    args = parser.parse_args(argv)
    parts = set(args.parts.split(","))
    MODES.intersection_update(m.strip() for m in args.identity_modes.split(","))
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)

    import torch

    if args.device == "cpu":  # a debug run: stay light on a shared machine
        torch.set_num_threads(1)
        os.environ["OMP_NUM_THREADS"] = "1"
    work = Path(tempfile.mkdtemp(prefix="cuda_check."))
    home = work / "home"  # DraftLens's settings and measurement caches, fresh
    os.environ["DRAFTLENS_HOME"] = str(home)
    results: dict[str, Any] = {"environment": environment(args.device)}
    set_tf32(False)  # float32 runs: true float32 matmuls (bfloat16 is not affected)
    results["environment"]["tf32"] = "off (torch.backends.cuda.matmul.allow_tf32 = False)"
    say(json.dumps(results["environment"]))
    path = out_dir / (f"cuda_check-{args.tag}.json" if args.tag else "cuda_check.json")

    def save() -> None:
        path.write_text(json.dumps(results, indent=1, default=str))

    models = tiny_models(work / "tiny")
    heads = work / "tiny-heads.safetensors"
    from backends.torch_hf import TorchModel

    target = TorchModel(models["target"], device=args.device)
    write_random_heads(target, heads)  # through TorchModel.output_rows on the device
    target.close()

    quick = args.quick
    if "identity" in parts:
        results["identity"] = identity_part(models, heads, args.device, 24 if quick else 48)
        save()
    if "sampled" in parts:
        results["sampled"] = sampled_part(models, args.device,
                                          args.samples or (60 if quick else 400),
                                          args.power_samples or (100 if quick else 800))
        save()
    if "speed" in parts:
        results["speed"] = speed_part(work, args.device, quick, args.n or (16 if quick else 128),
                                      args.rounds, home)
        save()
    if "batch" in parts:
        paths = {"tiny (hidden 64, 2 layers)": models["target"]}
        if "speed" in results:
            paths["speed target (hidden 2048, 22 layers)" if not quick else
                  "speed target (quick shape)"] = Path(results["speed"]["target_path"])
        results["batch"] = batch_part(paths, args.device, 32 if quick else 96,
                                      (2, 3, 5, 9, 17))
        save()
    say(f"done; results in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
