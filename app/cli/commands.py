"""`draftlens run` and `draftlens trace` (`draftlens models ...` is in app.cli.models)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from app.cli import interrupt
from app.cli.options import decode_config, forget_draft_memory, model_spec, self_draft_layers
from app.engine.metrics import RunStats
from app.engine.text_stream import TextStream
from app.engine.trace import TraceWriter, read_trace
from app.errors import DraftLensError, SettingsError
from app.models.loading import load_pair
from app.runs import finish_trace, prepare_run, remember_output


def cmd_run(args: argparse.Namespace) -> int:
    config = decode_config(args)
    spec = model_spec(args)
    if len(self_draft_layers(args)) > 1:
        raise SettingsError("run takes one --self-draft-layers value; for a layer sweep use "
                            "draftlens bench --self-draft-layers 4,8,12")
    if args.trace:
        ensure_writable(args.trace)
    forget_draft_memory(args)
    pair = load_pair(spec, progress=lambda m: print(f"[draftlens] {m}", file=sys.stderr))
    for warning in pair.warnings:
        print(f"[draftlens] warning: {warning}", file=sys.stderr)
    try:
        run = prepare_run(pair, config, args.prompt, args.chat)
        session = run.session
        writer = TraceWriter(args.trace) if args.trace else None
        stream = TextStream(pair.target)
        stopped: BaseException | None = None
        try:
            if writer:
                writer.header(run.header)
            try:
                for step in session.steps(run.prompt_ids):
                    sys.stdout.write(stream.push(step.emitted))
                    sys.stdout.flush()
                    if writer:
                        writer.step(step)
                    interrupt.check()
            except (KeyboardInterrupt, DraftLensError) as exc:
                stopped = exc  # the trace still gets its summary line, then exc is raised
            sys.stdout.write("\n")
            error = str(stopped) if isinstance(stopped, DraftLensError) else ""
            summary = finish_trace(writer, session, interrupted=stopped is not None, error=error)
            if not error:
                remember_output(pair, session, run.prompt_ids)
        finally:
            if writer:
                writer.close()
        print_stats(session.stats, summary, session.prefill_seconds, len(run.prompt_ids))
        if stopped is not None:
            raise stopped
    finally:
        pair.close()
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
    if "cost_ratio" in summary:
        rows.append(("cost ratio c", f"{summary['cost_ratio']:.3f}"))
        rows.append(("theory speedup E/(1+kc)", f"{summary['theory_speedup']:.2f}x"))
        rows.append(("cost-model speedup", f"{summary['predicted_speedup']:.2f}x"))
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"  {name:<{width}}  {value}", file=sys.stderr)


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
    return 0
