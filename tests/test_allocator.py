import sys

import pytest

from app.allocator import keep_large_blocks


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_large_blocks_are_kept_on_linux():
    assert keep_large_blocks() is True


def test_the_launcher_keeps_large_blocks(monkeypatch):
    import ui.launcher

    calls = []
    monkeypatch.setattr(ui.launcher, "keep_large_blocks", lambda: calls.append(1))
    monkeypatch.setattr(ui.launcher, "cli_main", lambda argv: 0)
    monkeypatch.setattr(ui.launcher, "wants_window", lambda argv: False)
    assert ui.launcher.main(["models", "list"]) == 0 and calls == [1]
