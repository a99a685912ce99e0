"""Screenshots of the window's "why" views on the demo pair, for the README:

    xvfb-run -s "-screen 0 1500x940x24" .venv/bin/python packaging/research/screenshot_why.py \
        --out assets/why.png

Starts the real window at its default size, loads the demo pair with the first-run defaults
(adaptive k), runs a code prompt, then writes `<out>-cost.png` (the cost view and its verdict),
`<out>-charts.png` (the speedup chart with the cost model), `<out>-rejections.png`, and runs the
draft-length sweep from the window and writes `<out>-sweep.png`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PROMPT = "def fibonacci(n):\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "assets" / "why.png"))
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--sweep-tokens", type=int, default=32)
    parser.add_argument("--ks", default="1,2,4")
    args = parser.parse_args(argv)
    from app.models.demo import demo_installed
    from app.settings import Settings
    from ui.app import make_application, wait_until
    from ui.main_window import MainWindow, demo_pair

    if not demo_installed():
        print("the demo pair is not installed — run: draftlens models fetch-demo", file=sys.stderr)
        return 1
    make_application()
    errors: list[str] = []
    with tempfile.TemporaryDirectory(prefix="draftlens-shot-") as tmp:
        window = MainWindow(Settings(), save_path=Path(tmp) / "settings.json")
        window.dialogs = False
        window.trace_folder = Path(tmp) / "traces"
        window.error_shown.connect(errors.append)
        window.set_theme("light")
        window.show_workspace()
        window.picker.set_pair(demo_pair())
        window.decode.prompt.setPlainText(PROMPT)
        window.decode.max_new.setValue(args.tokens)
        window.decode.compare.setChecked(True)
        window.move(0, 0)
        window.show()
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)

        def shot(suffix: str, widget: object) -> None:
            path = out.with_name(f"{out.stem}-{suffix}.png")
            wait_until(lambda: False, 0.5)
            if not widget.grab().save(str(path)):  # type: ignore[attr-defined]
                raise RuntimeError(f"cannot write {path}")
            print(f"wrote {path}")

        try:
            if not wait_until(lambda: not window.picker.checking, 120):
                raise RuntimeError("the pair check did not finish")
            window.start_run()
            if not wait_until(lambda: not window.running, 1800):
                raise RuntimeError("the run did not finish in 30 minutes")
            if errors:
                raise RuntimeError(errors[0])
            window.flush(force=True)
            why = window.why
            why.refresh()
            shot("window", window)
            why.tabs.setCurrentWidget(why.cost)
            shot("cost", window)
            why.tabs.setCurrentWidget(why.rejections)
            why.refresh()
            shot("rejections", why)
            why.tabs.setCurrentWidget(why.experiments)
            window.decode.max_new.setValue(args.sweep_tokens)
            why.experiments.ks.setText(args.ks)
            why.experiments.start_sweep()
            if not wait_until(lambda: not why.experiments.busy_with, 3600):
                raise RuntimeError("the sweep did not finish in an hour")
            if errors:
                raise RuntimeError(errors[0])
            shot("sweep", window)
            print(why.verdict.text())
            print(why.experiments.status.text())
            for row in why.experiments.sweep_rows:
                print(row.to_dict())
            return 0
        except Exception as exc:  # noqa: BLE001 - reported as the exit status
            print(f"screenshot failed: {exc}", file=sys.stderr)
            return 1
        finally:
            window.close()


if __name__ == "__main__":
    sys.exit(main())
