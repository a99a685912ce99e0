"""The JSONL trace round trip, the CSV export, the run statistics and the theory formulas,
and the adaptive draft-length controller's decisions."""

from __future__ import annotations

import csv
import json
from dataclasses import asdict

import numpy as np
import pytest

from app.engine.adaptive import DraftLengthController
from app.engine.cost_curve import STALL_FACTOR, VerifyCostCurve
from app.engine.decode_config import DecodeConfig
from app.engine.drafters import DraftKind
from app.engine.drafters.draft_model import DRAFT_MODEL, ModelDrafter
from app.engine.metrics import RunStats, expected_tokens_per_pass, predicted_speedup, theory_speedup
from app.engine.records import (
    StepRecord,
)
from app.engine.sampling import SamplingParams
from app.engine.session import Session
from app.engine.trace import TraceHeader, TraceWriter, export_csv, read_trace
from app.errors import DraftLensError
from tests.helpers import pass_outcome, step

PROMPT = "def add(a, b):\n    return"
STEP_KEYS = {"type", "k", "tokens", "emitted", "t_draft", "t_verify", "t_overhead"}
TOKEN_KEYS = {"pos", "token", "text", "q", "p", "u", "accepted", "replacement", "top"}


# --- a real run, written and read back ---------------------------------------------------


def real_run(hf_pair, temperature: float) -> tuple[Session, list[StepRecord], TraceHeader]:
    target, draft = hf_pair
    config = DecodeConfig(n_predict=30, draft_max=4, stop_at_eos=False,
                          sampling=SamplingParams(temperature=temperature, seed=2))
    session = Session(target, ModelDrafter(draft), config)
    prompt_ids = target.tokenize(PROMPT)
    steps = list(session.steps(prompt_ids))
    header = TraceHeader(
        target=target.name, draft=draft.name, backend=target.backend, device=target.device,
        # as JSON has them (the drafter's names come back as a list)
        settings=json.loads(json.dumps(asdict(config))), versions={"draftlens": "test"},
        prompt=PROMPT,
        prompt_tokens=len(prompt_ids),
    )
    return session, steps, header


def write_trace(path, header, steps, summary) -> None:
    with TraceWriter(path) as writer:
        writer.header(header)
        for step in steps:
            writer.step(step)
        writer.summary(summary)


@pytest.fixture(scope="module")
def sampled_run(hf_pair):
    return real_run(hf_pair, 1.0)


@pytest.fixture(scope="module")
def greedy_run(hf_pair):
    return real_run(hf_pair, 0.0)


@pytest.mark.parametrize("run", ["sampled_run", "greedy_run"])
def test_trace_round_trip_keeps_header_steps_and_summary(run, request, tmp_path):
    session, steps, header = request.getfixturevalue(run)
    path = tmp_path / "run.jsonl"
    summary = session.stats.summary()
    write_trace(path, header, steps, summary)
    trace = read_trace(path)
    assert trace.header == header
    assert trace.steps == steps
    assert trace.summary == json.loads(json.dumps(summary))
    assert any(s.k > 0 for s in trace.steps)


@pytest.mark.parametrize("run", ["sampled_run", "greedy_run"])
def test_trace_file_format(run, request, tmp_path):
    session, steps, header = request.getfixturevalue(run)
    greedy = run == "greedy_run"
    path = tmp_path / "run.jsonl"
    write_trace(path, header, steps, session.stats.summary())
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert lines[0]["type"] == "header" and "version" in lines[0]
    assert lines[0]["target"] == header.target and lines[0]["settings"]["draft_max"] == 4
    assert lines[-1]["type"] == "summary"
    assert lines[-1]["emitted"] == len(session.output_ids)
    step_lines = lines[1:-1]
    assert len(step_lines) == len(steps)
    judged = 0
    for line, record in zip(step_lines, steps, strict=True):
        assert line["type"] == "step"
        assert STEP_KEYS <= set(line)
        assert line["emitted"] == record.emitted and line["k"] == record.k
        for token in line["tokens"]:
            judged += 1
            assert TOKEN_KEYS <= set(token)
            assert isinstance(token["accepted"], bool)
            assert (token["u"] is None) == greedy
            assert (token["replacement"] is None) == token["accepted"]
            assert 0 <= token["p"] <= 1 and 0 <= token["q"] <= 1
            assert token["top"] and {"token", "text", "p", "q"} <= set(token["top"][0])
    assert judged > 0


