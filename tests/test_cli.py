"""The command line: happy paths on tiny real models, and one clear error per bad input."""

from __future__ import annotations

import json
import shutil

import pytest

from tests.helpers import run_cli
from tests.tiny_gguf import write_tiny_gguf

BENCH_KEYS = {"plain_tok_s", "spec_tok_s", "speedup", "acceptance", "cost_ratio",
              "theory_speedup", "predicted_speedup", "identical"}


def assert_one_line_error(code, err, *needles):
    assert code != 0
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_run_streams_continuation_to_stdout_and_stats_to_stderr(gguf_files, capsys, tmp_path):
    target, draft = gguf_files
    trace = tmp_path / "run.jsonl"
    code, out, err = run_cli(capsys, "run", "-m", str(target), "-md", str(draft), "-p",
                             "the cat", "-n", "12", "--trace", str(trace))
    assert code == 0
    assert "the cat" not in out and out.strip()
    assert "tok/s" in err and "drafted / accepted" in err
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    assert lines[0]["type"] == "header" and lines[-1]["type"] == "summary"
    assert all(line["type"] == "step" for line in lines[1:-1])


def test_ngram_run_with_chat_template(gguf_files, capsys):
    code, out, _ = run_cli(capsys, "run", "-m", str(gguf_files[0]), "--ngram", "--chat",
                           "-p", "hello", "-n", "8")
    assert code == 0


def test_bench_json_has_the_documented_keys(gguf_files, capsys):
    target, draft = gguf_files
    code, out, _ = run_cli(capsys, "bench", "-m", str(target), "-md", str(draft), "-n", "16",
                           "-p", "the cat", "--json", "--exact-kernels")
    assert code == 0
    report = json.loads(out)
    assert BENCH_KEYS <= set(report)
    assert report["identical"] is True
    assert report["divergences"] == [] and report["divergences_near_ties"] is None


def test_bench_gives_each_pair_of_runs_its_own_ratio(gguf_files, capsys):
    target, draft = gguf_files
    code, out, _ = run_cli(capsys, "bench", "-m", str(target), "-md", str(draft), "-n", "12",
                           "-p", "the cat", "-p", "a dog", "--rounds", "2", "--json",
                           "--exact-kernels")
    assert code == 0
    report = json.loads(out)
    ratios = report["pair_speedups"]
    assert len(ratios) == 4 and all(r > 0 for r in ratios)
    # equal tokens per run: the overall ratio is a mean of the pairs' ratios
    assert min(ratios) - 1e-9 <= report["speedup"] <= max(ratios) + 1e-9


def test_models_check_accepts_a_matching_pair(gguf_files, capsys):
    code, out, _ = run_cli(capsys, "models", "check", str(gguf_files[0]), str(gguf_files[1]))
    assert code == 0 and "compatible" in out


