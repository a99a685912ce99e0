"""What several test modules share: wrong acceptance rules that the exactness tests must
catch (each swaps a wrong rule into app.engine.acceptance, which the chain and the tree
verifier both call), and small builders and drivers (the command line, sessions, fake
wheels, the window).

A test module imports from here, never from another test module."""

from __future__ import annotations

import hashlib
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import app.engine.acceptance as acceptance
import app.engine.speculative as speculative
from app.analysis.divergence import MarginTap
from app.analysis.stats import g_test
from app.engine.adaptive import PassOutcome
from app.engine.cost_curve import VerifyCostCurve
from app.engine.decode_config import DecodeConfig
from app.engine.drafters import DraftKind
from app.engine.drafters.draft_model import DRAFT_MODEL, ModelDrafter
from app.engine.drafters.heads import HeadsWeights
from app.engine.records import (
    ORIGIN_ACCEPTED,
    ORIGIN_BONUS,
    ORIGIN_PLAIN,
    ORIGIN_REPLACEMENT,
    StepRecord,
    TokenRecord,
)
from app.engine.sampling import SamplingParams, process
from app.engine.session import Session
from app.models.demo import DemoFile
from app.settings import RecentPair


def resample_from_p(monkeypatch):
    """Bug: after a rejection, draw from p instead of the residual norm(max(0, p - q))."""
    monkeypatch.setattr(acceptance, "residual_distribution", lambda p, q: p)
    return speculative.verify


def always_accept(monkeypatch):
    """Bug: a sampled draft token is always accepted (the u draw is made, then ignored);
    greedy decisions stay right, so only the sampled tests can see it."""
    right = acceptance.judge

    def wrong(token, p, q, params, rng):
        if params.greedy:
            return right(token, p, q, params, rng)
        return acceptance.Judgement(True, float(rng.random()))

    monkeypatch.setattr(acceptance, "judge", wrong)
    return speculative.verify


def greedy_accepts_everything(monkeypatch):
    """Bug: a greedy draft token is accepted whatever the target's argmax."""
    right = acceptance.judge

    def wrong(token, p, q, params, rng):
        if params.greedy:
            return acceptance.Judgement(True, None)
        return right(token, p, q, params, rng)

    monkeypatch.setattr(acceptance, "judge", wrong)
    return speculative.verify


def token(pos: int, accepted: bool) -> TokenRecord:
    return TokenRecord(pos=pos, token=5, text="x", q=0.5, p=0.4, u=0.3, accepted=accepted,
                       replacement=None if accepted else 6)


def pass_outcome(kind: DraftKind | None, k: int, verdicts: list[bool], t_draft=0.0,
                 t_verify=0.1) -> PassOutcome:
    """What the controller learns from a hand-made chain pass that drafted k tokens of `kind`
    (k = 0: a plain step): the judged prefix of `verdicts` (up to the first rejection)."""
    if k == 0:
        return PassOutcome(None, pass_tokens=1, t_verify=t_verify)
    judged = verdicts[: verdicts.index(False) + 1] if False in verdicts else verdicts
    return PassOutcome(kind, judged, pass_tokens=k + 1, draft_depth=k,
                       t_draft=t_draft, t_verify=t_verify)


def step(index: int, k: int, verdicts: list[bool], t_draft=0.0, t_verify=0.1,
         source: str = DRAFT_MODEL.name) -> StepRecord:
    """A hand-made chain step: the judged prefix of `verdicts` (up to the first rejection),
    consulting the `source` kind of draft."""
    judged = verdicts[: verdicts.index(False) + 1] if False in verdicts else verdicts
    tokens = [token(i, ok) for i, ok in enumerate(judged)]
    n_acc = sum(judged)
    if k == 0:
        origins = [ORIGIN_PLAIN]
    elif n_acc == len(judged) == k:
        origins = [ORIGIN_ACCEPTED] * n_acc + [ORIGIN_BONUS]
    else:
        origins = [ORIGIN_ACCEPTED] * n_acc + [ORIGIN_REPLACEMENT]
    return StepRecord(index=index, k=k, tokens=tokens, emitted=[7] * len(origins),
                      emitted_text=["y"] * len(origins), origins=origins, t_draft=t_draft,
                      t_verify=t_verify, t_overhead=0.01, source=source)


def assert_drafted(steps: Iterable[StepRecord], accepted: bool = True) -> None:
    """The run under test really speculated: some pass verified draft tokens and (unless
    `accepted` is False, for a draft built to be poor) the target accepted some of them.
    A greedy-equality check over a run that never drafted would pass whatever the verifier
    did; one whose drafts were all rejected tests only the rejection path."""
    steps = list(steps)
    assert any(s.k > 0 for s in steps), "no step drafted: the equality tested plain decoding"
    assert any(t.accepted is not None for s in steps for t in s.tokens), "nothing was judged"
    if accepted:
        assert any(t.accepted for s in steps for t in s.tokens), "no draft token was accepted"


# --- exactness statistics -------------------------------------------------------------

