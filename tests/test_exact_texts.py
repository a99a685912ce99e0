"""Sentences that promised what the code no longer does: the --adaptive help (the confidence
stop weighs every longer draft, not one more token) and the window's near-tie verdict (the
exact kernels give identical text with every layer on the CPU only)."""

from __future__ import annotations

import pytest

from app.analysis.divergence import Divergence
from app.cli.main import build_parser
from ui.run_data import CompareResult


def test_the_adaptive_help_says_what_the_confidence_stop_weighs(capsys):
    for command in ("run", "bench", "check-exact"):
        with pytest.raises(SystemExit):
            build_parser().parse_args([command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "one more token would not pay" not in text
        assert ("a draft model's draft (up to --draft-max) ends where its own confidence says "
                "no longer draft would pay for its time") in text

def test_a_near_tie_verdict_says_where_the_exact_kernels_hold():
    near_tie = Divergence(3, 17, 42, " cat", " dog", 0.001, 0.0, 2.5e-4, 0.0, True,
                          gap_moved=0.001, noise_bound=0.002, reason="within the kernel noise")
    text = CompareResult(10.0, 8.0, identical=False, greedy=True, speculative_tokens=20,
                         plain_tokens=20, divergence=near_tie).describe()
    assert "--exact-kernels gives identical text (llama.cpp: with every layer on the CPU, " \
           "where its batch-invariant kernels hold)" in text
