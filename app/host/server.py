"""The engine host's child process: it owns the loaded pair and runs what the parent asks.

Commands arrive on stdin (a reader thread takes `stop`, `step` and `step_mode` at once, so
they reach a run between two steps); events leave on the protocol stream, which is the
process's original stdout. Anything else that writes to file descriptor 1 (a library's print)
is sent to stderr with llama.cpp's own log, so it cannot garble the protocol. When stdin
closes the parent is gone, and the host exits at once, in the middle of a pass if need be.
"""

from __future__ import annotations

import gc
import inspect
import json
import os
import queue
import sys
import threading
import traceback
from collections.abc import Generator
from dataclasses import asdict, astuple, dataclass
from typing import IO, Any

from app.analysis.compare import explain_difference, margins_noted
from app.analysis.divergence import MarginTap, TopTwo
from app.analysis.exact_mode import CheckCancelled
from app.analysis.kernel_noise import MeasurementCancelled
from app.engine.decode_config import DrafterChoice, choice_from_dict
from app.engine.drafters.registry import label
from app.engine.drafters.self_skip import SearchProgress
from app.engine.session import Session
from app.engine.text_stream import TextStream
from app.engine.trace import MODE_PLAIN, MODE_SPECULATIVE, TraceHeader, step_to_dict
from app.errors import DraftLensError
from app.host import protocol as p
from app.host import wire
from app.host.jobs import JOBS
from app.models.loading import LoadedPair, ModelSpec, load_pair
from app.runs import Run, prepare_run, remember_output, remember_prices
from backends.base import BackendError

_POLL_S = 0.05
# the work after a run's steps, as the status bar says it (app.host.protocol WORK)
BASELINE_TASK = "comparing: decoding the plain baseline"
EXPLAIN_TASK = "comparing: the texts differ, explaining where"
SEARCH_UNIT = "sets"  # what a self-draft's search of layers to skip counts (SearchProgress)


@dataclass(frozen=True)
class Work:
    task: str
    total: int  # 0: no fraction known


class _Stopped(Exception):
    """The parent asked to stop while the pair was loading, or a run was being prepared."""