EXACT_P = 1e-3  # a correct sampler passes every test at this level (fixed seeds)
BROKEN_P = 1e-6  # a broken sampler must be rejected at least this strongly
PROMPT = "def add(a, b):\n    return"


@dataclass
class Exact:
    first: np.ndarray  # target's processed distribution of the first generated token
    second: np.ndarray  # marginal of the second: sum_x p(x) p(. | prompt + x)


def exact_distributions(target, prompt_ids: list[int], params: SamplingParams) -> Exact:
    target.truncate(0)
    first = process(target.extend(prompt_ids, 1)[0], params)
    second = np.zeros_like(first)
    for token in np.flatnonzero(first):
        second += first[token] * process(target.extend([int(token)], 1)[0], params)
        target.truncate(len(prompt_ids))
    target.truncate(0)
    return Exact(first, second)


def first_two_pvalues(target, drafter, params, n, seed0) -> tuple[float, float]:
    """G-test p-values of the first and the second token of n sessions on PROMPT against
    the target's exact distributions."""
    prompt_ids = target.tokenize(PROMPT)
    exact = exact_distributions(target, prompt_ids, params)
    tokens = first_two_tokens(target, drafter, prompt_ids, params, n, seed0)
    return g_test(tokens[:, 0], exact.first).p_value, g_test(tokens[:, 1], exact.second).p_value


def first_two_tokens(target, drafter, prompt_ids, params, n, seed0, draft_max=3, curve=None):
    """The first two generated tokens of n independent sessions (seeds seed0, seed0+1, ...);
    `curve`: a function that gives each session its verify-cost curve."""
    out = np.empty((n, 2), dtype=np.int64)
    for i in range(n):
        config = DecodeConfig(
            n_predict=4, draft_max=draft_max, stop_at_eos=False,
            sampling=SamplingParams(
                temperature=params.temperature, top_k=params.top_k, top_p=params.top_p,
                seed=seed0 + i,
            ),
        )
        session = Session(target, drafter, config, cost_curve=curve() if curve else None)
        for _ in session.steps(prompt_ids):
            if len(session.output_ids) >= 2:
                break
        out[i] = session.output_ids[:2]
    return out


def random_heads(target, n_heads=3, rank=8, seed=0):
    """Heads with random weights over the whole vocabulary: they draft real (mostly rejected)
    tokens from the target's hidden states, with a q of their own."""
    rng = np.random.default_rng(seed)
    d, v = target.n_embd, target.n_vocab
    return HeadsWeights(
        (rng.standard_normal((n_heads, rank, d)) / np.sqrt(d)).astype(np.float32),
        (rng.standard_normal((n_heads, d, rank)) / np.sqrt(rank)).astype(np.float32),
        np.arange(v), (rng.standard_normal((v, d)) / np.sqrt(d)).astype(np.float32), v)


def unrenormalised_tli(monkeypatch):
    """Bug: a TLI draft keeps the draft's mass on the shared tokens without renormalising
    it there (the draw renormalises silently, the reported q does not), so q understates what
    each token was drawn from and too many drafts pass."""
    import app.engine.drafters.draft_model.vocab_bridge as vocab_bridge

    def wrong(q_draft, bridge):
        shared = np.asarray(q_draft[bridge.draft_ids], dtype=np.float64)
        return shared, max(0.0, 1.0 - float(shared.sum()))

    monkeypatch.setattr(vocab_bridge, "restrict", wrong)


# --- the command line, runs and verifiers -----------------------------------------------


def run_cli(capsys, *argv):
    from app.cli.main import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def lines_written(trace: Path) -> int:
    """The lines a running CLI has written to its trace so far. Before the run starts, the
    CLI checks that it can write the trace by creating the file and removing it again
    (app.cli.commands.ensure_writable), so a poll can find it there and then gone."""
    try:
        return trace.read_text().count("\n")
    except FileNotFoundError:
        return 0


class SwappingVerifier(MarginTap):
    """A wrong verify pass: in passes that return several rows, each row's two best logits
    trade places, so greedy verification prefers the runner-up at a wide margin."""

    def extend(self, ids, n_logits):
        end = self.model.n_cached + len(ids)
        logits = self._swapped(self.model.extend(ids, n_logits))
        self._note(end, logits)
        return logits

    def extend_hidden(self, ids, n_logits):
        end = self.model.n_cached + len(ids)
        logits, hidden = self.model.extend_hidden(ids, n_logits)
        logits = self._swapped(logits)
        self._note(end, logits)
        return logits, hidden

    @staticmethod
    def _swapped(logits):
        logits = logits.copy()
        if logits.shape[0] > 1:
            for row in logits:
                a, b = np.argsort(row)[-2:][::-1]
                row[a], row[b] = row[b], row[a]
        return logits


