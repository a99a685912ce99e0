"""Work the engine host does after a run's steps is said on the wire (app.host.protocol WORK):
a compare's plain baseline with its progress in tokens, and `stop` cancels it, leaving the
speculative run's summary whole (a real host process, tiny GGUF pair)."""

from __future__ import annotations

from app.engine.decode_config import DecodeConfig, DrafterChoice
from app.host import protocol
from app.host.client import EngineHost
from app.host.server import BASELINE_TASK
from app.models.loading import ModelSpec

N = 40
LONG = 300  # a baseline long enough that a stop reaches it mid-way


def compare_run(host: EngineHost, gguf_files, n: int = N) -> None:
    spec = ModelSpec(str(gguf_files[0]), str(gguf_files[1]), n_ctx=512)
    host.send(protocol.RUN, spec=protocol.spec_to_dict(spec), prompt="the cat", compare=True,
              config=protocol.config_to_dict(DecodeConfig(n_predict=n, draft_max=3,
                                                           drafter=DrafterChoice(("draft",)))))


def next_event(host: EngineHost) -> dict:
    event = host.next_event(60)
    assert event is not None, "the host went quiet"
    return event


def test_a_compare_baseline_is_reported_as_work_with_its_progress(gguf_files):
    host = EngineHost()
    host.start()
    try:
        compare_run(host, gguf_files)
        events = [next_event(host)]
        while events[-1]["event"] != protocol.DONE:
            events.append(next_event(host))
    finally:
        host.close()
    work = [e for e in events if e["event"] == protocol.WORK]
    assert work and all(e["task"] == BASELINE_TASK and e["total"] == N for e in work)
    done = [e["done"] for e in work]
    assert done[0] == 0 and done[-1] == N and done == sorted(done)
    names = [e["event"] for e in events]
    first_work = names.index(protocol.WORK)
    starts = [i for i, name in enumerate(names) if name == protocol.STARTED]
    assert len(starts) == 2 and starts[0] < first_work > starts[1]  # after both runs began
    compared = [e for e in events if e["event"] == protocol.COMPARED]
    assert compared and compared[-1]["explaining"] is False


def test_stop_cancels_the_work_after_a_run(gguf_files):
    host = EngineHost()
    host.start()
    try:
        compare_run(host, gguf_files, LONG)
        events = [next_event(host)]
        while events[-1]["event"] != protocol.WORK:
            events.append(next_event(host))
        host.stop()
        while events[-1]["event"] != protocol.DONE:
            events.append(next_event(host))
    finally:
        host.close()
    finished = [e for e in events if e["event"] == protocol.FINISHED]
    by_run = {e["run"]: e["summary"] for e in finished}
    total = next(e for e in events if e["event"] == protocol.WORK)["total"]
    assert total > 100  # the baseline had a long way to go
    assert by_run["speculative"]["emitted"] == total and not by_run["speculative"]["interrupted"]
    assert by_run["plain"]["interrupted"]  # the baseline was cut short
    assert protocol.COMPARED not in [e["event"] for e in events]
