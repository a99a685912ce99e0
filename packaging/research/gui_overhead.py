"""What the window costs the engine: the same prompt and settings decoded headless (a bare
Session loop, as the CLI does) and with the GUI attached, alternating, on the demo pair.

    xvfb-run -s "-screen 0 1600x1000x24" .venv/bin/python packaging/research/gui_overhead.py

Prints tok/s for both (engine-timed, from RunStats, and wall-clock), their ratio, the worst
event-loop gap during decoding (a 10 ms QTimer records the longest interval between its
ticks), the longest single event the UI thread handled (to tell a slow handler from a starved
thread), and the CPU time the UI thread used. To say where the GUI's cost goes it also prints
the CPU each party used during the GUI runs, from /proc: this process's threads (the UI
thread, the worker, the host's event reader), the engine host (its total beside the engine's
own timed work) and the X server. A benchmark, not a test: on a busy machine, run it a few
times.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from PySide6.QtCore import QEvent, QObject
    from PySide6.QtWidgets import QApplication

    from app.engine.decode_config import DecodeConfig
    from app.models.loading import LoadedPair
    from ui.main_window import MainWindow

MAIN_THREAD = threading.get_ident()
PROMPT = "def quicksort(items: list[int]) -> list[int]:\n"


@dataclass
class Sample:
    tok_s: float  # engine-timed (RunStats: emitted / sum of step times)
    wall_tok_s: float  # emitted / wall clock from start to the last token
    tokens: int
    max_gap_ms: float = 0.0
    ui_cpu_s: float = 0.0
    longest_event_ms: float = 0.0
    longest_event: str = ""
    cpu_s: dict[str, float] | None = None  # per party, during the run (from /proc)


TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(stat_path: Path) -> float:
    """utime + stime of a /proc stat file (a process or a thread), in seconds."""
    fields = stat_path.read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def thread_cpu() -> dict[str, float]:
    """This process's CPU by thread name (threads of one name summed; the main thread is the
    UI thread)."""
    found: dict[str, float] = {}
    for task in Path("/proc/self/task").iterdir():
        try:
            name = ("UI thread" if int(task.name) == os.getpid()
                    else (task / "comm").read_text().strip())
            found[name] = found.get(name, 0.0) + cpu_seconds(task / "stat")
        except OSError:
            continue
    return found


def x_server_pids() -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if (proc / "comm").read_text().strip() in ("Xvfb", "Xorg", "Xwayland"):
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


def party_cpu(host: int | None) -> dict[str, float]:
    """CPU seconds so far: each thread of this process, the engine host, the X server."""
    parties = {f"GUI process: {name}": t for name, t in thread_cpu().items()}
    for label, pids in (("engine host (whole process)", [host] if host else []),
                        ("X server", x_server_pids())):
        total = 0.0
        for pid in pids:
            try:
                total += cpu_seconds(Path(f"/proc/{pid}/stat"))
            except OSError:
                continue
        parties[label] = total
    return parties


def host_pid(window: MainWindow) -> int | None:
    host = window.run_control.worker._host  # noqa: SLF001 - a benchmark looks inside
    return host.pid if host is not None else None


def timing_application() -> QApplication:
    """A QApplication that times the events it delivers on the UI thread."""
    from PySide6.QtWidgets import QApplication

    class TimingApplication(QApplication):
        """Records the longest top-level event delivery (handler + everything nested in it)."""

        def __init__(self, argv: list[str]) -> None:
            super().__init__(argv)
            self.depth = 0
            self.reset()

        def reset(self) -> None:
            self.longest = 0.0
            self.longest_what = ""

        def notify(self, receiver: QObject, event: QEvent) -> bool:  # Qt override
            if threading.get_ident() != MAIN_THREAD:  # the worker's queued run call, etc.
                return super().notify(receiver, event)
            self.depth += 1
            start, cpu = time.perf_counter(), time.thread_time()
            try:
                return super().notify(receiver, event)
            finally:
                self.depth -= 1
                took = time.perf_counter() - start
                if self.depth == 0 and took > self.longest:
                    self.longest = took
                    owner = receiver.parent() if receiver.parent() is not None else receiver
                    self.longest_what = (
                        f"{event.type().name} to {type(receiver).__name__} of "
                        f"{type(owner).__name__}, of which "
                        f"{(time.thread_time() - cpu) * 1000:.0f} ms on the CPU"
                    )

    return TimingApplication([sys.argv[0]])


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", help="default: the demo pair's target")
    parser.add_argument("--draft", help="default: the demo pair's draft")
    parser.add_argument("--backend", default="llamacpp", choices=("llamacpp", "torch"))
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--draft-max", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--time-events", action="store_true",
                        help="also find the longest single UI event (every event then passes "
                             "through a Python notify(), which costs the UI thread CPU itself)")
    return parser.parse_args(argv)


class EventLoopProbe:
    """A 10 ms timer that remembers the longest interval between two of its ticks."""

    def __init__(self) -> None:
        from PySide6.QtCore import QTimer

        self.timer = QTimer(interval=10)
        self.timer.timeout.connect(self._tick)
        self.max_gap = 0.0
        self._last = 0.0

    def start(self) -> None:
        self.max_gap = 0.0
        self._last = time.perf_counter()
        self.timer.start()

    def _tick(self) -> None:
        now = time.perf_counter()
        self.max_gap = max(self.max_gap, now - self._last)
        self._last = now

    def stop(self) -> float:
        self.timer.stop()
        self._tick()
        return self.max_gap


def headless_run(pair: LoadedPair, config: DecodeConfig, prompt: str) -> Sample:
    from app.runs import prepare_run

    run = prepare_run(pair, config, prompt, chat=False)
    session = run.session
    start = time.perf_counter()
    for _ in session.steps(run.prompt_ids):
        pass
    wall = time.perf_counter() - start
    emitted = session.stats.emitted
    return Sample(session.stats.tokens_per_second, emitted / wall, emitted)


def gui_run(window: MainWindow, probe: EventLoopProbe) -> Sample:
    from PySide6.QtWidgets import QApplication

    from ui.app import wait_until

    app = QApplication.instance()
    timed = hasattr(app, "reset")  # --time-events
    if timed:
        app.reset()
    before = party_cpu(host_pid(window))
    cpu = time.thread_time()
    start = time.perf_counter()
    probe.start()
    window.start_run()
    if not wait_until(lambda: not window.running, 900):
        raise RuntimeError("the GUI run did not finish")
    gap = probe.stop()
    wall = time.perf_counter() - start
    after = party_cpu(host_pid(window))
    stats = window.run.stats
    used = {name: after[name] - before.get(name, 0.0) for name in after}
    used["engine's timed work (RunStats)"] = stats.elapsed
    used["wall clock"] = wall
    return Sample(stats.tokens_per_second, stats.emitted / wall, stats.emitted, gap * 1000,
                  time.thread_time() - cpu, app.longest * 1000 if timed else 0.0,
                  app.longest_what if timed else "", used)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from app.models.demo import demo_installed, demo_paths
    from app.models.loading import load_pair
    from app.settings import RecentPair, Settings
    from ui.app import make_application, wait_until
    from ui.main_window import MainWindow

    if args.target:
        target, draft = args.target, args.draft
    elif demo_installed():
        target, draft = (str(p) for p in demo_paths())
    else:
        print("no --target and the demo pair is not installed", file=sys.stderr)
        return 1
    if args.time_events:
        timing_application()
    make_application()
    tmp = tempfile.TemporaryDirectory(prefix="draftlens-overhead-")
    window = MainWindow(Settings(), save_path=Path(tmp.name) / "settings.json")
    window.dialogs = False
    window.trace_folder = Path(tmp.name) / "traces"
    errors: list[str] = []
    window.error_shown.connect(errors.append)
    window.show_workspace()
    window.picker.set_pair(RecentPair(target, draft, backend=args.backend, device="cpu"))
    panel = window.decode
    panel.prompt.setPlainText(PROMPT)
    panel.max_new.setValue(args.tokens)
    panel.draft_max.setValue(args.draft_max)
    panel.temperature.setValue(0.0)
    panel.compare.setChecked(False)
    window.resize(1600, 1000)
    window.show()
    wait_until(lambda: not window.picker.checking, 120)
    config = replace(panel.config(), drafter=window.picker.drafter_choice())
    spec = window.picker.model_spec()
    pair = load_pair(spec)
    probe = EventLoopProbe()
    try:
        headless_run(pair, config, PROMPT)  # warm-up (caches, page-in)
        gui_run(window, probe)  # warm-up: the worker loads its own copy of the pair
        if errors:
            raise RuntimeError(errors[0])
        rows: list[tuple[Sample, Sample]] = []
        for _ in range(args.repeats):
            rows.append((headless_run(pair, config, PROMPT), gui_run(window, probe)))
        report(rows)
        return 0
    except Exception as exc:  # noqa: BLE001 - reported as the exit status
        print(f"gui_overhead failed: {exc}", file=sys.stderr)
        return 1
    finally:
        pair.close()
        window.close()
        tmp.cleanup()


def report(rows: list[tuple[Sample, Sample]]) -> None:
    print("run  headless tok/s (wall)   GUI tok/s (wall)   GUI/headless  worst gap  UI CPU")
    for i, (h, g) in enumerate(rows, start=1):
        print(f"{i:>3}  {h.tok_s:7.2f} ({h.wall_tok_s:6.2f})     "
              f"{g.tok_s:7.2f} ({g.wall_tok_s:6.2f})     {g.tok_s / h.tok_s:6.3f}      "
              f"{g.max_gap_ms:6.1f} ms  {g.ui_cpu_s:5.2f} s")
    h_med = statistics.median(h.tok_s for h, _ in rows)
    g_med = statistics.median(g.tok_s for _, g in rows)
    ratio = statistics.median(g.tok_s / h.tok_s for h, g in rows)
    wall_ratio = statistics.median(g.wall_tok_s / h.wall_tok_s for h, g in rows)
    print(f"median: headless {h_med:.2f} tok/s, GUI {g_med:.2f} tok/s; median of the paired "
          f"ratios GUI/headless {ratio:.3f} (engine-timed), {wall_ratio:.3f} (wall clock) → "
          f"GUI costs {100 * (1 - ratio):+.1f}% / {100 * (1 - wall_ratio):+.1f}%")
    print(f"worst event-loop gap during decoding: {max(g.max_gap_ms for _, g in rows):.1f} ms")
    slowest = max((g for _, g in rows), key=lambda g: g.longest_event_ms)
    if slowest.longest_event:
        print(f"longest single UI event: {slowest.longest_event_ms:.1f} ms "
              f"({slowest.longest_event})")
    print(f"UI thread CPU: {sum(g.ui_cpu_s for _, g in rows):.2f} s over "
          f"{sum(g.tokens / g.wall_tok_s for _, g in rows):.1f} s of GUI decoding")
    totals: dict[str, float] = {}
    for _, g in rows:
        for name, seconds in (g.cpu_s or {}).items():
            totals[name] = totals.get(name, 0.0) + seconds
    wall = totals.pop("wall clock", 0.0)
    print(f"CPU by party over the GUI runs ({wall:.1f} s of wall clock; as a share of one core):")
    for name, seconds in sorted(totals.items(), key=lambda kv: -kv[1]):
        if seconds >= 0.005:
            print(f"  {name:<45} {seconds:7.2f} s  {100 * seconds / wall:5.1f}%")


if __name__ == "__main__":
    sys.exit(main())
