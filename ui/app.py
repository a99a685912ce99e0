"""Entry point of the desktop app: `main(argv) -> int`.

`--self-test` (for packaging smoke tests) opens the window, loads the pair given by
--target/--draft (or the demo pair), runs a few speculative steps, writes a screenshot to
--screenshot, and exits 0; on any failure it prints the error and exits 1.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from app import __version__
from app.errors import DraftLensError

if TYPE_CHECKING:  # Qt is imported only once a window is really wanted
    from PySide6.QtWidgets import QApplication

CHECK_MS = 20  # how often wait_until looks at its condition


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="draftlens", description="DraftLens desktop app")
    parser.add_argument("--version", action="version", version=f"DraftLens {__version__}")
    parser.add_argument("--theme", choices=("system", "light", "dark"), default=None)
    parser.add_argument("--trace", help="open this trace file at start")
    parser.add_argument("--self-test", action="store_true",
                        help="run a few steps on a pair, save a screenshot, exit 0 or 1")
    parser.add_argument("--target", help="self-test: target model (default: the demo pair)")
    parser.add_argument("--draft", help="self-test: draft model (default: the demo pair's)")
    parser.add_argument("--backend", default="auto", choices=("auto", "llamacpp", "torch"))
    parser.add_argument("--rpc", default="", metavar="HOST:PORT[,HOST:PORT...]",
                        help="put the target's layers on these llama.cpp rpc-servers "
                             "(fills the pair's RPC field; trusted networks only)")
    parser.add_argument("--screenshot", help="self-test: write a PNG of the window here")
    parser.add_argument("--steps", type=int, default=24, help="self-test: new tokens to make")
    parser.add_argument("--timeout", type=float, default=600.0, help="self-test: seconds")
    return parser.parse_args(argv)


def _headless() -> bool:
    return sys.platform.startswith("linux") and not (
        os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    )


def make_application() -> QApplication:
    from PySide6.QtWidgets import QApplication

    from ui.icon import app_icon

    app = QApplication.instance()
    if app is None:
        app = QApplication([sys.argv[0] if sys.argv else "draftlens"])
    app.setApplicationName("DraftLens")
    app.setApplicationDisplayName("DraftLens")
    app.setApplicationVersion(__version__)
    app.setDesktopFileName("draftlens")
    app.setWindowIcon(app_icon())
    return app


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.self_test and _headless():
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    elif _headless() and not os.environ.get("QT_QPA_PLATFORM"):
        print("draftlens: no display (DISPLAY / WAYLAND_DISPLAY unset) — the window needs a "
              "desktop; use `draftlens run ...` for the command line, or --self-test",
              file=sys.stderr)
        return 1
    from ui.qt_platform import platform_problem, wants_xcb

    if wants_xcb() and (problem := platform_problem()):
        print(problem, file=sys.stderr)
        return 1
    app = make_application()
    from ui.main_window import MainWindow

    if args.self_test:
        return self_test(args)
    window = MainWindow()
    if args.theme:
        window.set_theme(args.theme)
    if args.rpc:
        window.picker.rpc.setText(args.rpc)
    window.show()
    if args.trace:
        try:
            window.open_trace(args.trace)
        except DraftLensError as exc:
            window.show_error(str(exc))  # the window stays up, empty
    return app.exec()


def wait_until(condition: Callable[[], bool], timeout: float) -> bool:
    """Run Qt's event loop until `condition()` holds or `timeout` seconds pass. The loop sleeps
    between events as app.exec() does; `condition` is looked at every CHECK_MS. (A loop of
    processEvents and short sleeps woke 200 times a second and, on 2 cores, took a third of
    the UI thread's CPU during a decode: time the engine's threads lost.)"""
    from PySide6.QtCore import QEventLoop, QTimer

    if condition():
        return True
    deadline = time.monotonic() + timeout
    loop = QEventLoop()
    held = False

    def check() -> None:
        nonlocal held
        held = condition()
        if held or time.monotonic() > deadline:
            loop.quit()

    timer = QTimer(interval=CHECK_MS)
    timer.timeout.connect(check)
    timer.start()
    loop.exec()
    timer.stop()
    return held


def self_test(args: argparse.Namespace) -> int:
    from app.models.demo import demo_installed, demo_paths
    from app.settings import RecentPair, Settings
    from ui.main_window import MainWindow

    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="draftlens-selftest-") as tmp:
        window = MainWindow(Settings(), save_path=Path(tmp) / "settings.json")
        window.dialogs = False
        window.trace_folder = Path(tmp) / "traces"
        window.error_shown.connect(errors.append)
        try:
            if args.target:
                target, draft = args.target, args.draft or ""
            elif demo_installed():
                target, draft = (str(p) for p in demo_paths())
            else:
                print("self-test: no --target given and the demo pair is not installed",
                      file=sys.stderr)
                return 1
            if args.theme:
                window.set_theme(args.theme)
            window.show_workspace()
            window.picker.set_pair(RecentPair(target, draft, backend=args.backend, rpc=args.rpc))
            window.decode.max_new.setValue(args.steps)
            window.decode.temperature.setValue(0.0)
            window.show()
            if not wait_until(lambda: not window.picker.checking, 120):
                raise RuntimeError("the pair check did not finish")
            reason = window.picker.blocking_reason()
            if reason:
                raise RuntimeError(reason)
            window.start_run()
            if not wait_until(lambda: not window.running, args.timeout):
                window.stop_run()
                raise RuntimeError(f"the run did not finish within {args.timeout:.0f} s")
            if errors:
                raise RuntimeError(errors[0])
            window.flush()
            steps = len(window.run.steps) if window.run else 0
            if steps == 0:
                raise RuntimeError("the run produced no steps")
            if args.screenshot:
                wait_until(lambda: False, 0.3)  # let the last repaint land
                Path(args.screenshot).parent.mkdir(parents=True, exist_ok=True)
                if not window.grab().save(args.screenshot):
                    raise RuntimeError(f"cannot write {args.screenshot}")
            stats = window.run.stats
            print(f"self-test ok: {steps} steps, {stats.emitted} tokens, "
                  f"{stats.tokens_per_second:.1f} tok/s, alpha {stats.alpha:.2f}")
            return 0
        except Exception as exc:  # noqa: BLE001 - reported as the exit status
            print(f"self-test failed: {exc}", file=sys.stderr)
            return 1
        finally:
            window.close()


if __name__ == "__main__":
    sys.exit(main())