def test_trace_summary(gguf_files, capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    run_cli(capsys, "run", "-m", str(gguf_files[0]), "-md", str(gguf_files[1]), "-p", "a",
            "-n", "6", "--trace", str(trace))
    code, out, _ = run_cli(capsys, "trace", str(trace))
    assert code == 0 and "tokens 6" in out


# --- bad input: one line, non-zero exit, nothing half-written ---------------------------

def test_missing_model_file(gguf_files, capsys, tmp_path):
    code, _, err = run_cli(capsys, "run", "-m", str(tmp_path / "nope.gguf"), "--ngram",
                           "-p", "x")
    assert_one_line_error(code, err, "not found", "nope.gguf")


def test_file_that_is_not_gguf(capsys, tmp_path):
    fake = tmp_path / "notes.gguf"
    fake.write_text("just some text, not a model\n" * 10)
    code, _, err = run_cli(capsys, "run", "-m", str(fake), "--ngram", "-p", "x")
    assert_one_line_error(code, err, "notes.gguf")


def test_truncated_gguf(gguf_files, capsys, tmp_path):
    cut = tmp_path / "cut.gguf"
    data = gguf_files[0].read_bytes()
    cut.write_bytes(data[: len(data) * 2 // 3])
    code, _, err = run_cli(capsys, "run", "-m", str(cut), "--ngram", "-p", "x")
    assert_one_line_error(code, err, "cut.gguf")


def test_gguf_that_would_abort_llama_cpp(capsys, tmp_path):
    bad = write_tiny_gguf(tmp_path / "nobytes.gguf", byte_tokens=False)
    code, _, err = run_cli(capsys, "run", "-m", str(bad), "--ngram", "-p", "hello")
    assert_one_line_error(code, err, "byte")


def test_incompatible_pair_names_first_differing_token(hf_dirs, capsys, tmp_path):
    from tests.tiny_hf import write_tiny_hf

    # no character in common: not even drafting across vocabularies can work
    other = write_tiny_hf(tmp_path / "other", chars=list("ABCDEFGHIJKLMNOPQRSTUVWXYZ"))
    code, _, err = run_cli(capsys, "run", "-m", str(hf_dirs[0]), "-md", str(other),
                           "-p", "x")
    assert_one_line_error(code, err, "token", "differs")


def test_pair_of_different_vocabularies_drafts_across_them(gguf_files, capsys, tmp_path):
    # within llama.cpp's 128 tokens of each other, so the first differing token is named;
    # the byte tokens and letters both have are enough to draft across vocabularies
    other = write_tiny_gguf(tmp_path / "other.gguf", words=("alpha", "beta", "gamma"))
    code, out, _ = run_cli(capsys, "models", "check", str(gguf_files[0]), str(other))
    assert code == 0
    assert "token" in out and "differs" in out and "sizes 411 and" in out
    assert "different vocabularies" in out
    code, out, err = run_cli(capsys, "run", "-m", str(gguf_files[0]), "-md", str(other),
                             "-p", "the cat", "-n", "6")
    assert code == 0, err


def test_prompt_longer_than_context(gguf_files, capsys, tmp_path):
    trace = tmp_path / "t.jsonl"
    code, _, err = run_cli(capsys, "run", "-m", str(gguf_files[0]), "--ngram", "-c", "64",
                           "-p", "the cat sat on the mat " * 40, "--trace", str(trace))
    assert_one_line_error(code, err, "prompt", "context")
    assert not trace.exists()


@pytest.mark.parametrize("k", ["0", "-3", "100000"])
def test_draft_length_out_of_range(gguf_files, capsys, k):
    code, _, err = run_cli(capsys, "run", "-m", str(gguf_files[0]), "--ngram", "-p", "x",
                           "--draft-max", k)
    assert_one_line_error(code, err, "draft-max")


def test_negative_temperature(gguf_files, capsys):
    code, _, err = run_cli(capsys, "run", "-m", str(gguf_files[0]), "--ngram", "-p", "x",
                           "--temp", "-0.5")
    assert_one_line_error(code, err, "temperature")


def test_unwritable_trace_path(gguf_files, capsys, tmp_path):
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where a folder should be")
    code, _, err = run_cli(capsys, "run", "-m", str(gguf_files[0]), "--ngram", "-p", "x",
                           "--trace", str(blocked / "run.jsonl"))
    assert_one_line_error(code, err, "trace")


def test_swapped_pair_warns(gguf_files, capsys, tmp_path):
    big_draft = write_tiny_gguf(tmp_path / "big.gguf", hidden=64, n_layer=3)
    small_target = tmp_path / "small.gguf"
    shutil.copy(gguf_files[0], small_target)
    code, _, err = run_cli(capsys, "models", "check", str(small_target), str(big_draft))
    assert code == 0 and "swap" in err


def test_bench_compare_hf_times_draftlens_with_prefill_as_generate_is_timed(hf_dirs, capsys):
    target, draft = hf_dirs
    code, out, _ = run_cli(capsys, "bench", "-m", str(target), "-md", str(draft), "-n", "12",
                           "-p", "the cat", "--backend", "torch", "--compare-hf", "--json")
    assert code == 0
    report = json.loads(out)
    for run in ("plain", "spec"):
        # the same tokens over decoding plus prefill: a lower rate than over decoding alone
        assert 0 < report[f"{run}_tok_s_with_prefill"] < report[f"{run}_tok_s"]
    assert report["hf_assisted_tok_s"] > 0 and report["hf_identical"] is True
