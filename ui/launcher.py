"""The `draftlens` command: the desktop app with no subcommand, the headless CLI with one.

It lives in ui/ so that the headless layers never import the window (ui -> app -> backends).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from app.allocator import keep_large_blocks
from app.cli.main import main as cli_main
from app.cli.main import wants_window


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    keep_large_blocks()
    if wants_window(argv):
        from ui.app import main as gui_main

        return gui_main([a for a in argv if a != "--debug"])
    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
