"""The window on a self-drafted run (pytest-qt, offscreen, real widgets): a trace of a real
run of a tiny GGUF drafting for itself with layers skipped, opened in the window, says which
layers the draft skipped and its agreement with the target (the figures the layers were
chosen by, from the trace header), and shows acceptance by position and the cost view as for
any draft."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from app.engine.drafters.self_skip import SkipChoice  # noqa: E402
from app.engine.trace import read_trace  # noqa: E402
from tests.helpers import run_cli  # noqa: E402


@pytest.fixture(scope="module")
def deep_gguf(tmp_path_factory):
    from tests.tiny_gguf import write_tiny_gguf

    return write_tiny_gguf(tmp_path_factory.mktemp("ui-skip") / "deep.gguf", seed=5,
                           n_layer=6)


def test_the_window_says_which_layers_the_self_draft_skipped(deep_gguf, window, capsys,
                                                            tmp_path, dialogs):
    trace = tmp_path / "self.jsonl"
    code, _, err = run_cli(capsys, "run", "-m", str(deep_gguf), "--self-skip", "2-3",
                           "--adaptive", "--draft-max", "3", "-p", "def add(a, b):\n    return",
                           "-n", "24", "--trace", str(trace))
    assert code == 0, err
    figures = SkipChoice.from_dict(read_trace(trace).header.settings["self_skip"])
    assert figures.skip == "2-3" and figures.measured_cost is not None

    window.open_trace(trace)
    note = window.why.self_draft
    assert dialogs == [] and note.isVisibleTo(window)
    text = note.text()
    assert "skipping layers 2-3 (4 of 6 kept)" in text and "given by hand" in text
    assert f"agreement with the target: {figures.agreement:.2f} of {figures.positions}" in text
    assert f"costs {figures.measured_cost:.2f} target steps (measured" in text
    # acceptance by position and the cost view, as for any draft
    assert window.run.stats.judged > 0
    by_position = window.run.stats.acceptance_by_position
    assert 0 < len(by_position) <= 3 and window.charts.point_counts()["by_position"] == len(
        by_position)
    costs = window.why.cost.costs
    assert window.why.cost.view_data is not None and costs is not None
    assert costs.t_draft > 0 and costs.t_plain > 0  # a draft token priced beside a step


def test_the_note_is_gone_for_a_run_that_did_not_self_draft(deep_gguf, window, capsys,
                                                             tmp_path):
    with_self, lookup = tmp_path / "self.jsonl", tmp_path / "ngram.jsonl"
    for path, flags in ((with_self, ("--self-skip", "2-3")), (lookup, ("--ngram",))):
        code, _, err = run_cli(capsys, "run", "-m", str(deep_gguf), *flags, "-p", "x",
                               "-n", "8", "--trace", str(path))
        assert code == 0, err
    window.open_trace(with_self)
    assert window.why.self_draft.isVisibleTo(window)
    window.open_trace(lookup)
    assert not window.why.self_draft.isVisibleTo(window)
    assert window.why.self_draft.text() == ""