def greedy_runs(target, draft, tap_class, prompt_text="the cat sat on the mat. the cat"):
    prompt = target.tokenize(prompt_text)
    runs = []
    for drafter in (None, ModelDrafter(draft)):
        tap = tap_class(target)
        session = Session(tap, drafter, DecodeConfig(n_predict=40, draft_max=4,
                                                     sampling=SamplingParams()))
        list(session.steps(prompt))
        runs.append((session.output_ids, tap.top))
    (plain, plain_top), (spec, spec_top) = runs
    return prompt, plain, plain_top, spec, spec_top


def adaptive_session(target, draft, n_predict: int = 40) -> Session:
    """Adaptive greedy decoding where drafting pays (a nearly free draft, a flat verify
    curve), so only the confidence of this random-weight draft ends drafts short of 8."""
    curve = VerifyCostCurve(points={1: 0.01, 9: 0.01})
    config = DecodeConfig(n_predict=n_predict, draft_max=8, adaptive=True,
                          sampling=SamplingParams(temperature=0.0))
    session = Session(target, ModelDrafter(draft), config, cost_curve=curve)
    session.controller.known_draft_cost = 1e-4
    session.controller.fixed_prices = True  # these prices, whatever the passes take here
    return session


# --- model files and the local hub -------------------------------------------------------

HUB_REPO = "tiny/Tiny-GGUF"  # the repo the local hub (the `hub` fixture) serves
WHEEL_MEMBER = "fake_demo_part{n}/data/part{n:02d}.bin"


def wheel_name(n: int) -> str:
    return f"fake_demo_part{n}-0.1.0-py3-none-any.whl"


def make_wheels(folder: Path, n_parts: int = 3, part_size: int = 150_000) -> DemoFile:
    """Write fake wheels into `folder`; returns the DemoFile that describes their assembly."""
    folder.mkdir(parents=True, exist_ok=True)
    pieces = [hashlib.sha256(bytes([n])).digest() * (part_size // 32) for n in range(n_parts)]
    for n, piece in enumerate(pieces, start=1):
        with zipfile.ZipFile(folder / wheel_name(n), "w") as zf:
            zf.writestr(WHEEL_MEMBER.format(n=n), piece)
            zf.writestr(f"fake_demo_part{n}-0.1.0.dist-info/METADATA", f"Name: fake-demo-part{n}\n")
    whole = b"".join(pieces)
    return DemoFile(
        filename="fake-model.gguf",
        packages=tuple(f"fake-demo-part{n}==0.1.0" for n in range(1, n_parts + 1)),
        member=WHEEL_MEMBER,
        size=len(whole),
        sha256=hashlib.sha256(whole).hexdigest(),
    )


# --- the window (tests that drive it take the `window` and `dialogs` fixtures) -----------

RUN_TIMEOUT_MS = 60_000


def choose_pair(window, qtbot, target, draft="", backend="torch"):
    window.picker.set_pair(RecentPair(str(target), str(draft), backend=backend, device="cpu"))
    qtbot.waitUntil(lambda: not window.picker.checking, timeout=30_000)


def set_decoding(window, *, tokens=24, k=4, compare=False, prompt=PROMPT, adaptive=False):
    """Fixed k unless asked (new windows default to adaptive k, which may pick plain steps)."""
    panel = window.decode
    panel.adaptive.setChecked(adaptive)
    panel.prompt.setPlainText(prompt)
    panel.max_new.setValue(tokens)
    panel.draft_max.setValue(k)
    panel.temperature.setValue(0.0)
    panel.compare.setChecked(compare)


def run(window, qtbot, step_mode=False):
    with qtbot.waitSignal(window.run_done, timeout=RUN_TIMEOUT_MS):
        window.start_run(step_mode=step_mode)
    window.flush()


def cut_off(root, window) -> list[str]:
    """Widgets narrower (or lower) than their text needs: buttons, check boxes, unwrapped
    labels and spin boxes against their size hint; combo boxes and line edits against their
    minimum (their text may scroll or be cut at a set length)."""
    from PySide6.QtCore import QSize
    from PySide6.QtWidgets import (
        QAbstractButton,
        QAbstractSpinBox,
        QComboBox,
        QLabel,
        QLineEdit,
        QWidget,
    )

    found = []
    for w in root.findChildren(QWidget):
        if not w.isVisibleTo(window) or isinstance(w.parent(), (QLineEdit, QAbstractSpinBox)):
            continue  # a line edit's clear button, a spin box's own line edit
        if isinstance(w, QLabel) and w.wordWrap():
            hint = QSize(0, w.heightForWidth(w.width()))
        elif isinstance(w, (QAbstractButton, QLabel, QAbstractSpinBox)):
            hint = w.sizeHint()
        elif isinstance(w, (QComboBox, QLineEdit)):
            hint = w.minimumSizeHint()
        else:
            continue
        if hint.width() > w.width() or hint.height() > w.height() + 1:
            text = w.text() if hasattr(w, "text") and callable(w.text) else ""
            found.append(f"{type(w).__name__} {text[:40]!r}: needs {hint.width()}x"
                         f"{hint.height()}, has {w.width()}x{w.height()}")
    return found
