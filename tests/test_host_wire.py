"""The engine host's objects cross as JSON (app.host.wire), never as pickles: each object the
protocol carries survives the trip, anything else is refused with a clear message, the host
runs jobs by name only, and a line printed on the host's stdout can name data, never code
(issue #39)."""

from __future__ import annotations

import base64
import json
import os
import pickle
from collections import deque

import numpy as np
import pytest

from app.analysis.divergence import Divergence
from app.analysis.exact_report import ExactReport, GreedySuite
from app.analysis.rank import (
    DraftModelCandidate,
    LoadedCandidate,
    NgramCandidate,
    RankRow,
    SelfDraftCandidate,
)
from app.analysis.sweep import SweepRow
from app.engine.decode_config import (
    DecodeConfig,
    DrafterChoice,
    DrafterOptions,
    SuffixOptions,
    choice_to_dict,
)
from app.engine.sampling import SamplingParams
from app.host import protocol, wire
from app.host.client import EngineHost
from app.models.loading import ModelSpec


def trip(value, expect=object):
    """Out through the codec, over a JSON line, and back."""
    return wire.decode(json.loads(json.dumps(wire.encode(value))), expect)


# --- each object the protocol carries -----------------------------------------------------


def test_sweep_and_rank_rows_survive():
    sweep = [SweepRow(k, np.float64(1.2), 1.1, 1.15, 1.3, 0.7, 0.75, np.float64(2.1), 30.0,
                      36.0, 0.12, identical)
             for k, identical in [(1, True), (2, None), (4, False)]]
    rank = [RankRow("draft.gguf", "draft model", 40.0, 30.0, np.float64(1.33), 0.8, 0.82, 0.1,
                    np.int64(3), 1.4),
            RankRow("n-gram", "lookup", error="no draft found")]
    assert trip(sweep, list) == sweep
    assert trip(rank, list) == rank
    assert type(trip(rank)[0].best_k) is int


def suite(mode: str, identical: bool) -> GreedySuite:
    divergence = Divergence(3, 17, 42, " cat", " dog", np.float64(0.001), np.float32(0.0),
                            None, 2.5e-4, True, gap_moved=np.float64(0.001),
                            noise_bound=0.002, reason="within the kernel noise")
    return GreedySuite(mode, identical, 6,
                       divergences=[] if identical else [{"prompt": 2, **divergence.as_dict()}],
                       noise_bound=np.float64(0.002), drafted=48, accepted=np.int64(31),
                       settings={"your settings": [30, 20], "tree width 2": [18, 11]},
                       noise_ceiling=0.01, batched_what="a tree of width 2",
                       batched_bound=None, batched_ceiling=0.01)


@pytest.mark.parametrize("exact", [True, False], ids=["exact-kernels", "no-exact-mode"])
def test_an_exactness_report_survives_with_its_suites(exact):
    report = ExactReport(suite("default kernels", False),
                         suite("batch-invariant kernels", True) if exact else None,
                         p_value=np.float64(0.41), p_first=0.52, p_second=np.float64(0.33),
                         samples=400, temperature=0.8, top_k=20, draft_max=4,
                         notes=["the sampled prompt drafts little"],
                         sampled_modes=[np.float64(0.91), 0.45], sampled_prompt="the cat",
                         sampled_drafted=np.int64(120), sampled_accepted=70)
    back = trip(report, ExactReport)
    assert back == report
    assert back.verdict() == report.verdict() and back.failures() == report.failures()
    assert type(back.greedy.divergences[0]["plain_logit_gap"]) is float


