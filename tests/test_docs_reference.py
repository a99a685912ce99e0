"""The README and the docs read as a reference: no issue numbers, and benchmarks.md has no
dated session headings (the dated record lives in docs/benchmarks-history.md)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ISSUE_NUMBER = re.compile(r"(?<![\w/&#])#\d{1,3}\b")
DATED_HEADING = re.compile(r"^#+ .*\b20\d\d-\d\d-\d\d", re.MULTILINE)


def reference_pages() -> list[Path]:
    return [ROOT / "README.md"] + sorted(
        p for p in (ROOT / "docs").glob("*.md") if p.name != "benchmarks-history.md")


def test_no_page_names_an_issue_number():
    found = [f"{page.name}:{n}: {line.strip()}" for page in reference_pages()
             for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
             if ISSUE_NUMBER.search(line)]
    assert not found, found


def test_the_benchmarks_page_has_no_dated_session_headings():
    text = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert not DATED_HEADING.findall(text)


def test_the_checks_see_what_they_look_for():
    assert ISSUE_NUMBER.search("Measured for #55 on the EPYC")
    assert not ISSUE_NUMBER.search("see README.md#set-up or &#39;")
    assert DATED_HEADING.findall("## Session of 2026-11-28\n")
