"""check-exact judges the user's own settings first: where they drafted no token in the greedy
suite, it says "not checked" and exits 4, whatever the tree and adaptive-k settings it adds
showed; a failure found besides is still listed, and exits 3."""

from __future__ import annotations

import json

from app.analysis.exact_mode import child_command
from app.analysis.exact_report import ExactReport, GreedySuite
from app.analysis.exactness import GREEDY_PROMPTS
from app.cli.analysis import EXIT_NOT_CHECKED, EXIT_NOT_EXACT, exit_code
from app.cli.main import build_parser, main
from app.engine.decode_config import DecodeConfig, DrafterChoice
from app.models.loading import ModelSpec


def suite(mode: str, yours: int, identical: bool = True) -> GreedySuite:
    settings = {"your settings": [yours, yours // 2], "tree width 2": [30, 12],
                "adaptive k": [8, 3]}
    divergence = {"prompt": "the cat", "setting": "tree width 2", "position": 3,
                  "plain_text": " sat", "other_text": " ran", "near_tie": False}
    return GreedySuite(mode=mode, identical=identical, prompts=4, settings=settings,
                       drafted=sum(d for d, _ in settings.values()),
                       accepted=sum(a for _, a in settings.values()),
                       divergences=[] if identical else [divergence])


def report(yours: int, exact_identical: bool = True) -> ExactReport:
    return ExactReport(greedy=suite("fast kernels", yours),
                       exact=suite("exact kernels on the CPU", yours, exact_identical),
                       p_value=0.6, p_first=0.3, p_second=0.5, samples=100, temperature=1.0,
                       top_k=20, draft_max=4, sampled_drafted=40, sampled_accepted=20)


def test_your_settings_that_drafted_nothing_are_not_checked_whatever_the_added_ones_showed():
    idle = report(yours=0)  # the tree and adaptive k drafted, identical in both modes
    assert idle.failures() == [] and not idle.checked and not idle.passed
    assert idle.verdict().startswith("not checked: your settings drafted no token on the "
                                     "greedy suite's 4 prompt(s) in the fast kernels mode")
    assert "PASS" not in idle.verdict() and exit_code(idle) == EXIT_NOT_CHECKED == 4
    data = idle.to_dict()
    assert data["passed"] is False and data["checked"] is False and data["not_checked"]
    # the same report with the user's settings drafting passes
    assert report(yours=12).passed and exit_code(report(yours=12)) == 0


def test_a_failure_found_besides_is_named_and_exits_3():
    broken = report(yours=0, exact_identical=False)
    assert broken.verdict().startswith("not checked: your settings drafted no token")
    assert "besides, FAIL: with exact kernels on the CPU speculative output differs" in (
        broken.verdict())
    assert exit_code(broken) == EXIT_NOT_EXACT == 3


def test_check_exact_says_not_checked_when_your_settings_draft_nothing(gguf_files, capsys):
    """A draft that must be 99% sure of every token drafts nothing on the tiny pair."""
    target, draft = gguf_files
    code = main(["check-exact", "-m", str(target), "-md", str(draft), "--draft-p-min", "0.99",
                 "-n", "12", "--samples", "20", "-p", "the quick brown fox", "--json"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["settings"]["your settings"][0] == 0
    assert out["verdict"].startswith("not checked: your settings drafted no token on the "
                                     "greedy suite's 1 prompt(s)")
    assert out["passed"] is False and out["failures"] == [] and code == 4


def test_your_prompts_reach_the_exact_mode_child():
    prompts = ["-x = 1\n", "the cat"]
    command = child_command(ModelSpec(target="t.gguf"), DecodeConfig(
        drafter=DrafterChoice(("ngram",))), prompts)
    args = build_parser().parse_args(command[command.index("check-exact"):])
    assert args.prompt == prompts and args.greedy_only
    default = child_command(ModelSpec(target="t.gguf"), DecodeConfig(
        drafter=DrafterChoice(("ngram",))))
    assert build_parser().parse_args(default[default.index("check-exact"):]).prompt is None
    assert len(GREEDY_PROMPTS) == 4