def test_truncated_last_line_is_skipped(sampled_run, tmp_path):
    session, steps, header = sampled_run
    path = tmp_path / "crash.jsonl"
    with TraceWriter(path) as writer:  # a crash: no summary, last step half written
        writer.header(header)
        for step in steps:
            writer.step(step)
    text = path.read_text(encoding="utf-8")
    path.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1], encoding="utf-8")
    trace = read_trace(path)
    assert trace.header == header
    assert trace.steps == steps[:-1]
    assert trace.summary is None


def test_truncated_summary_line_is_skipped(sampled_run, tmp_path):
    session, steps, header = sampled_run
    path = tmp_path / "cut.jsonl"
    write_trace(path, header, steps, session.stats.summary())
    text = path.read_text(encoding="utf-8")
    path.write_text(text[:-20], encoding="utf-8")
    trace = read_trace(path)
    assert trace.steps == steps and trace.summary is None


NOT_TRACES = {
    "text": b"just some notes\nabout a model\nnothing more\n",
    "csv": b"step,k,pos\n0,4,0\n",
    "empty": b"",
    "json_object": b'{"name": "config", "value": 3}\n',
    "binary": b"GGUF\x03\x00\x00\x00\xff\xfe\x00\x01\x80\x81\n\x00\x00",
    "json_array": b"[1, 2, 3]\n[4, 5, 6]\n",
    "json_numbers": b"1\n2\n3\n",
    "step_without_fields": b'{"type": "step", "k": 2}\n{"type": "step", "k": 1}\n',
}


@pytest.mark.parametrize("name", list(NOT_TRACES))
def test_non_trace_file_gives_draftlens_error(name, tmp_path):
    path = tmp_path / f"{name}.jsonl"
    path.write_bytes(NOT_TRACES[name])
    with pytest.raises(DraftLensError):
        read_trace(path)


def test_missing_trace_gives_draftlens_error(tmp_path):
    with pytest.raises(DraftLensError):
        read_trace(tmp_path / "nope.jsonl")


def test_unwritable_trace_path_gives_draftlens_error(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(DraftLensError):
        TraceWriter(blocker / "sub" / "trace.jsonl")


def test_export_csv_has_one_row_per_judged_draft_token(sampled_run, tmp_path):
    _, steps, _ = sampled_run
    path = tmp_path / "tokens.csv"
    export_csv(steps, path)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    records = [(s, t) for s in steps for t in s.tokens]
    assert len(rows) == len(records) > 0
    for row, (record, token) in zip(rows, records, strict=True):
        assert int(row["step"]) == record.index and int(row["k"]) == record.k
        assert int(row["pos"]) == token.pos and int(row["token"]) == token.token
        assert int(row["accepted"]) == int(token.accepted)
        assert float(row["p"]) == pytest.approx(token.p)
        assert float(row["q"]) == pytest.approx(token.q)
        assert float(row["u"]) == pytest.approx(token.u)
        assert (row["replacement"] == "") == token.accepted
    assert not (tmp_path / "tokens.csv.tmp").exists()


def test_export_csv_of_greedy_run_leaves_u_empty(greedy_run, tmp_path):
    _, steps, _ = greedy_run
    path = tmp_path / "greedy.csv"
    export_csv(steps, path)
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert rows and all(row["u"] == "" for row in rows)


# --- metrics formulas --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("alpha", "k", "expected"),
    [
        (0.5, 1, 1.5),
        (0.5, 3, 1.875),  # 1 + .5 + .25 + .125
        (0.8, 4, (1 - 0.8**5) / 0.2),
        (0.0, 5, 1.0),
        (1.0, 4, 5.0),
        (1.0, 0, 1.0),
        (0.7, 0, 1.0),
    ],
)
def test_expected_tokens_per_pass(alpha, k, expected):
    assert expected_tokens_per_pass(alpha, k) == pytest.approx(expected)


