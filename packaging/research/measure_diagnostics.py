"""Which per-token diagnostics tell accepted draft tokens from rejected ones, per kind of draft.

For each kind of draft (a separate draft model, self-draft: the target with layers skipped,
draft heads) this runs greedy speculative decoding with a fixed draft length (adaptive k may decode
plainly and judge nothing) over held-out prompts — none of them among the prompts the heads
train on — and, for every judged draft token, reads quantities the step already has:

  hidden_cos      self-draft: the cosine of the skipped model's and the target's final-norm
                  outputs (as the engine computes it); draft heads: the cosine of each head's
                  z (the vector the target's output rows read) and the target's final hidden
                  state at the same position (computed here: the engine no longer does); a
                  separate draft model: the stand-in the engine computed in the timed loop up
                  to b70cf68, the cosine of the two models' centred log-probabilities over the
                  whole vocabulary (recomputed here)
  q               q(x), the draft's probability of the token it drafted
  q_margin        the draft's top-1 probability minus its top-2
  neg_q_entropy   minus the entropy of the draft's distribution
  early_position  minus the token's position in the draft (0 first)
  overlap         sum over the vocabulary of min(p, q): reads the target's p, so it can only
                  be known after the verify pass

Each is oriented so that higher should mean "more likely accepted". The table gives the ROC
AUC of each for predicting acceptance, with a 95% interval from a bootstrap over steps (the
tokens of one draft are not independent: a rejection ends the draft); an interval that
contains 0.5 means no better than chance. --json writes the figures, DeLong's per-token
interval beside the bootstrap one, and the stand-in's measured cost per token.

Greedy decoding (temperature 0): q is then the temperature-1 softmax of the draft's logits
(app.engine.sampling), so log q is the draft's log-softmax and the stand-in is recomputed
from it exactly as the engine computed it from the raw logits.

  python packaging/research/measure_diagnostics.py -m TARGET.gguf -md DRAFT.gguf \\
      --self-skip 6-11,15-20 --draft-heads HEADS.safetensors -n 64 --draft-max 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import app.engine.session as session_module  # noqa: E402
from app.engine.decode_config import (
    DecodeConfig,  # noqa: E402
    DrafterChoice,  # noqa: E402
    DrafterOptions,  # noqa: E402
)
from app.engine.diagnostics import entropy  # noqa: E402
from app.engine.drafters import Draft  # noqa: E402
from app.engine.drafters.heads import HeadsDrafter, HeadsWeights  # noqa: E402
from app.engine.records import TokenRecord  # noqa: E402
from app.engine.sampling import SamplingParams, process  # noqa: E402
from app.engine.similarity import auc_interval, cosine, roc_auc  # noqa: E402
from app.models.loading import ModelSpec, load_pair  # noqa: E402
from app.runs import prepare_run  # noqa: E402

# held out: none is among app.models.draft_heads.BUILTIN_PROMPTS (the heads' training text);
# code, where drafts mostly pass, and prose, where they are rejected more often
PROMPTS = [
    "def merge_sorted(a, b):\n",
    "The history of the printing press begins",
    "class LinkedList:\n    def __init__(self):\n",
    "My grandmother's kitchen always smelled of",
    "import json\n\ndef load_config(path):\n",
    "Why do cats purr? Scientists think",
    "def word_count(text):\n",
    "The best way to learn a new language is",
]
QUANTITIES = ["hidden_cos", "q", "q_margin", "neg_q_entropy", "early_position", "overlap"]
BOOTSTRAP = 2000


@dataclass
class Judged:
    step: int  # which step (prompt and pass) the token was judged in: the bootstrap's unit
    accepted: bool
    values: dict[str, float]


@dataclass
class KindResult:
    kind: str
    judged: list[Judged] = field(default_factory=list)
    standin_seconds: list[float] = field(default_factory=list)
    steps: int = 0


def centred_log(probs: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        logs = np.log(np.asarray(probs, dtype=np.float64))
    return np.asarray(logs - logs.mean())


def logprob_cosine(draft_logprobs: np.ndarray, target_logits: np.ndarray) -> float:
    """The b70cf68 stand-in: cosine of the centred log-softmax rows over the shared width."""
    n = min(draft_logprobs.shape[-1], target_logits.shape[-1])
    row = np.asarray(target_logits[:n], dtype=np.float64)
    shifted = row - row.max()
    target_logprobs = shifted - np.log(np.exp(shifted).sum())
    return cosine(draft_logprobs[:n] - draft_logprobs[:n].mean(),
                  target_logprobs - target_logprobs.mean())


def head_state(weights: HeadsWeights, hidden: np.ndarray, head: int) -> np.ndarray:
    """Head `head`'s z for the target's hidden state, as HeadsWeights.logits computes it
    (checked against it where used)."""
    h = np.asarray(hidden, dtype=np.float32)
    a = weights.w1[head] @ h
    return np.asarray(h + weights.w2[head] @ (a / (1.0 + np.exp(-a))))


def top_two_margin(q: np.ndarray) -> float:
    second, first = np.partition(q, q.size - 2)[-2:]
    return float(first - second)


class Tap:
    """Reads each step's draft and verify pass where the session annotates the verdict."""

    def __init__(self, result: KindResult, params: SamplingParams) -> None:
        self.result = result
        self.params = params
        self.draft: Draft | None = None
        self.logits: np.ndarray | None = None
        self.target_hidden: np.ndarray | None = None
        self.heads: HeadsWeights | None = None
        self.fed_hidden: np.ndarray | None = None  # what the heads drafted from

    def wrap_accept(self, accept: Callable[..., None]) -> Callable[..., None]:
        def taped(context: list[int], hidden: np.ndarray | None) -> None:
            accept(context, hidden)
            if hidden is not None:
                self.fed_hidden = np.asarray(hidden, dtype=np.float32)
        return taped

    def wrap_propose(self, propose: Callable[..., Draft]) -> Callable[..., Draft]:
        def taped(*args: Any, **kwargs: Any) -> Draft:
            self.draft = propose(*args, **kwargs)
            return self.draft
        return taped

    def wrap_verify(self, verify_pass: Callable[..., Any]) -> Callable[..., Any]:
        def taped(*args: Any, **kwargs: Any) -> Any:
            logits, hidden = verify_pass(*args, **kwargs)
            self.logits, self.target_hidden = logits, hidden
            return logits, hidden
        return taped

    def wrap_annotate(self, annotate: Callable[..., None]) -> Callable[..., None]:
        def taped(records: list[TokenRecord], draft_hidden: Any, target_hidden: Any) -> None:
            annotate(records, draft_hidden, target_hidden)
            self.read(records)
        return taped

    def read(self, records: list[TokenRecord]) -> None:
        draft, logits = self.draft, self.logits
        assert draft is not None and logits is not None
        self.result.steps += 1
        vocab = logits.shape[-1]
        for i, record in enumerate(records):
            q = draft.q_row(i, vocab)
            p = process(logits[i], self.params)
            cos = record.hidden_cos
            if cos is None and self.heads is not None:
                cos = self.heads_cosine(i, record.token)
            elif cos is None and draft.q_rows is not None:
                start = time.perf_counter()
                cos = logprob_cosine(centred_log(draft.q_rows[i]), logits[i])
                self.result.standin_seconds.append(time.perf_counter() - start)
            values = {
                "q": record.q,
                "q_margin": top_two_margin(q),
                # the records' entropies are added after the step: computed here
                "neg_q_entropy": -entropy(q),
                "early_position": -float(i),
                "overlap": float(np.minimum(p, q).sum()),
            }
            if cos is not None:
                values["hidden_cos"] = cos
            self.result.judged.append(Judged(self.result.steps, bool(record.accepted), values))

    def heads_cosine(self, i: int, token: int) -> float:
        heads, fed, target_hidden = self.heads, self.fed_hidden, self.target_hidden
        assert heads is not None and fed is not None and target_hidden is not None
        z = head_state(heads, fed, i)
        assert np.allclose(heads.output_rows @ z, heads.logits(fed, i)[heads.vocab_ids],
                           atol=1e-3), "head_state no longer matches HeadsWeights.logits"
        return cosine(z, target_hidden[i])


