"""`sweep`, `rank`, `check-exact` and `trace --analysis` on tiny real models, both backends;
and check-exact has power: a deliberately broken verify makes it fail."""

from __future__ import annotations

import json

import pytest

from app.cli.main import main
from tests.helpers import always_accept, greedy_accepts_everything, resample_from_p

SWEEP_ROW_KEYS = {"k", "measured_speedup", "predicted_speedup", "theory_speedup",
                  "acceptance", "tokens_per_pass"}
RANK_ROW_KEYS = {"label", "tok_s", "speedup", "acceptance", "cost_ratio", "best_k", "error"}


@pytest.fixture(params=["llamacpp", "torch"])
def files(request):
    """(target, draft) paths for one backend."""
    return request.getfixturevalue("gguf_files" if request.param == "llamacpp" else "hf_dirs")


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_sweep_json_has_one_row_per_k(files, capsys):
    target, draft = files
    code, out, _ = run_cli(capsys, "sweep", "-m", target, "-md", draft, "-n", 12, "--k", "1,3",
                           "-p", "the cat", "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    assert [r["k"] for r in rows] == [1, 3]
    for row in rows:
        assert SWEEP_ROW_KEYS <= set(row)
        assert row["identical"] is True
        assert 0.0 <= row["acceptance"] <= 1.0 and row["tokens_per_pass"] >= 1.0
        assert row["measured_speedup"] > 0 and row["predicted_speedup"] > 0


def test_sweep_table_and_bad_k(gguf_files, capsys):
    target, draft = gguf_files
    code, out, _ = run_cli(capsys, "sweep", "-m", target, "-md", draft, "-n", 8, "--k", "2",
                           "-p", "the cat")
    assert code == 0 and "measured" in out and "predicted" in out
    code, _, err = run_cli(capsys, "sweep", "-m", target, "-md", draft, "--k", "two")
    assert code != 0 and "like 1,2,4,8" in err


def test_rank_orders_candidates_and_skips_an_incompatible_one(files, gguf_files, hf_dirs,
                                                              capsys):
    target, draft = files
    foreign = hf_dirs[1] if target == gguf_files[0] else gguf_files[1]
    code, out, _ = run_cli(capsys, "rank", "-m", target, "--candidates", draft, foreign,
                           "--ngram", "--self-skip", "1", "--draft-max", 3, "-n", 12, "-p",
                           "the cat sat on the mat. the cat", "--json")
    assert code == 0
    rows = json.loads(out)["rows"]
    # a draft of another vocabulary is ranked once per way of drafting across it
    from app.models.pair_check import check_pair_files

    n_foreign = 2 if check_pair_files(target, foreign).cross is not None else 1
    assert len(rows) == 3 + n_foreign and all(RANK_ROW_KEYS <= set(r) for r in rows)
    ok = [r for r in rows if not r["error"]]
    # the foreign draft (another backend's model) last, with its reason
    assert len(ok) == 3 and all(r["error"] for r in rows[3:])
    assert [r["speedup"] for r in ok] == sorted((r["speedup"] for r in ok), reverse=True)
    assert all(1 <= r["best_k"] <= 3 and r["tok_s"] > 0 for r in ok)


def test_rank_needs_something_to_rank(gguf_files, capsys):
    code, _, err = run_cli(capsys, "rank", "-m", gguf_files[0])
    assert code != 0 and "--candidates" in err and "--self-skip" in err


def test_check_exact_passes_on_a_correct_engine(files, capsys):
    target, draft = files
    code, out, _ = run_cli(capsys, "check-exact", "-m", target, "-md", draft, "--samples", 120,
                           "-n", 16, "--json")
    report = json.loads(out)
    assert report["greedy_identical"] is True and report["p_value"] >= 1e-3
    assert report["passed"] is True and code == 0


def test_check_exact_fails_when_greedy_verify_accepts_everything(hf_dirs, capsys, monkeypatch):
    greedy_accepts_everything(monkeypatch)
    target, draft = hf_dirs
    # in the exact mode, whose suite then runs in this process: the exact child of another
    # mode is a process of its own, where the planted bug is not
    code, out, _ = run_cli(capsys, "check-exact", "-m", target, "-md", draft, "--samples", 40,
                           "-n", 16, "--json", "--exact-kernels")
    report = json.loads(out)
    assert code != 0 and report["passed"] is False
    assert report["greedy_identical"] is False and report["exact_kernels_identical"] is False
    assert report["divergences"] and not any(d["near_tie"] for d in report["divergences"])


def test_check_exact_sampled_test_catches_always_accepting(hf_dirs, capsys, monkeypatch):
    always_accept(monkeypatch)
    target, draft = hf_dirs
    code, out, _ = run_cli(capsys, "check-exact", "-m", target, "-md", draft, "--samples", 200,
                           "--top-k", 5, "-n", 8, "--json")
    report = json.loads(out)
    assert report["greedy_identical"] is True  # greedy does not use u: only sampling sees it
    assert report["p_value"] < 1e-3 and code != 0


def test_check_exact_sampled_test_catches_resampling_from_p(hf_dirs, capsys, monkeypatch):
    # greedy never resamples, so only the sampled test can see this bug: it must
    resample_from_p(monkeypatch)
    target, draft = hf_dirs
    code, out, _ = run_cli(capsys, "check-exact", "-m", target, "-md", draft, "--samples", 300,
                           "--top-k", 5, "-n", 16, "--json")
    report = json.loads(out)
    assert report["greedy_identical"] is True
    assert report["p_value"] < 1e-3 and code != 0


def test_trace_analysis_prints_the_rejection_analysis(gguf_files, capsys, tmp_path):
    target, draft = gguf_files
    trace = tmp_path / "run.jsonl"
    code, _, _ = run_cli(capsys, "run", "-m", target, "-md", draft, "-p", "the cat", "-n", 16,
                         "--temp", "1", "-s", "1", "--trace", trace)
    assert code == 0
    code, out, _ = run_cli(capsys, "trace", trace, "--analysis")
    assert code == 0 and "acceptance by token class" in out and "judged draft tokens" in out


def test_check_exact_refuses_a_pair_that_is_not(tmp_path, hf_dirs, capsys):
    from tests.tiny_hf import write_tiny_hf

    # no character in common: not even drafting across vocabularies can pair them
    other = write_tiny_hf(tmp_path / "other", chars=list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    code, _, err = run_cli(capsys, "check-exact", "-m", hf_dirs[0], "-md", other)
    assert code != 0 and "error:" in err
