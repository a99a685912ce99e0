"""The window's redraw rules during a run: axes that grow in steps, and wait_until sleeping in
Qt's event loop."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from ui.charts import LIVE_FILL, LIVE_HEADROOM, _held_span  # noqa: E402


@pytest.mark.parametrize("needed", [LIVE_FILL * 10, 7.5, 10.0])
def test_a_live_axis_keeps_its_span_while_the_data_fills_most_of_it(needed):
    assert _held_span(10.0, needed) == 10.0


@pytest.mark.parametrize("needed", [10.5, 30.0, LIVE_FILL * 10 - 0.1, 1.0])
def test_a_live_axis_outgrown_or_mostly_empty_gets_headroom_over_the_data(needed):
    assert _held_span(10.0, needed) == pytest.approx(needed * LIVE_HEADROOM)


def test_a_steadily_growing_axis_changes_range_a_few_times_not_every_redraw():
    span, changes = 1.0, 0
    for seconds in range(1, 121):  # a two-minute run, one redraw a second
        held = _held_span(span, float(seconds))
        changes += held != span
        span = held
    assert changes <= 12


def test_wait_until_returns_when_the_condition_holds_and_on_timeout(qtbot):
    from PySide6.QtCore import QTimer

    from ui.app import wait_until

    flag = []
    QTimer.singleShot(50, lambda: flag.append(1))
    assert wait_until(lambda: bool(flag), 5.0) is True
    assert wait_until(lambda: False, 0.1) is False
    assert wait_until(lambda: True, 0.0) is True
