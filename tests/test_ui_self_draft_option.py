"""Choosing self-speculation in the window (pytest-qt, offscreen, real widgets, a tiny real
GGUF): the pair picker builds the same drafter choice as the command line for the same
inputs, needs no draft model and says why its row is off, refuses a skip set that cannot run
with the problem and its fix (the command line's own words, from the one reader of a set),
and a live self-drafted run says what its search of layers is doing, then shows the layers
it skipped with their figures while the run is still going."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import QObject, Slot  # noqa: E402

from app.cli.main import build_parser  # noqa: E402
from app.cli.options import drafter_choice  # noqa: E402
from app.engine.drafters.self_skip import SkipChoice  # noqa: E402
from app.engine.trace import read_trace  # noqa: E402
from app.settings import RecentPair  # noqa: E402
from tests.helpers import RUN_TIMEOUT_MS, run, run_cli, set_decoding  # noqa: E402
from ui.pair_picker import PairPicker  # noqa: E402

N_LAYERS = 6


@pytest.fixture(scope="module")
def deep_gguf(tmp_path_factory):
    from tests.tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("ui-self-option") / "deep.gguf", seed=5,
                           n_layer=N_LAYERS)


@pytest.fixture
def picker(qtbot, deep_gguf):
    widget = PairPicker()
    qtbot.addWidget(widget)
    widget.show()
    widget.set_pair(RecentPair(str(deep_gguf), backend="llamacpp", device="cpu"))
    return widget


def choose_self(picker, skip: str, cost: float | None = None) -> None:
    option = picker.self_draft
    option.box.setChecked(True)
    option.skip.setText(skip)
    if cost is not None:
        option.cost.setValue(cost)


@pytest.mark.parametrize(("skip", "cost", "flags"), [
    ("auto", 0.6, ["--self-skip", "auto", "--self-cost", "0.6"]),
    ("auto", None, ["--spec-type", "self", "--self-skip", "auto"]),
    ("2-3", None, ["--self-skip", "2-3"]),
    ("1,3-4", None, ["--spec-type", "self", "--self-skip", "1,3-4"]),
])
def test_the_picker_builds_the_choice_the_command_line_builds(picker, deep_gguf, skip, cost,
                                                              flags):
    choose_self(picker, skip, cost)
    cli = drafter_choice(build_parser().parse_args(
        ["run", "-m", str(deep_gguf), *flags, "-p", "x"]))
    assert picker.drafter_choice() == cli
    # no draft model: its row is off and the verdict says why; the pair may run
    assert not picker.draft.isEnabled() and picker.model_spec().draft is None
    assert "no draft model is needed, so the draft model row is off" in picker.verdict.text()
    assert picker.blocking_reason() == ""
    # remembered as a recent pair, and chosen again from it
    pair = picker.current_pair()
    assert pair.self_skip == skip and "self-draft" in pair.label
    picker.set_pair(RecentPair(str(deep_gguf)))
    assert not picker.self_draft.chosen() and picker.draft.isEnabled()
    picker.set_pair(pair)
    assert picker.drafter_choice() == cli


def test_one_draft_at_a_time(picker):
    choose_self(picker, "auto")
    picker.ngram.setChecked(True)
    assert not picker.self_draft.chosen() and picker.drafter_choice().names == ("ngram",)
    assert not picker.self_draft.details.isVisible()
    picker.self_draft.box.setChecked(True)
    assert not picker.ngram.isChecked() and picker.drafter_choice().names == ("self",)
    assert picker.self_draft.details.isVisible() and picker.self_draft.cost.isEnabled()
    picker.self_draft.skip.setText("2-3")  # the cost limit is for auto only
    assert not picker.self_draft.cost.isEnabled()


@pytest.mark.parametrize(("skip", "problem"), [
    ("six", "layers to skip are 0-based layer ranges like 6-11,15-20, or auto (got 'six')"),
    ("4-2", "the range 4-2 runs backwards — write 2-4"),
    ("0-2", "cannot skip layer 0"),
    ("2-9", f"layer 9 is not in the target, which has {N_LAYERS} layers (0 to 5) — name "
            "layers up to 5"),
])
def test_a_bad_skip_set_is_refused_as_typed_with_the_problem_and_its_fix(
        picker, deep_gguf, capsys, skip, problem):
    choose_self(picker, skip)
    option = picker.self_draft
    assert problem in option.note.text() and option.note.isVisible()
    assert problem in picker.blocking_reason() and problem in picker.verdict.text()
    # the command line refuses the same set in the same words (one reader of a set)
    code, _, err = run_cli(capsys, "run", "-m", str(deep_gguf), "--self-skip", skip, "-p", "x",
                           "-n", "4")
    assert code == 1 and problem in err
    option.skip.setText("2-3")  # mended: the note explains, Run may go
    assert picker.blocking_reason() == "" and "Skips 2 of 6 layers (2-3)" in option.note.text()


def test_the_window_will_not_run_a_bad_set(window, deep_gguf):
    window.picker.set_pair(RecentPair(str(deep_gguf), backend="llamacpp", device="cpu"))
    choose_self(window.picker, "3-1")
    assert not window.act_run.isEnabled()
    assert "runs backwards" in window.act_run.toolTip()
    window.picker.self_draft.skip.setText("1-3")
    assert window.act_run.isEnabled()


class StatusListener(QObject):
    """On the UI thread, after the window's own slot: each report the worker forwarded
    ("message|done|total|unit") and the status line it left."""

    def __init__(self, window) -> None:
        super().__init__(window)
        self.window = window
        self.said: list[str] = []

    @Slot(str, int, int, str)
    def heard(self, message: str, done: int, total: int, unit: str) -> None:
        self.said += [f"{message}|{done}|{total}|{unit}", self.window.status_label.text()]


def test_a_live_self_drafted_run_says_what_its_search_does_then_shows_the_layers_it_skipped(
        window, qtbot, deep_gguf, dialogs):
    window.picker.set_pair(RecentPair(str(deep_gguf), backend="llamacpp", device="cpu"))
    choose_self(window.picker, "auto", 0.7)
    set_decoding(window, tokens=24, k=3, prompt="def add(a, b):\n    return a + b\n")
    listener = StatusListener(window)
    window.run_control.worker.preparing.connect(listener.heard)
    said = listener.said
    with qtbot.waitSignal(window.paused, timeout=RUN_TIMEOUT_MS):
        window.start_run(step_mode=True)  # the run pauses before its first step
    # while the search went, the status line said what it was doing, with its figures
    searching = [s for s in said if s.startswith("choosing layers to skip:") and "|" in s]
    assert searching, said
    counts = [tuple(int(n) for n in s.split("|")[1:3]) for s in searching]
    assert counts[0][0] == 1 and [done for done, _ in counts] == sorted(d for d, _ in counts)
    assert counts[0][1] >= N_LAYERS - 1  # the first round scores every layer but layer 0
    # the tiny target's blocks are of one size: the total is known from the first report
    assert len({total for _, total in counts}) == 1 and counts[-1][0] == counts[-1][1]
    assert all("best agreement 0." in s or "best agreement 1." in s for s in searching)
    total = counts[0][1]
    assert any(s.startswith("choosing layers to skip:") and f" of {total} sets" in s
               for s in said if "|" not in s)  # the status line, with the count
    # the run is live (paused at its first step): the note names the layers it skips
    assert window.run_control.running
    note = window.why.self_draft
    qtbot.waitUntil(lambda: note.isVisibleTo(window), timeout=5_000)
    figures = SkipChoice.from_dict(window.run.header.settings["self_skip"])
    assert figures.how == "searched" and figures.cost <= 0.7
    assert f"skipping layers {figures.skip}" in note.text()
    assert "chosen by search down to an estimated cost of 0.7" in note.text()
    assert f"agreement with the target: {figures.agreement:.2f}" in note.text()
    with qtbot.waitSignal(window.run_done, timeout=RUN_TIMEOUT_MS):
        window.start_run()  # go on without pausing
    window.flush()
    assert dialogs == []
    assert window.run.stats.judged > 0  # the self-draft drafted and was judged
    trace = read_trace(window.run_control.trace_path)
    assert SkipChoice.from_dict(trace.header.settings["self_skip"]) == figures


def test_a_set_given_by_hand_runs_live_and_is_named_as_given(window, qtbot, deep_gguf,
                                                             dialogs):
    window.picker.set_pair(RecentPair(str(deep_gguf), backend="llamacpp", device="cpu"))
    choose_self(window.picker, "2-3")
    set_decoding(window, tokens=16, k=3, prompt="the cat")
    run(window, qtbot)
    window.why.refresh()
    assert dialogs == []
    note = window.why.self_draft.text()
    assert "skipping layers 2-3 (4 of 6 kept)" in note and "given by hand" in note
    assert window.run.header.draft == "self-draft (skips layers 2-3)"


@pytest.mark.parametrize("skip", ["auto", "2-9"])
def test_the_option_and_its_note_fit_a_1366x768_screen(qtbot, tmp_path, deep_gguf, dialogs,
                                                      skip):
    from PySide6.QtCore import QRect

    from app.settings import Settings
    from tests.helpers import cut_off
    from ui.main_window import DEFAULT_SIZE, MainWindow

    window = MainWindow(Settings(), save_path=tmp_path / "settings.json")
    qtbot.addWidget(window)
    window.show_workspace()
    window.picker.set_pair(RecentPair(str(deep_gguf), backend="llamacpp", device="cpu"))
    choose_self(window.picker, skip)
    window.fit_to_screen(DEFAULT_SIZE, QRect(0, 0, 1366, 768))
    window.show()
    qtbot.waitExposed(window)
    qtbot.wait(50)  # word-wrapped labels take a second pass
    assert window.picker.self_draft.note.isVisible()
    assert cut_off(window, window) == []
    window.close()
