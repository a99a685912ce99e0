"""The CLI on a console whose encoding lacks characters it prints (a Windows cp1252 pipe)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_help_on_an_ascii_pipe_prints_instead_of_failing():
    env = dict(os.environ, PYTHONIOENCODING="ascii", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, "-m", "app.cli.main", "check-exact", "--help"],
                         cwd=ROOT, env=env, capture_output=True)
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-500:]
    assert b"check-exact" in out.stdout and b"UnicodeEncodeError" not in out.stderr
    assert b"?" in out.stdout  # the dashes it could not encode