def test_expected_tokens_per_pass_is_continuous_at_alpha_one():
    assert expected_tokens_per_pass(1 - 1e-9, 6) == pytest.approx(7.0, rel=1e-6)


def test_theory_speedup():
    assert theory_speedup(0.8, 4, 0.05) == pytest.approx(((1 - 0.8**5) / 0.2) / 1.2)
    assert theory_speedup(1.0, 3, 0.0) == pytest.approx(4.0)
    assert theory_speedup(0.5, 0, 0.6) == pytest.approx(1.0)


def test_predicted_speedup_uses_measured_verify_cost():
    # E(0.5, 2) = 1.75; pass costs 2 * 0.01 + 0.12 for a 0.1 s target step
    assert predicted_speedup(0.5, 2, 0.1, 0.01, 0.12) == pytest.approx(1.75 * 0.1 / 0.14)
    # a verify pass as cheap as one step and free drafts: speedup is E itself
    assert predicted_speedup(0.5, 2, 0.1, 0.0, 0.1) == pytest.approx(1.75)
    assert predicted_speedup(0.5, 2, 0.1, 0.0, 0.0) == 0.0


@pytest.fixture
def hand_stats() -> RunStats:
    stats = RunStats()
    stats.add(step(0, 3, [True, True, False], t_draft=0.03, t_verify=0.2))  # 2 accepted, 3 out
    stats.add(step(1, 3, [False], t_draft=0.03, t_verify=0.2))  # 0 accepted, 1 out
    stats.add(step(2, 3, [True, True, True], t_draft=0.03, t_verify=0.2))  # 3 + bonus, 4 out
    stats.add(step(3, 0, [], t_verify=0.1))  # plain step, 1 out
    return stats


def test_run_stats_counts(hand_stats):
    s = hand_stats
    assert (s.steps, s.spec_steps, s.plain_steps) == (4, 3, 1)
    assert s.emitted == 9
    assert (s.drafted, s.judged, s.accepted) == (9, 7, 5)
    assert s.tokens_per_pass == pytest.approx(9 / 4)
    assert s.mean_k == pytest.approx(3.0)
    assert s.draft_time_per_token == pytest.approx(0.09 / 9)


def test_acceptance_is_per_drafted_token_and_alpha_per_judged_token(hand_stats):
    assert hand_stats.acceptance == pytest.approx(5 / 9)
    assert hand_stats.alpha == pytest.approx(5 / 7)


def test_acceptance_by_position_counts_only_positions_reached(hand_stats):
    # position 0 judged 3 times (accepted twice), 1 judged twice (both), 2 twice (once)
    assert hand_stats.acceptance_by_position == pytest.approx([2 / 3, 1.0, 0.5])


def test_accepted_length_histogram(hand_stats):
    assert dict(hand_stats.accepted_length) == {2: 1, 0: 1, 3: 1}
    summary = hand_stats.summary()
    assert summary["accepted_length_histogram"] == {"0": 1, "2": 1, "3": 1}


def test_summary_theory_uses_plain_steps_as_target_cost(hand_stats):
    summary = hand_stats.summary()
    alpha, k = 5 / 7, 3.0
    assert summary["t_target"] == pytest.approx(0.1)
    assert summary["cost_ratio"] == pytest.approx((0.09 / 9) / 0.1)
    assert summary["expected_tokens_per_pass"] == pytest.approx(
        expected_tokens_per_pass(alpha, k))
    assert summary["theory_speedup"] == pytest.approx(theory_speedup(alpha, k, 0.1))
    assert summary["predicted_speedup"] == pytest.approx(
        predicted_speedup(alpha, k, 0.1, 0.01, 0.2))
    json.dumps(summary)  # it goes into the trace


