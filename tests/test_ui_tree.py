"""A tree run in the real window: the inspector draws the selected step as a tree, node by
node, with the accepted path; clicking a node selects its row; a saved trace keeps the tree."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from PySide6.QtCore import Qt  # noqa: E402

from app.engine.trace import read_trace  # noqa: E402
from tests.helpers import choose_pair, run, set_decoding  # noqa: E402
from ui.tree_view import END, ROOT, accepted_path, layout  # noqa: E402


@pytest.fixture
def tree_run(window, qtbot, gguf_files, dialogs):
    choose_pair(window, qtbot, *gguf_files, backend="llamacpp")
    set_decoding(window, tokens=30, k=3)
    window.decode.tree_width.setValue(3)
    window.decode.tree_nodes.setValue(9)
    run(window, qtbot)
    assert dialogs == []
    return window


def tree_steps(win):
    return [i for i, s in enumerate(win.run.steps) if s.is_tree]


def test_the_inspector_draws_a_tree_step_node_by_node(tree_run, qtbot):
    inspector = tree_run.inspector
    index = tree_steps(tree_run)[0]
    inspector.show_step(index)
    step = inspector.steps[index]
    assert inspector.views.currentWidget() is inspector.tree
    assert sorted(inspector.tree.boxes) == list(range(len(step.tokens)))
    places = layout(step)
    assert {p.node for p in places} >= {ROOT, *range(len(step.tokens))}
    # no two nodes share a place, and every node sits one column right of its parent
    assert len({(p.column, p.row) for p in places}) == len(places)
    column = {p.node: p.column for p in places}
    for i, t in enumerate(step.tokens):
        assert column[i] == column[t.parent if t.parent is not None else ROOT] + 1
    if step.origins[-1] != "accepted":
        path = accepted_path(step)
        assert column[END] == (column[path[-1]] if path else 0) + 1


def test_clicking_a_node_selects_its_row(tree_run, qtbot):
    inspector = tree_run.inspector
    index = tree_steps(tree_run)[0]
    inspector.show_step(index)
    view = inspector.tree
    last = max(view.boxes)
    box = view.boxes[last]
    point = view.mapFromScene(box.sceneBoundingRect().center())
    qtbot.mouseClick(view.viewport(), Qt.MouseButton.LeftButton, pos=point)
    assert inspector.table.selectionModel().selectedRows()[0].row() == last
    assert inspector.tree.selected == last


def test_a_saved_tree_trace_reopens_with_the_same_tree(tree_run, tmp_path):
    path = tmp_path / "tree.jsonl"
    tree_run.save_trace(path)
    trace = read_trace(path)
    original = tree_run.run.steps
    assert [[(t.parent, t.depth, t.accepted) for t in s.tokens] for s in trace.steps] == [
        [(t.parent, t.depth, t.accepted) for t in s.tokens] for s in original
    ]
    assert trace.header.settings["tree_width"] == 3