@contextmanager
def tapped(tap: Tap) -> Iterator[None]:
    """The session's verify_pass and annotate, wrapped by the tap for the duration."""
    saved = {name: getattr(session_module, name) for name in ("verify_pass", "annotate")}
    wrapped = {"verify_pass": tap.wrap_verify(saved["verify_pass"]),
               "annotate": tap.wrap_annotate(saved["annotate"])}
    for name, function in wrapped.items():
        setattr(session_module, name, function)
    try:
        yield
    finally:
        for name, function in saved.items():
            setattr(session_module, name, function)


def measure(kind: str, spec: ModelSpec, prompts: list[str], config: DecodeConfig) -> KindResult:
    result = KindResult(kind)
    pair = load_pair(spec)
    try:
        for prompt in prompts:
            run = prepare_run(pair, config, prompt, chat=False)
            drafter = run.session.drafter
            assert drafter is not None
            tap = Tap(result, run.session.config.sampling)
            drafter.propose = tap.wrap_propose(drafter.propose)  # type: ignore[method-assign]
            if isinstance(drafter, HeadsDrafter):
                tap.heads = drafter.weights
                drafter.accept = tap.wrap_accept(drafter.accept)  # type: ignore[method-assign]
            with tapped(tap):
                for _ in run.session.steps(run.prompt_ids):
                    pass
            print(f"  {kind}: {prompt!r}: {len(result.judged)} judged so far",
                  file=sys.stderr, flush=True)
    finally:
        pair.close()
    return result


