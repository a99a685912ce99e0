"""`draftlens run` and `draftlens trace` (`draftlens models ...` is in app.cli.models)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from app.cli import interrupt
from app.cli.options import forget_draft_memory, settings
from app.engine.metrics import RunStats
from app.engine.trace import read_trace
from app.errors import DraftLensError, TraceWriteError
from app.host import protocol
from app.host.client import EXITED, EngineHost
from app.host.keeper import TraceKeeper, cut_off_note, death_message


def cmd_run(args: argparse.Namespace) -> int:
    """Decode in an engine host (app.host): if the runtime ends its process, this command
    still prints one error line naming how, and the trace still gets its summary."""
    config, spec = settings(args)
    if args.trace:
        ensure_writable(args.trace)
    forget_draft_memory(args)
    # the host keeps the run's output in the draft memory (--draft-memory) before it ends
    host = EngineHost()
    host.start()
    try:
        host.send(protocol.RUN, spec=protocol.spec_to_dict(spec),
                  config=protocol.config_to_dict(config), prompt=args.prompt, chat=args.chat,
                  stream_text=True)
        with interrupt.noted_only():
            return _follow_run(host, args.trace)
    finally:
        host.close()


def _follow_run(host: EngineHost, trace: str | None) -> int:
    """Stream the host's run to stdout and the trace until it is done, stopped or dead."""
    keeper: TraceKeeper | None = None
    stopped: BaseException | None = None  # Ctrl+C, or the trace that could not be written
    failure: DraftLensError | None = None  # what the engine (or its death) reported
    prefill = 0.0
    while True:
        if interrupt.requested() and stopped is None:
            stopped = KeyboardInterrupt()  # raised once the trace has its summary
            host.stop()
        try:
            event = host.next_event(0.1)
            if event is None:
                if host.overdue():
                    host.kill()  # a pass outlasts the grace period: end it here
                continue
            name = event["event"]
            if name == protocol.PROGRESS:
                if not event.get("transient"):  # the next report replaces it: not logged
                    print(f"[draftlens] {event['message']}", file=sys.stderr)
            elif name == protocol.LOADED:
                for warning in event["warnings"]:
                    print(f"[draftlens] warning: {warning}", file=sys.stderr)
            elif name == protocol.STARTED:
                keeper = TraceKeeper(trace, event["header"], event.get("t_target"))
            elif name == protocol.STEP_DONE and keeper is not None and stopped is None:
                keeper.add(event["line"])
                sys.stdout.write(event["text"])
                sys.stdout.flush()
            elif name == protocol.FINISHED and keeper is not None:
                prefill = event.get("prefill_seconds", 0.0)
                if stopped is None:
                    keeper.finish(event["summary"])
                else:  # the steps kept here, not those the host made after the stop
                    keeper.cut_off(str(stopped) if isinstance(stopped, DraftLensError) else "")
            elif name == protocol.ERROR:
                failure = DraftLensError(event["message"])
            elif name == protocol.DONE:
                break
            elif name == EXITED:
                code = event["returncode"]
                if keeper is not None:
                    keeper.cut_off(cut_off_note(keeper.steps, code, host))
                if not (host.killed_by_us and stopped is not None):
                    failure = DraftLensError(death_message(host, code))
                break
        except TraceWriteError as exc:
            stopped = stopped or exc  # the trace still gets its summary line, then exc is raised
            host.stop()
    if keeper is not None:
        if keeper.summary is None:
            keeper.cut_off(str(failure) if failure is not None else "")
        sys.stdout.write("\n")
        print_stats(keeper.stats, keeper.summary or {}, prefill, keeper.header.prompt_tokens)
    if stopped is not None:
        raise stopped
    if failure is not None:
        raise failure
    return 0