def test_the_job_settings_survive():
    drafter = DrafterChoice(("ngram", "suffix"), DrafterOptions(
        cross_vocab="tli", suffix=SuffixOptions(factor=2.0, max_depth=32)))
    config = DecodeConfig(n_predict=64, draft_max=5, adaptive=True,
                          sampling=SamplingParams(temperature=0.7, top_k=40, seed=3),
                          drafter=drafter)
    sweep = {"config": config, "prompt": "def add(a, b):", "chat": False, "ks": [1, 2, 4]}
    assert trip(sweep) == sweep
    assert type(trip(sweep)["config"].drafter.names) is tuple

    exactness = {"samples": 200, "choice": DrafterChoice(("self",), DrafterOptions(skip="2-3",
                                                                             skip_cost=0.5))}
    assert trip(exactness) == exactness

    candidates = [LoadedCandidate("draft.gguf (loaded)", drafter),
                  DraftModelCandidate("/models/other.gguf", "string"), NgramCandidate(),
                  SelfDraftCandidate("2-3")]
    back = trip({"candidates": candidates, "config": config, "prompt": "x", "chat": True})
    assert [type(c) for c in back["candidates"]] == [type(c) for c in candidates]
    assert [vars(c) for c in back["candidates"]] == [vars(c) for c in candidates]
    assert [(c.label, c.kind, c.choice) for c in back["candidates"]] == [
        (c.label, c.kind, c.choice) for c in candidates]


# --- what is refused ----------------------------------------------------------------------


def test_an_unknown_type_is_refused_by_name():
    with pytest.raises(wire.WireError, match=r"unknown type 'builtins\.open' on the wire"):
        wire.decode({wire.TAG: "builtins.open", "file": "x", "mode": "w"})
    nested = wire.encode([SweepRow(1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, None)])
    nested[0]["identical"] = {wire.TAG: "subprocess.Popen", "args": ["true"]}
    with pytest.raises(wire.WireError, match="unknown type 'subprocess.Popen'"):
        wire.decode(nested)
    with pytest.raises(wire.WireError, match="unknown type"):
        wire.decode({wire.TAG: ["SweepRow"]})


def test_malformed_objects_are_refused_with_what_is_wrong():
    row = wire.encode(SweepRow(1, 1.5, 1, 1, 1, 1, 1, 1, 1, 1, 1, None))
    with pytest.raises(wire.WireError, match=r"SweepRow\.k should be int, not 'one'"):
        wire.decode({**row, "k": "one"})
    with pytest.raises(wire.WireError, match="SweepRow has no field extra"):
        wire.decode({**row, "extra": 1})
    with pytest.raises(wire.WireError, match="a malformed SweepRow"):
        wire.decode({k: v for k, v in row.items() if k != "k"})
    with pytest.raises(wire.WireError, match="unknown type 'VerifyCostCurve'"):
        wire.decode({wire.TAG: "VerifyCostCurve", "points": 3})  # prices never cross the wire
    with pytest.raises(wire.WireError, match="expected GreedySuite on the wire, got SweepRow"):
        wire.decode(row, GreedySuite)
    with pytest.raises(wire.WireError, match="expected list or ExactReport on the wire, got "
                                             "NoneType"):
        wire.decode(None, (list, ExactReport))


def test_what_the_protocol_does_not_carry_is_not_sent():
    with pytest.raises(wire.WireError, match="function is not an object the protocol carries"):
        wire.encode({"job": test_what_the_protocol_does_not_carry_is_not_sent})
    with pytest.raises(wire.WireError, match="str keys"):
        wire.encode({1: 0.5})  # JSON would turn the key into "1" without a word
    with pytest.raises(wire.WireError, match="not an object the protocol carries"):
        wire.encode(deque([1]))


# --- the host runs jobs by name -----------------------------------------------------------


def events_until_done(host: EngineHost) -> list[dict]:
    events: list[dict] = []
    while not events or events[-1]["event"] not in (protocol.DONE, "exited"):
        event = host.next_event(120)
        assert event is not None, "the host went quiet"
        events.append(event)
    return events