def test_empty_stats_do_not_divide_by_zero():
    stats = RunStats()
    assert stats.acceptance == stats.alpha == stats.tokens_per_second == 0.0
    assert stats.acceptance_by_position == []
    assert "theory_speedup" not in stats.summary()


def test_stats_of_a_real_run_match_its_records(sampled_run):
    session, steps, _ = sampled_run
    stats = session.stats
    assert stats.emitted == len(session.output_ids) == sum(len(s.emitted) for s in steps)
    assert stats.accepted == sum(t.accepted for s in steps for t in s.tokens)
    assert stats.judged == sum(len(s.tokens) for s in steps)
    assert 0 < stats.alpha < 1  # a sampled run with a noisy draft both accepts and rejects


# --- adaptive draft length -----------------------------------------------------------------


def test_verify_cost_curve_interpolates_and_extrapolates():
    curve = VerifyCostCurve({1: 1.0, 5: 3.0})
    assert curve.cost(1) == 1.0 and curve.cost(5) == 3.0
    assert curve.cost(3) == pytest.approx(2.0)
    assert curve.cost(7) == pytest.approx(4.0)  # the last slope carries on


def test_verify_cost_curve_without_points_assumes_linear_cost():
    assert VerifyCostCurve().cost(4) == 4.0


def test_a_size_is_priced_only_from_the_median_of_several_kept_passes():
    curve = VerifyCostCurve()
    assert curve.observe(2, 9.0) == "warm-up"  # a size's first pass grows buffers: dropped
    assert curve.observe(2, 1.0) == "kept" and not curve.can_price(2)  # one sample: no price
    curve.observe(2, 2.0)
    assert not curve.can_price(2)
    curve.observe(2, 1.5)
    assert curve.can_price(2) and curve.cost(2) == 1.5  # the median of three
    assert curve.observe(2, 1.5 * STALL_FACTOR + 0.1) == "stalled" and curve.refused == 1
    assert curve.cost(2) == 1.5 and not curve.can_price(3)  # nothing past what was timed


def believing(accept: float) -> DraftKind:
    """A draft model's kind whose estimate, before any pass, is `accept` at every position."""
    return DraftKind("model", free=False, prior=accept, confident=True)


def controller(draft_cost: float, costs: dict[int, float], draft_max: int = 8):
    return DraftLengthController(draft_max, adaptive=True, curve=VerifyCostCurve(dict(costs)),
                                 draft_cost=draft_cost)


def random_curve(rng: np.random.Generator, sizes: int = 9) -> dict[int, float]:
    """A verify curve that may rise steeply or stay flat, with noise and block effects
    (a longer pass may cost less than a shorter one)."""
    slope = rng.uniform(0.0, 1.0)
    return {n: max(0.05, 1.0 + slope * (n - 1) + rng.normal(0, 0.05 * n))
            for n in range(1, sizes + 1)}


def test_controller_best_k_maximises_expected_tokens_per_second():
    ctl = controller(0.1, {n: 1.0 + 0.1 * (n - 1) for n in range(1, 10)})
    kind = believing(0.7)
    rates = [expected_tokens_per_pass(0.7, k) / (0.1 * k + 1.0 + 0.1 * k) for k in range(9)]
    assert ctl.best_k(kind) == int(np.argmax(rates)) > 0
    assert ctl.rates(kind) == pytest.approx(rates)


@pytest.mark.parametrize("seed", range(12))
def test_k_is_zero_whenever_even_95_percent_acceptance_would_lose(seed):
    rng = np.random.default_rng(seed)
    ctl = controller(rng.uniform(0.0, 1.5), random_curve(rng))
    kind = believing(rng.uniform(0.0, 0.95))
    optimistic = controller(ctl.known_draft_cost or 0.0, ctl.curve.points).rates(believing(0.95))
    choices = [ctl.decide(100, kind).k for _ in range(300)]
    if optimistic.max() <= optimistic[0]:
        assert choices == [0] * 300  # not even a probe
    else:
        assert any(choices)  # a probe, at least: an estimate that is wrong can recover