class Host:
    def __init__(self, out: IO[str]) -> None:
        self.out = out
        self._out_lock = threading.Lock()
        self.commands: queue.Queue[dict[str, Any]] = queue.Queue()
        self.stop = threading.Event()
        self.step_mode = threading.Event()
        self.permits = threading.Semaphore(0)
        self.pair: LoadedPair | None = None
        self.pair_key: tuple[object, ...] | None = None
        self.drafter: DrafterChoice | None = None  # what drafts on it, as last announced

    # --- the wire ----------------------------------------------------------------------
    def emit(self, event: str, **data: Any) -> None:
        with self._out_lock:
            p.write_line(self.out, {"event": event, **data})

    def listen(self, stream: IO[str]) -> None:
        """On the reader thread: controls take effect at once, jobs queue for the main thread."""
        for line in stream:
            try:
                command = json.loads(line)
            except json.JSONDecodeError:
                print(f"engine host: ignored a line that is not JSON: {line[:80]!r}",
                      file=sys.stderr)
                continue
            name = command.get("cmd")
            if name == p.STOP:
                self.stop.set()
            elif name == p.STEP:
                self.permits.release()
            elif name == p.STEP_MODE:
                (self.step_mode.set if command.get("on") else self.step_mode.clear)()
            else:
                if name in (p.RUN, p.LOAD, p.JOB):  # a stop sent after this command is for it
                    self.stop.clear()
                    self._reset_permits()
                    (self.step_mode.set if command.get("step_mode") else self.step_mode.clear)()
                    for _ in range(int(command.get("permits", 0))):
                        self.permits.release()
                self.commands.put(command)
        sys.stderr.flush()
        os._exit(0)  # the parent closed our stdin: it is gone, nothing here is kept

    def _reset_permits(self) -> None:
        while self.permits.acquire(blocking=False):
            pass

    def serve(self) -> int:
        while True:
            command = self.commands.get()
            name = command.get("cmd")
            if name == p.QUIT:
                self.close_models()
                return 0
            try:
                if name == p.RUN:
                    self.run(command)
                elif name == p.JOB:
                    self.job(command)
                elif name == p.LOAD:
                    self.ensure_pair(command)
                else:
                    self.emit(p.ERROR, message=f"the engine host has no command {name!r}")
            except (_Stopped, CheckCancelled):  # a stop the parent asked for is no error
                pass
            except (DraftLensError, BackendError) as exc:
                self.emit(p.ERROR, message=str(exc))
            except MemoryError:
                self.emit(p.ERROR, message="out of memory — try a smaller model, fewer GPU "
                                           "layers or a shorter context")
            except Exception as exc:  # noqa: BLE001 - any engine failure becomes one message
                traceback.print_exc(file=sys.stderr)
                text = str(exc).strip()
                first = text.splitlines()[0] if text else ""
                self.emit(p.ERROR, message=f"{type(exc).__name__}: {first}" if first
                          else type(exc).__name__)
            finally:
                self.emit(p.DONE)

    # --- the pair ----------------------------------------------------------------------
    def close_models(self) -> None:
        if self.pair is not None:
            self.pair.close()
        self.pair, self.pair_key, self.drafter = None, None, None

    def ensure_pair(self, command: dict[str, Any]) -> LoadedPair:
        """The command's pair, loaded unless it is already; what drafts on it announced (and
        with `costs`, its costs measured) when that changed."""
        spec = p.spec_from_dict(command["spec"])
        # a run's drafter is its config's; a load or a job names the window's
        choice = choice_from_dict(command.get("drafter")
                                    or command.get("config", {}).get("drafter") or {})
        pair = self._loaded(spec)
        if choice != self.drafter:
            self.drafter = choice
            self.emit(p.LOADED, target=pair.target.name,
                      draft=pair.draft.name if pair.draft else label(choice),
                      backend=pair.target.backend, device=pair.target.device,
                      warnings=list(pair.warnings))
        return pair

    def _loaded(self, spec: ModelSpec) -> LoadedPair:
        key = astuple(spec)
        if self.pair is not None and self.pair_key == key:
            return self.pair
        self.close_models()

        def say(message: str) -> None:
            if self.stop.is_set():
                raise _Stopped
            self.emit(p.PROGRESS, message=message)

        pair = load_pair(spec, say)
        if self.stop.is_set():
            pair.close()
            raise _Stopped
        self.pair, self.pair_key = pair, key
        gc.collect()
        gc.freeze()  # before decoding starts: later GC pauses only walk new objects
        return pair

    # --- a job (an analysis the window asked for) ---------------------------------------
    def job(self, command: dict[str, Any]) -> None:
        """A job of app.host.jobs.JOBS by name; its settings are checked before the pair
        loads."""
        name = command.get("job")
        work = JOBS.get(name) if isinstance(name, str) else None
        if work is None:
            raise wire.WireError(f"the engine host has no job {name!r} — it runs "
                                 f"{', '.join(JOBS)}")
        settings = wire.decode(command.get("settings", {}), dict)
        try:
            inspect.signature(work).bind(None, None, None, **settings)
        except TypeError as exc:
            raise wire.WireError(f"the {name} job's settings do not fit it: {exc}") from None
        pair = self.ensure_pair(command)
        result = work(pair, self.stop.is_set,
                      lambda message: self.emit(p.WORK, task=message, done=0, total=0),
                      **settings)
        self.emit(p.RESULT, result=wire.encode(result))

    # --- a run -------------------------------------------------------------------------
    def run(self, command: dict[str, Any]) -> None:
        pair = self.ensure_pair(command)
        config = p.config_from_dict(command["config"])
        # a greedy compare notes the target's top two per position, to explain a difference
        with margins_noted(pair, bool(command.get("compare")) and config.sampling.greedy) as tap:
            self._run(pair, command, tap)

    def _run(self, pair: LoadedPair, command: dict[str, Any], tap: MarginTap | None) -> None:
        run = self._prepare(pair, command)
        self._decode(run, bool(command.get("stream_text")))  # an engine error: nothing kept
        self._conclude(pair, command, tap, run)
        # after the trace's summary, before `done`: a speculative run that ended without an
        # engine error (stopped or not) is kept in the draft memory (--draft-memory) for the
        # runs after it, here in the host, which is where its pair and its output are
        remember_output(pair, run.session, run.prompt_ids)
        remember_prices(pair)

    def _conclude(self, pair: LoadedPair, command: dict[str, Any], tap: MarginTap | None,
                  run: Run) -> None:
        """The run's summary, and with `compare` the plain baseline and the comparison."""
        compare = bool(command.get("compare"))
        session = run.session
        interrupted = self.stop.is_set()
        if interrupted or not compare or session.drafter is None:
            self._finish(run, interrupted=interrupted)
            return
        spec_top = tap.top if tap is not None else {}
        if tap is not None:
            tap.top = {}
        baseline = self._prepare(pair, command, plain=True)
        self._decode(baseline, False, work=Work(BASELINE_TASK, len(session.output_ids)))
        if self.stop.is_set():  # cut short: no fair comparison
            self._finish(baseline, interrupted=True)
            self._finish(run)
            return
        self._finish(baseline)
        self._finish(run, baseline.session)
        self._compare(run, baseline, tap, spec_top)

    def _compare(self, run: Run, baseline: Run, tap: MarginTap | None,
                 spec_top: dict[int, TopTwo]) -> None:
        """The comparison at once; where greedy texts differ, then their explanation, which
        may first measure the target's kernel noise (once per model file): shown as work,
        and left out when the parent cancels it."""
        session, plain = run.session, baseline.session
        figures = dict(speculative_tok_s=session.stats.tokens_per_second,
                       plain_tok_s=plain.stats.tokens_per_second,
                       identical=session.output_ids == plain.output_ids,
                       greedy=session.config.sampling.greedy,
                       speculative_tokens=len(session.output_ids),
                       plain_tokens=len(plain.output_ids))
        explaining = tap is not None and not figures["identical"]
        self.emit(p.COMPARED, **figures, divergence=None, explaining=explaining)
        if tap is None or not explaining:
            return

        def say(message: str) -> None:
            self.emit(p.WORK, task=message, done=0, total=0)

        def progress(fraction: float, what: str) -> None:  # the kernel-noise measurement's
            self.emit(p.WORK, task=what, done=round(fraction * 100), total=100, unit=p.PERCENT)

        say(EXPLAIN_TASK)
        try:
            divergence = explain_difference(
                tap, len(run.prompt_ids), plain.output_ids, session.output_ids, tap.top,
                spec_top, say, progress, self.stop.is_set)
        except MeasurementCancelled:
            return  # cancelled: the comparison stands without its explanation
        if self.stop.is_set():
            return
        self.emit(p.COMPARED, **figures, explaining=False,
                  divergence=divergence.as_dict() if divergence is not None else None)

    def _prepare(self, pair: LoadedPair, command: dict[str, Any], plain: bool = False) -> Run:
        config = p.config_from_dict(command["config"])
        run = prepare_run(pair, config, command["prompt"], bool(command.get("chat")),
                          plain=plain, extra_settings={"compare": bool(command.get("compare"))},
                          progress=self._preparing, searching=self._searching)
        self.emit(p.STARTED, run=_mode(run), header=_header_line(run.header),
                  t_target=run.session.plain_step_price()[0])
        return run

    def _preparing(self, message: str, done: int = 0, total: int = 0, unit: str = "",
                   transient: bool = False) -> None:
        """Work before a run's first step (a self-draft's choice of layers), said as such;
        a stop asked for meanwhile ends it here."""
        if self.stop.is_set():
            raise _Stopped
        self.emit(p.PROGRESS, message=message, done=done, total=total, unit=unit,
                  preparing=True, transient=transient)

    def _searching(self, at: SearchProgress) -> None:
        """Each set the search scores; a layer dropped is the line a log keeps."""
        self._preparing(at.describe(), at.scored, at.to_score, SEARCH_UNIT,
                        transient=not at.settled)

    def _finish(self, run: Run, baseline: Session | None = None, interrupted: bool = False,
                error: str = "") -> None:
        summary = run.session.summary(baseline, interrupted=interrupted, error=error)
        self.emit(p.FINISHED, run=_mode(run), summary=summary,
                  prefill_seconds=run.session.prefill_seconds)

    def _decode(self, run: Run, stream_text: bool, work: Work | None = None) -> None:
        """Every step out as the trace's step line; an engine error mid-run still ends the run
        with a summary that names it, then is reported. `work`: this run is work after the
        run the user watches (a compare's baseline), reported by tokens written."""
        mode = _mode(run)
        stream = TextStream(run.session.target) if stream_text else None
        steps = run.session.steps(run.prompt_ids)
        if work is not None:
            self.emit(p.WORK, task=work.task, done=0, total=work.total, unit="tokens")
        try:
            while self._wait_turn(mode):
                step = next(steps, None)
                if step is None:
                    return
                text = stream.push(step.emitted) if stream is not None else ""
                self.emit(p.STEP_DONE, run=mode, line=step_to_dict(step), text=text)
                if work is not None:
                    self.emit(p.WORK, task=work.task, done=len(run.session.output_ids),
                              total=work.total, unit="tokens")
        except (DraftLensError, BackendError) as exc:
            self._finish(run, error=str(exc))
            raise
        finally:
            if isinstance(steps, Generator):
                steps.close()

    def _wait_turn(self, mode: str) -> bool:
        """False when stopped; in Step mode, blocks until the parent releases one step."""
        if self.stop.is_set():
            return False
        if mode != MODE_SPECULATIVE or not self.step_mode.is_set():
            return True
        if self.permits.acquire(blocking=False):
            return True
        self.emit(p.WAITING)
        while not self.stop.is_set():
            if self.permits.acquire(timeout=_POLL_S) or not self.step_mode.is_set():
                return not self.stop.is_set()
        return False


def _mode(run: Run) -> str:
    return MODE_SPECULATIVE if run.session.drafter is not None else MODE_PLAIN


def _header_line(header: TraceHeader) -> dict[str, Any]:
    return asdict(header)


def protocol_stream() -> IO[str]:
    """The original stdout for the protocol; fd 1 from now on goes to stderr."""
    sys.stdout.flush()
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return os.fdopen(protocol_fd, "w", encoding="utf-8", buffering=1)


def main() -> int:
    out = protocol_stream()
    host = Host(out)
    reader = threading.Thread(target=host.listen, args=(sys.stdin,), name="host-commands",
                              daemon=True)
    reader.start()
    return host.serve()
