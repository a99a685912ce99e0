"""Screenshots of the real app on the demo pair, for the README and a look before release.

    xvfb-run -s "-screen 0 1600x1000x24" .venv/bin/python packaging/research/screenshot.py \
        --out assets/screenshot.png

Starts the window (not offscreen), loads the demo pair, runs a code prompt in compare mode with
greedy decoding, selects a verify step with a rejection, and writes PNGs of the window
(`--out`), plus `<out>-charts.png`, `<out>-inspector.png` and, with --dark, a dark-theme shot.

The first run as a new user meets it, at the sizes of common screens (the window fills a
screen of each size, less a title bar; the X screen must be at least as large as the largest):

    xvfb-run -s "-screen 0 1920x1080x24" .venv/bin/python packaging/research/screenshot.py \
        --first-run --size 1366x768,1600x900,1920x1080 --out docs/screenshots/first-run.png

writes `first-run-1366x768.png` … with the first-run defaults (no setting changed), first
`first-run-working-<first size>.png` while the host compares with plain decoding, and, when
adaptive k decoded that run plainly, presses "Watch the draft anyway" and writes
`first-run-drafts-<first size>.png` of the run that follows.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

if TYPE_CHECKING:
    from app.engine.records import StepRecord
    from ui.main_window import MainWindow

PROMPT = (
    "from dataclasses import dataclass\n\n\n@dataclass\nclass Point:\n    x: float\n"
    "    y: float\n\n    def distance_to(self, other: \"Point\") -> float:\n"
)


# two requests of one shape, as a user of a local model sends them one after another: the second
# answer repeats the scaffolding of the first, which suffix decoding copies from its memory
EARLIER_PROMPT = ("Write a Python function load_users(path) that reads a CSV file with the "
                  "columns name, email and age and returns a list of dicts. Use the csv module "
                  "and type hints.")
SUFFIX_PROMPT = ("Write a Python function load_orders(path) that reads a CSV file with the "
                 "columns order_id, customer and total and returns a list of dicts. Use the "
                 "csv module and type hints.")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "assets" / "screenshot.png"))
    parser.add_argument("--tokens", type=int, default=160)
    parser.add_argument("--draft-max", type=int, default=6)
    parser.add_argument("--prompt", default=PROMPT, help="the code prompt to continue")
    parser.add_argument("--fixed-k", action="store_true",
                        help="draft exactly --draft-max tokens per pass (adaptive off)")
    parser.add_argument("--tree-width", type=int, default=1,
                        help="draft a tree; the shot shows a step whose path left the first "
                             "path, in the inspector's tree tab")
    parser.add_argument("--backend", default="llamacpp", choices=("llamacpp", "torch"),
                        help="backend for the demo pair (torch: dequantised, bfloat16 on CPUs "
                             "that have it, where a 0.5B draft pays)")
    parser.add_argument("--ended-on-confidence", action="store_true",
                        help="show a step whose draft the draft's confidence ended (adaptive)")
    parser.add_argument("--edit", metavar="TASK",
                        help="n-gram lookup on one of the bench's edit prompts, as a chat "
                             "(e.g. 'rename a variable (7 uses)'); adaptive k up to --draft-max "
                             "(the bench uses --draft-max 64 --tokens 200)")
    parser.add_argument("--suffix", action="store_true",
                        help="suffix decoding with a draft memory: --earlier-prompt runs first "
                             "(filling the memory of a scratch data folder), then --prompt; the "
                             "shot shows a step whose draft was copied from the earlier run")
    parser.add_argument("--open-trace", metavar="TRACE",
                        help="open this trace (File > Open) instead of running, and shoot the "
                             "step --padded or a rejection picks")
    parser.add_argument("--adaptive", action="store_true",
                        help="adaptive k (the window's Fastest mode) rather than the default")
    parser.add_argument("--padded", action="store_true",
                        help="show a step whose pass was padded to a cheaper size (filler "
                             "after the draft, never judged), preferring one that kept tokens")
    parser.add_argument("--earlier-prompt", default=EARLIER_PROMPT,
                        help="with --suffix: the request run before --prompt")
    parser.add_argument("--target", help="another target than the demo pair's (no draft model)")
    parser.add_argument("--draft", help="another draft for the demo target, e.g. one of another "
                                        "vocabulary (models fetch-extra)")
    parser.add_argument("--draft-mtp", action="store_true",
                        help="with --target: its own MTP layers draft (a GGUF that has them)")
    parser.add_argument("--self-skip", metavar="RANGES|auto",
                        help="the target drafts for itself with these layers skipped (auto: "
                             "chosen on the prompt), chosen in the pair picker's option")
    parser.add_argument("--self-cost", type=float, default=None,
                        help="with --self-skip auto: the cost limit (default: the engine's)")
    parser.add_argument("--theme", default="light", choices=("light", "dark", "system"))
    parser.add_argument("--dark", action="store_true", help="also write <out>-dark.png")
    parser.add_argument("--width", type=int, default=1600)
    parser.add_argument("--height", type=int, default=1000)
    parser.add_argument("--size", type=_sizes, default=None,
                        help="screen sizes WxH[,WxH...]: one shot per size, named "
                             "<out>-WxH.png, the window fitted as it opens on such a screen")
    parser.add_argument("--first-run", action="store_true",
                        help="the first-run defaults, untouched (other decode options ignored)")
    return parser.parse_args(argv)


def _sizes(text: str) -> list[tuple[int, int]]:
    try:
        return [(int(w), int(h)) for w, h in (part.lower().split("x") for part in text.split(","))]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r}: give sizes as 1366x768[,1920x1080...]") from None


def shoot_sizes(window: MainWindow, out: Path, sizes: list[tuple[int, int]]) -> list[Path]:
    """The window filling a screen of each size (as maximised, less a title bar), so each shot
    shows the layout at that size; the whole screen counts as available."""
    from PySide6.QtCore import QRect, QSize

    from ui.app import wait_until

    paths = []
    for width, height in sizes:
        window.fit_to_screen(QSize(width, height), QRect(0, 0, width, height))
        window.flush(force=True)
        wait_until(lambda: False, 1.0)  # layouts, word wrap and charts settle
        path = out.with_name(f"{out.stem}-{width}x{height}.png")
        if not window.grab().save(str(path)):
            raise RuntimeError(f"cannot write {path}")
        print(f"wrote {path} ({window.width()}x{window.height()} window)")
        paths.append(path)
    return paths


def first_run(window: MainWindow, out: Path, sizes: list[tuple[int, int]]) -> None:
    """Run with the defaults (Inspect: a fixed short draft every step); print the seconds from
    Run to the first step; shoot with a step that has a rejection selected; if a plain-run
    notice shows (Fastest, or settings that decoded plainly), watch the draft and shoot."""
    import time

    from ui.app import wait_until

    pressed = time.perf_counter()
    window.start_run()
    if not wait_until(lambda: window.run is not None and bool(window.run.steps), 1800):
        raise RuntimeError("no step in 30 minutes")
    print(f"first step {time.perf_counter() - pressed:.1f} s after Run")
    # the host's work after the run's steps (a compare's baseline): the status bar says it
    if not wait_until(lambda: bool(window.run_control.finishing) or not window.running, 1800):
        raise RuntimeError("the run did not finish in 30 minutes")
    if window.running:
        window.flush(force=True)
        print("after the run:", window.run_control.work_status.label.text(),
              "· Run enabled:", window.act_run.isEnabled())
        shoot_sizes(window, out.with_name(out.stem + "-working.png"), sizes[:1])
    if not wait_until(lambda: not window.running, 1800):
        raise RuntimeError("the run did not finish in 30 minutes")
    window.flush(force=True)
    window.why.refresh()
    print("first run:", window.status_label.text())
    print("verdict:", window.why.verdict.text())
    print("compare:", window.compare_label.text())
    notice = window.why.notice
    print("notice:", notice.text.text() if notice.isVisible() else "(none)")
    if window.run.stats.spec_steps:
        window.select_step(pick_rejection_step(window))
        window.flush(force=True)
        print("why:", window.inspector.why.text() if hasattr(window.inspector, "why") else "")
    shoot_sizes(window, out, sizes)
    if notice.isVisible():
        notice.button.click()
        if not wait_until(lambda: not window.running, 1800):
            raise RuntimeError("the run with a fixed k did not finish in 30 minutes")
        window.flush(force=True)
        window.why.refresh()
        window.select_step(pick_rejection_step(window))
        print("watching the draft:", window.status_label.text())
        print("verdict:", window.why.verdict.text())
        print("compare:", window.compare_label.text())
        shoot_sizes(window, out.with_name(out.stem + "-drafts.png"), sizes[:1])


def pick_tree_step(window: MainWindow) -> int | None:
    """A tree step whose accepted path goes through a sibling, else the most branched one."""
    steps = [s for s in window.run.steps if s.is_tree]
    for step in steps:
        firsts: dict[int | None, int] = {}
        for i, t in enumerate(step.tokens):
            firsts.setdefault(t.parent, i)
            if t.accepted and firsts[t.parent] != i and len(step.tokens) >= 5:
                return step.index
    if not steps:
        return None
    return max(steps, key=lambda s: len(s.tokens) - s.draft_depth).index


def pick_rejection_step(window: MainWindow) -> int:
    """A step with a rejection, preferring one whose table has several rows and is mid-text."""
    steps = window.run.steps
    candidates = [s.index for s in steps if any(not t.accepted for t in s.tokens)]
    if not candidates:
        return len(steps) // 2
    rich = [i for i in candidates if steps[i].n_accepted >= 2 and i > 3]
    pool = rich or candidates
    return pool[len(pool) // 2]


def pick_memory_step(window: MainWindow) -> int | None:
    """The step that copied the most draft tokens from an earlier run (a retry's included:
    --earlier-prompt the same as --prompt)."""
    from app.engine.records import COPIED_FROM_MEMORY, COPIED_ON_RETRY

    def copied(step: StepRecord) -> int:
        return sum(1 for t in step.tokens if t.copied_from is not None
                   and t.copied_from.kind in (COPIED_FROM_MEMORY, COPIED_ON_RETRY))

    best = max(window.run.steps if window.run else [], key=copied, default=None)
    return best.index if best is not None and copied(best) else None


def pick_confidence_step(window: MainWindow) -> int | None:
    """A step whose draft ended on its confidence, preferring a longer draft."""
    steps = [s for s in window.run.steps if s.stop_chance is not None]
    return max(steps, key=lambda s: (s.k, -s.index)).index if steps else None


def shoot_trace(window: MainWindow, trace: Path, args: argparse.Namespace) -> int:
    """Open a saved trace in the window and shoot it at the step --padded (or a rejection)
    picks."""
    from ui.app import wait_until

    window.open_trace(trace)
    window.resize(args.width, args.height)
    window.move(0, 0)
    window.show()
    step = pick_padded_step(window) if args.padded else pick_rejection_step(window)
    if step is None:
        print(f"no padded pass in {trace}", file=sys.stderr)
        window.close()
        return 1
    window.select_step(step)
    window.flush(force=True)
    wait_until(lambda: False, 1.0)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    ok = window.grab().save(str(out))
    print(f"wrote {out}" if ok else f"cannot write {out}")
    window.close()
    return 0 if ok else 1


def pick_padded_step(window: MainWindow) -> int | None:
    """A step whose pass was padded, preferring one whose draft kept the most tokens."""
    steps = [s for s in window.run.steps if s.pads]
    return max(steps, key=lambda s: (s.n_accepted, s.decision is not None
                                     and s.decision.padded_to is not None, -s.index)
               ).index if steps else None


def earlier(window: MainWindow, earlier_prompt: str, prompt: str) -> None:
    """Run the earlier request (no comparison), so the next run has something to copy."""
    from ui.app import wait_until

    panel = window.decode
    panel.prompt.setPlainText(earlier_prompt)
    panel.compare.setChecked(False)
    window.start_run()
    if not wait_until(lambda: not window.running, 900):
        raise RuntimeError("the earlier run did not finish in 15 minutes")
    panel.prompt.setPlainText(prompt)
    panel.compare.setChecked(True)


def _edit_tasks() -> dict[str, str]:
    from app.cli.bench_tasks import EDIT_PROMPTS

    return EDIT_PROMPTS


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.edit and args.edit not in _edit_tasks():
        print(f"no edit task {args.edit!r}; the tasks are: " + ", ".join(_edit_tasks()),
              file=sys.stderr)
        return 2
    from app.models.demo import demo_installed
    from app.settings import Settings
    from ui.app import make_application, wait_until
    from ui.main_window import MainWindow, demo_pair

    if not demo_installed():
        print("the demo pair is not installed — run the app once and download it, or "
              "`draftlens models --fetch-demo`", file=sys.stderr)
        return 1
    make_application()
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="draftlens-shot-") as tmp:
        demo = demo_pair()  # where the demo pair is, before the data folder moves
        if args.suffix:  # the memory of a scratch data folder, not the user's
            os.environ["DRAFTLENS_HOME"] = tmp
        window = MainWindow(Settings(), save_path=Path(tmp) / "settings.json")
        window.dialogs = False
        window.trace_folder = Path(tmp) / "traces"
        window.error_shown.connect(errors.append)
        window.set_theme(args.theme)
        window.show_workspace()
        if args.first_run:
            window.picker.set_pair(demo)
            window.show()
            try:
                if not wait_until(lambda: not window.picker.checking, 120):
                    raise RuntimeError("the pair check did not finish")
                first_run(window, Path(args.out), args.size or [(args.width, args.height)])
                return 1 if errors else 0
            except Exception as exc:  # noqa: BLE001 - reported as the exit status
                print(f"screenshot failed: {exc}", file=sys.stderr)
                return 1
            finally:
                for message in errors:
                    print(f"error shown: {message}", file=sys.stderr)
                window.close()
        if args.open_trace:
            return shoot_trace(window, Path(args.open_trace), args)
        pair = replace(demo, backend=args.backend)
        if args.edit:
            pair = replace(pair, draft="", ngram=True)
        if args.suffix:
            pair = replace(pair, draft="", suffix=True)
        if args.target:
            pair = replace(pair, target=args.target, draft="")
        if args.draft:
            pair = replace(pair, draft=args.draft)
        if args.self_skip:
            pair = replace(pair, draft="", self_skip=args.self_skip, self_cost=args.self_cost)
        window.picker.set_pair(pair)
        window.picker.own_mtp.setChecked(args.draft_mtp)
        if args.draft_mtp and not window.picker.own_mtp_chosen():
            print(f"{args.target} has no MTP layers to draft with", file=sys.stderr)
            return 1
        panel = window.decode
        prompt = _edit_tasks()[args.edit] if args.edit else args.prompt
        if args.suffix and args.prompt == PROMPT:
            prompt = SUFFIX_PROMPT
        panel.prompt.setPlainText(prompt)
        panel.chat.setChecked(bool(args.edit) or args.suffix)
        panel.max_new.setValue(args.tokens)
        panel.draft_max.setValue(args.draft_max)
        panel.tree_width.setValue(args.tree_width)
        if args.tree_width > 1 or args.fixed_k:
            panel.adaptive.setChecked(False)  # a chain or tree as deep as --draft-max
        elif args.adaptive:
            panel.adaptive.setChecked(True)
        panel.temperature.setValue(0.0)
        panel.compare.setChecked(True)
        window.resize(args.width, args.height)
        window.move(0, 0)
        window.show()
        try:
            if not wait_until(lambda: not window.picker.checking, 120):
                raise RuntimeError("the pair check did not finish")
            if args.suffix:
                earlier(window, args.earlier_prompt, prompt)
            window.start_run()
            if not wait_until(lambda: not window.running, 900):
                raise RuntimeError("the run did not finish in 15 minutes")
            if errors:
                raise RuntimeError(errors[0])
            tree_step = pick_tree_step(window) if args.tree_width > 1 else None
            step = tree_step if tree_step is not None else pick_rejection_step(window)
            if args.suffix:
                copied = pick_memory_step(window)
                if copied is None:
                    raise RuntimeError("no draft was copied from the earlier run")
                step = copied
            if args.padded:
                padded = pick_padded_step(window)
                if padded is None:
                    raise RuntimeError("no pass was padded in this run")
                step = padded
            if args.ended_on_confidence:
                ended = pick_confidence_step(window)
                if ended is None:
                    raise RuntimeError("no draft ended on its confidence in this run")
                step = ended
            window.select_step(step)
            if tree_step is not None:
                window.inspector.views.setCurrentWidget(window.inspector.tree)
            wait_until(lambda: False, 0.5)
            out = Path(args.out)
            out.parent.mkdir(parents=True, exist_ok=True)
            shots = {out: window, out.with_name(out.stem + "-charts.png"): window.charts,
                     out.with_name(out.stem + "-inspector.png"): window.inspector}
            for path, widget in shots.items():
                if not widget.grab().save(str(path)):
                    raise RuntimeError(f"cannot write {path}")
                print(f"wrote {path}")
            if args.dark:
                window.set_theme("dark")
                window.flush()
                window.select_step(step)
                wait_until(lambda: False, 0.5)
                dark = out.with_name(out.stem + "-dark.png")
                window.grab().save(str(dark))
                print(f"wrote {dark}")
            if args.size:
                shoot_sizes(window, out, args.size)
            print("step shown:", step + 1, "·", window.status_label.text())
            print(window.compare_label.text())
            return 0
        except Exception as exc:  # noqa: BLE001 - reported as the exit status
            print(f"screenshot failed: {exc}", file=sys.stderr)
            return 1
        finally:
            window.close()


if __name__ == "__main__":
    sys.exit(main())