def bootstrap_interval(
    scores: np.ndarray, labels: np.ndarray, steps: np.ndarray, rng: np.random.Generator
) -> tuple[float, float] | None:
    """95% percentile interval of the AUC over resamples of whole steps."""
    ids = np.unique(steps)
    members = [np.flatnonzero(steps == s) for s in ids]
    aucs = []
    for _ in range(BOOTSTRAP):
        pick = np.concatenate([members[j] for j in rng.integers(0, ids.size, ids.size)])
        auc = roc_auc(scores[pick], labels[pick])
        if auc is not None:
            aucs.append(auc)
    if len(aucs) < BOOTSTRAP // 2:
        return None
    low, high = np.percentile(aucs, [2.5, 97.5])
    return float(low), float(high)


def figures(result: KindResult, seed: int = 0) -> dict[str, Any]:
    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {"kind": result.kind, "judged": len(result.judged),
                           "steps": result.steps,
                           "accepted": sum(j.accepted for j in result.judged)}
    if result.standin_seconds:
        out["standin_ms_per_token"] = 1000 * float(np.median(result.standin_seconds))
    for name in QUANTITIES:
        rows = [j for j in result.judged if name in j.values]
        scores = np.array([j.values[name] for j in rows])
        labels = np.array([j.accepted for j in rows], dtype=bool)
        steps = np.array([j.step for j in rows])
        delong = auc_interval(scores, labels) if rows else None
        boot = bootstrap_interval(scores, labels, steps, rng) if delong else None
        out[name] = None if delong is None else {
            "n": len(rows), "auc": delong[0], "delong": delong[1:], "bootstrap": boot}
    return out


def cell(entry: dict[str, Any] | None) -> str:
    if entry is None:
        return "—"
    low, high = entry["bootstrap"] or entry["delong"]
    chance = " (chance)" if low <= 0.5 <= high else ""
    return f"{entry['auc']:.2f} [{low:.2f}, {high:.2f}]{chance}"


def table(rows: list[dict[str, Any]]) -> str:
    head = ["kind", "judged", "accepted", *QUANTITIES]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows:
        cells = [row["kind"], str(row["judged"]), str(row["accepted"]),
                 *(cell(row[name]) for name in QUANTITIES)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-m", "--target", required=True)
    parser.add_argument("-md", "--draft", help="a separate draft model")
    parser.add_argument("--self-skip", default="", help="a self-draft's skipped layers")
    parser.add_argument("--draft-heads", default="")
    parser.add_argument("--prompts", type=int, default=8, help=f"1 to {len(PROMPTS)}")
    parser.add_argument("-n", "--n-predict", type=int, default=64)
    parser.add_argument("--draft-max", type=int, default=4)
    parser.add_argument("-c", "--ctx-size", type=int, default=1024)
    parser.add_argument("--json", help="write the figures here")
    args = parser.parse_args(argv)
    prompts = PROMPTS[: max(1, min(args.prompts, len(PROMPTS)))]
    config = DecodeConfig(n_predict=args.n_predict, draft_max=args.draft_max, adaptive=False,
                          sampling=SamplingParams(temperature=0.0))
    base = {"target": args.target, "n_ctx": args.ctx_size}
    kinds: list[tuple[str, ModelSpec, DrafterChoice]] = []
    if args.draft:
        kinds.append(("draft model", ModelSpec(**base, draft=args.draft),
                      DrafterChoice(("draft",))))
    if args.self_skip:
        kinds.append((f"self-draft (skips {args.self_skip})",
                      ModelSpec(**base, self_skips=(args.self_skip,)),
                      DrafterChoice(("self",), DrafterOptions(skip=args.self_skip))))
    if args.draft_heads:
        kinds.append(("draft heads", ModelSpec(**base),
                      DrafterChoice(("heads",), DrafterOptions(heads=args.draft_heads))))
    if not kinds:
        parser.error("give at least one of -md, --self-skip, --draft-heads")
    rows = [figures(measure(kind, spec, prompts, replace(config, drafter=choice)))
            for kind, spec, choice in kinds]
    print(table(rows))
    for row in rows:
        if "standin_ms_per_token" in row:
            print(f"{row['kind']}: the log-prob stand-in cost "
                  f"{row['standin_ms_per_token']:.2f} ms per judged token (median)")
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"settings": {**vars(args), "prompts": prompts}, "kinds": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