def test_the_host_runs_jobs_by_name_and_refuses_any_other(gguf_files):
    spec = protocol.spec_to_dict(ModelSpec(str(gguf_files[0]), str(gguf_files[1]), n_ctx=512))
    drafter = DrafterChoice(("draft",))
    config = DecodeConfig(n_predict=12, draft_max=3, drafter=drafter)
    host = EngineHost()
    host.start()
    try:
        host.send(protocol.JOB, spec=spec, job="os.system", settings={})
        events = events_until_done(host)
        assert [e["event"] for e in events] == [protocol.ERROR, protocol.DONE]  # nothing loaded
        assert events[0]["message"] == ("the engine host has no job 'os.system' — it runs "
                                        "sweep, rank, exactness")

        host.send(protocol.JOB, spec=spec, job="sweep",
                  settings=wire.encode({"config": config, "prompt": "the cat"}))
        events = events_until_done(host)
        assert [e["event"] for e in events] == [protocol.ERROR, protocol.DONE]
        assert "the sweep job's settings do not fit it" in events[0]["message"]

        settings = {"config": config, "prompt": "the cat", "chat": False, "ks": [1, 2]}
        host.send(protocol.JOB, spec=spec, drafter=choice_to_dict(drafter),
                  job="sweep", settings=wire.encode(settings))
        events = events_until_done(host)
    finally:
        host.close()
    names = [e["event"] for e in events]
    assert protocol.ERROR not in names, events
    # nothing is timed when the pair loads: prices come from the runs' own passes
    assert all(e["event"] != "costs" for e in events)
    rows = wire.decode(next(e for e in events if e["event"] == protocol.RESULT)["result"], list)
    assert [type(r) for r in rows] == [SweepRow, SweepRow] and [r.k for r in rows] == [1, 2]


# --- a line printed on the host's stdout ---------------------------------------------------


class _Opens:
    """Unpickling this would create a file: what a crafted pickle could do in the window."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return open, (self.path, "w")


def crafted_lines(marker: str) -> dict[str, dict]:
    payload = base64.b64encode(pickle.dumps(_Opens(marker))).decode("ascii")
    return {
        "an old pickle result": {"event": protocol.RESULT, "pickle": payload},
        "a result naming a callable": {
            "event": protocol.RESULT, "result": {wire.TAG: "builtins.open", "file": marker,
                                                 "mode": "w"}},
        "a sweep row with a callable inside": {
            "event": protocol.RESULT, "result": [{
                wire.TAG: "SweepRow", "k": {wire.TAG: "io.open", "file": marker}}]},
    }


def test_the_old_pickle_payload_would_have_run_code(tmp_path):
    """The power check for the test below: its payload is not harmless."""
    marker = tmp_path / "ran"
    line = crafted_lines(str(marker))["an old pickle result"]
    pickle.loads(base64.b64decode(line["pickle"])).close()  # what unpack_object did
    assert marker.exists()


@pytest.mark.parametrize("kind", list(crafted_lines("")))
def test_a_line_printed_on_the_hosts_stdout_runs_nothing_in_the_window(
    kind, gguf_files, tmp_path, monkeypatch, qapp
):
    """A library that prints when the host starts (before fd 1 leaves the protocol stream)
    puts a crafted event in front of the job's: the worker refuses it through its usual
    error path, and what the line names is never run."""
    from ui.worker import JobRequest, RunWorker

    marker = tmp_path / "ran"
    planted = tmp_path / "planted"
    planted.mkdir()
    line = json.dumps(crafted_lines(str(marker))[kind])
    (planted / "sitecustomize.py").write_text(f"print({line!r}, flush=True)\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (str(planted), os.environ.get("PYTHONPATH", "")) if p))

    worker = RunWorker()
    failed: list[str] = []
    finished: list[tuple[str, object]] = []
    worker.failed.connect(failed.append)
    worker.job_done.connect(lambda name, result: finished.append((name, result)))
    spec = ModelSpec(str(gguf_files[0]), str(gguf_files[1]), n_ctx=512)
    config = DecodeConfig(n_predict=12, draft_max=3, drafter=DrafterChoice(("draft",)))
    try:
        worker.run_job(JobRequest(spec, config.drafter, "sweep", "sweep",
                                  {"config": config, "prompt": "the cat", "chat": False,
                                   "ks": [1]}))
    finally:
        worker.close_models()
    assert finished == [("sweep", None)]
    assert len(failed) == 1 and "on the wire" in failed[0], failed
    assert not marker.exists()