def print_stats(stats: RunStats, summary: dict[str, Any], prefill: float, n_prompt: int) -> None:
    rows = [
        ("prompt", f"{n_prompt} tokens in {prefill:.2f} s"),
        ("generated", f"{stats.emitted} tokens in {stats.elapsed:.2f} s"),
        ("speed", f"{stats.tokens_per_second:.2f} tok/s"),
        ("target passes", f"{stats.steps} ({stats.tokens_per_pass:.2f} tokens per pass)"),
        ("drafted / accepted", f"{stats.drafted} / {stats.accepted} "
                               f"({100 * stats.acceptance:.1f}%)"),
        ("alpha (per judged token)", f"{stats.alpha:.3f}"),
        ("acceptance by position", " ".join(f"{a:.2f}" for a in stats.acceptance_by_position)),
        ("mean k", f"{stats.mean_k:.2f}"),
        ("time draft/verify/engine", f"{stats.t_draft:.2f} / {stats.t_verify:.2f} / "
                                     f"{stats.t_overhead:.2f} s"),
    ]
    rows.extend(speedup_rows(stats, summary))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}", file=sys.stderr)


# the cost model prices the drafting passes alone (mean times); where it parts from the run's
# measured speed by more than this, the passes' mean hides other time and it is not printed
_AGREES = 0.10


def speedup_rows(stats: RunStats, summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The speed against plain decoding with the plain step it was priced from, and the cost
    model only where the run's own measured speed does not contradict it."""
    t_plain, source = summary.get("t_target"), summary.get("t_target_source", "")
    if not t_plain:
        return ([("against plain decoding", f"not priced: {source} (draftlens bench times "
                                            f"plain decoding beside these settings)")]
                if source and stats.spec_steps else [])
    measured = stats.tokens_per_second * t_plain
    caveat = (" — plain steps timed on a busy machine: rerun on a quiet one to rely on it"
              if summary.get("t_target_busy") else "")
    rows = [("plain step priced at", f"{t_plain * 1000:.1f} ms, from {source}"),
            ("speed against plain", f"{measured:.2f}x (this run's speed x that price){caveat}")]
    if "cost_ratio" in summary:
        rows.append(("cost ratio c", f"{summary['cost_ratio']:.3f}"))
        rows.append(("theory speedup E/(1+kc)", f"{summary['theory_speedup']:.2f}x"))
        predicted = summary["predicted_speedup"]
        if abs(predicted - measured) <= _AGREES * measured:
            rows.append(("cost-model speedup", f"{predicted:.2f}x"))
        else:
            rows.append(("cost-model speedup", f"left out: the drafting passes alone price "
                                               f"{predicted:.2f}x, the run measured "
                                               f"{measured:.2f}x"))
    return rows


def ensure_writable(path: str) -> None:
    """Fail before any work if the trace cannot be written; leave nothing behind."""
    target = Path(path)
    existed = target.exists()
    if target.is_dir():
        raise DraftLensError(f"trace path {path} is a folder — give a file name like run.jsonl")
    try:
        with open(target, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise DraftLensError(f"cannot write the trace file {path}: {exc.strerror} — "
                             "choose a folder you can write to") from exc
    if not existed:
        target.unlink()


def cmd_trace(args: argparse.Namespace) -> int:
    trace = read_trace(args.file)
    stats = RunStats()
    for step in trace.steps:
        stats.add(step)
    if trace.header:
        h = trace.header
        print(f"target {h.target}\ndraft  {h.draft}\nbackend {h.backend} on {h.device}")
    for note in trace.notes:
        print(f"note: {note}")
    print(f"steps {stats.steps}, tokens {stats.emitted}, {stats.tokens_per_second:.2f} tok/s, "
          f"accepted {stats.accepted}/{stats.drafted} ({100 * stats.acceptance:.1f}%), "
          f"{stats.tokens_per_pass:.2f} tokens per pass")
    if getattr(args, "analysis", False):
        from app.analysis.rejections import analyse, report_lines

        print("\n".join(report_lines(analyse(trace.steps))))
        if any(step.decision is not None for step in trace.steps):
            from app.analysis.decision_audit import audit_line

            print(audit_line(trace.steps))
    return 0