@pytest.mark.parametrize("seed", range(12))
def test_k_never_exceeds_the_tokens_left(seed):
    rng = np.random.default_rng(seed)
    for adaptive in (False, True):
        ctl = DraftLengthController(16, adaptive, VerifyCostCurve(random_curve(rng, 17)),
                                    draft_cost=rng.uniform(0, 0.3))
        kind = believing(rng.uniform(0.5, 1.0))
        for remaining in range(1, 20):
            assert ctl.decide(remaining, kind).k <= remaining - 1


@pytest.mark.parametrize("seed", range(12))
def test_k_grows_weakly_with_acceptance(seed):
    rng = np.random.default_rng(seed)
    ctl = controller(rng.uniform(0.0, 0.5), random_curve(rng))
    ks = [ctl.best_k(believing(a)) for a in np.linspace(0.0, 1.0, 41)]
    assert ks == sorted(ks), ks
    assert ks[-1] > 0 or ctl.could_pay(believing(1.0)) == 0  # some curves never let it draft


@pytest.mark.parametrize("seed", range(6))
def test_a_drafter_as_costly_as_a_target_step_never_drafts(seed):
    # each drafted token costs a plain step, and verifying never costs less than one: no
    # acceptance can make drafting pay, so neither a guess nor a probe drafts
    rng = np.random.default_rng(seed)
    curve = {n: 1.0 + rng.uniform(0, 0.2) * (n - 1) for n in range(1, 10)}
    ctl = controller(1.0, curve)
    assert all(ctl.decide(100, believing(a)).k == 0 for a in rng.uniform(0.5, 1.0, 200))


def test_controller_picks_long_drafts_when_verify_is_flat_and_acceptance_high():
    flat = {n: 1.0 + 0.01 * (n - 1) for n in range(1, 10)}
    ctl = controller(0.02, flat)
    assert ctl.decide(100, believing(0.95)).k >= 6


def test_fixed_k_controller_ignores_costs():
    ctl = DraftLengthController(5, adaptive=False, curve=VerifyCostCurve({1: 1.0, 6: 100.0}),
                                draft_cost=10.0)
    assert ctl.decide(100, DRAFT_MODEL).k == 5
    assert ctl.decide(3, DRAFT_MODEL).k == 2
    assert ctl.decide(1, DRAFT_MODEL).k == 0


def test_controller_probes_again_when_a_better_acceptance_could_pay():
    gentle = {n: 1.0 + 0.1 * (n - 1) for n in range(1, 10)}
    ctl = controller(0.1, gentle)  # acceptance looks hopeless, costs do not
    choices = [ctl.decide(100, believing(0.05)).k for _ in range(40)]
    assert choices[0] == 0
    assert any(k > 0 for k in choices), "a wrong estimate must be able to recover"
    assert sum(k > 0 for k in choices) <= 5  # but rarely


def test_controller_learns_acceptance_from_observed_steps():
    ctl = DraftLengthController(4, adaptive=True, draft_cost=0.01)
    ctl.decide(100, DRAFT_MODEL)
    before = list(ctl.estimate(DRAFT_MODEL).accept_at)
    for _i in range(30):
        ctl.observe(pass_outcome(DRAFT_MODEL, 4, [False], t_draft=0.04, t_verify=0.2))
    after = ctl.estimate(DRAFT_MODEL).accept_at
    assert after[0] < before[0] * 0.1  # always rejected at position 0
    # positions never reached follow the pooled rate, which the rejections pulled down
    assert all(a < b for a, b in zip(after[1:], before[1:], strict=True))
    for _i in range(30):
        ctl.observe(pass_outcome(DRAFT_MODEL, 4, [True] * 4, t_draft=0.04, t_verify=0.2))
    assert all(a > 0.9 for a in ctl.estimate(DRAFT_MODEL).accept_at)
