"""check-exact in two modes: the user's (fast kernels) with each divergence judged against the
measured kernel noise, and batch-invariant kernels in a child process, where output must be
bit-identical. A verify pass that errs only at near-ties passes the first judgement and must
fail the check through the second."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import pytest

import app.analysis.exactness as exactness
from app.analysis.exact_mode import decode_flags, spec_flags
from app.analysis.kernel_noise import KernelNoise
from app.cli.main import build_parser, main
from app.cli.options import decode_config, drafter_choice, model_spec
from app.engine.decode_config import DrafterChoice, DrafterOptions, SuffixOptions
from app.engine.drafters.registry import DRAFTERS
from app.models.loading import ModelSpec
from app.runs import build_session as real_build_session
from tests.planted_bugs import plant, plant_in_children

KEYS = {"passed", "greedy_identical", "exact_kernels_identical", "divergences", "p_value",
        "drafted", "accepted", "sampled_modes"}
NEAR_TIE = 0.5  # logits: the planted pass flips the target's top two when closer than this


def run_check(capsys, *argv):
    code = main(["check-exact", *map(str, argv), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out.strip().splitlines()[-1]), err


def test_check_exact_on_fast_kernels_also_runs_the_exact_kernels(gguf_files, capsys):
    target, draft = gguf_files
    code, report, _ = run_check(capsys, "-m", target, "-md", draft, "--samples", 100, "-n", 16)
    assert KEYS <= set(report)
    assert report["mode"] == "fast kernels"
    assert report["exact_mode"] == "exact kernels on the CPU"
    assert report["exact_kernels_identical"] is True
    assert report["batched_bound"] == report["batched_ceiling"] == 0.0
    assert report["exact_drafted"] > 0 and report["sampled_drafted"] > 0
    assert all(d["near_tie"] for d in report["divergences"])
    assert report["drafted"] > 0
    assert f"fast kernels greedy {report['drafted']} drafted" in report["verdict"]
    assert len(report["sampled_modes"]) == 2 and all(0 < m <= 1 for m in report["sampled_modes"])
    assert report["passed"] is True and code == 0
    assert report["verdict"].startswith("PASS")


def test_a_verify_pass_wrong_only_at_near_ties_fails_through_the_exact_kernels(
        gguf_files, capsys, monkeypatch, tmp_path):
    # kernels as noisy as the planted error: in the user's mode its flips look like noise
    monkeypatch.setattr(exactness, "cached_kernel_noise",
                        lambda model: KernelNoise(bound=2 * NEAR_TIE, positions=1,
                                                  chain_bound=2 * NEAR_TIE))
    monkeypatch.setattr(exactness, "noise_ceiling", lambda model: 4 * NEAR_TIE)
    plant(monkeypatch, NEAR_TIE)
    plant_in_children(tmp_path / "planted", monkeypatch, NEAR_TIE)
    target, draft = gguf_files
    code, report, _ = run_check(capsys, "-m", target, "-md", draft, "--samples", 60, "-n", 24)
    assert report["divergences"], "the planted error never fired: raise NEAR_TIE"
    assert all(d["near_tie"] for d in report["divergences"])  # invisible to the noise judgement
    assert report["exact_kernels_identical"] is False  # the exact run is what catches it
    assert report["passed"] is False and code == 3
    assert any("algorithm is wrong" in reason for reason in report["failures"])


def test_a_divergence_beyond_the_noise_fails_even_when_the_exact_run_is_identical(
        gguf_files, capsys, monkeypatch):
    # the same flips, judged against kernels measured as quiet: not near-ties, so it fails
    monkeypatch.setattr(exactness, "cached_kernel_noise",
                        lambda model: KernelNoise(bound=1e-6, positions=1, chain_bound=1e-6))
    plant(monkeypatch, NEAR_TIE)
    target, draft = gguf_files
    code, report, _ = run_check(capsys, "-m", target, "-md", draft, "--samples", 60, "-n", 24)
    assert report["divergences"] and not any(d["near_tie"] for d in report["divergences"])
    assert report["exact_kernels_identical"] is True  # the child has no planted bug
    assert report["passed"] is False and code == 3
    assert any("not a near-tie" in reason for reason in report["failures"])


def draws(names: str, **options: object) -> DrafterChoice:
    return DrafterChoice(tuple(names.split(",")), DrafterOptions(**options))


CHILD_RUNS = {
    "draft-rpc": (ModelSpec(target="t.gguf", draft="d.gguf", n_threads=2, rpc="127.0.0.1:5"),
                  draws("draft")),
    "hybrid": (ModelSpec(target="t.gguf", draft="d.gguf", n_gpu_layers=3, n_ctx=512),
               draws("ngram,draft")),
    "self-draft": (ModelSpec(target="t.gguf", mmap=False, self_skips=("2-5",), self_head=300),
                   draws("self", skip="2-5", skip_cost=0.5)),
    "heads": (ModelSpec(target="t.gguf"), draws("heads", heads="h.safetensors")),
    "suffix": (ModelSpec(target="t.gguf"), draws("suffix", memory="m.json", suffix=SuffixOptions(
        factor=2.0, offset=1.0, min_prob=0.3))),
    "suffix,draft": (ModelSpec(target="t.gguf", draft="d.gguf"), draws("suffix,draft")),
    "mtp": (ModelSpec(target="t.gguf", with_mtp=True), draws("mtp")),
    "cross-vocab": (ModelSpec(target="t.gguf", draft="other.gguf"),
                    draws("draft", cross_vocab="string")),
    "torch": (ModelSpec(target="hf", draft="hf-draft", backend="torch", device="cpu",
                        trust_remote_code=True, allow_pickle=True), draws("draft")),
}


def test_every_setting_of_a_pair_is_in_a_child_spec_case():
    """A setting added to ModelSpec or to the drafters' options must be added to the case
    list below, or the exact-kernels child may load a different pair, or draft otherwise,
    without any test noticing."""
    default, no_options = ModelSpec(target="t.gguf"), DrafterOptions()
    covered = {f.name for spec, _ in CHILD_RUNS.values() for f in fields(spec)
               if getattr(spec, f.name) != getattr(default, f.name)}
    assert {f.name for f in fields(ModelSpec)} - covered == {"batch_invariant"}
    covered = {f.name for _, choice in CHILD_RUNS.values() for f in fields(DrafterOptions)
               if getattr(choice.options, f.name) != getattr(no_options, f.name)}
    assert {f.name for f in fields(DrafterOptions)} == covered
    assert {n for _, choice in CHILD_RUNS.values() for n in choice.names} == set(DRAFTERS)


@pytest.mark.parametrize("run", CHILD_RUNS.values(), ids=CHILD_RUNS.keys())
def test_the_exact_kernels_child_loads_the_same_pair(run):
    """Every setting of the pair and of what drafts reaches the child, which differs only in
    its kernels (and, for llama.cpp, runs on the CPU, where its batch-invariant kernels
    hold)."""
    spec, choice = run
    args = build_parser().parse_args(["check-exact", *spec_flags(spec, choice)])
    assert drafter_choice(args) == choice
    expected = replace(spec, batch_invariant=True, backend=spec.resolved_backend())
    if expected.backend == "llamacpp":
        expected = replace(expected, device="cpu", n_gpu_layers=0, rpc="")
    assert model_spec(args, choice) == expected


def test_the_child_runs_the_users_decode_settings():
    config = decode_config(build_parser().parse_args(
        ["check-exact", "-m", "t.gguf", "--ngram", "-n", "20", "--draft-max", "6",
         "--draft-min", "1", "--draft-p-min", "0.25", "--tree-width", "3", "--tree-nodes", "9",
         "--draft-p-split", "0.2", "--adaptive"]))
    args = build_parser().parse_args(["check-exact", "-m", "t.gguf", "--ngram",
                                      *decode_flags(config)])
    assert decode_config(args) == config


def test_a_greedy_suite_that_drafted_nothing_does_not_pass(gguf_files, capsys, monkeypatch):
    """Identity of runs that never drafted shows nothing; the check must not pass on it: it
    says the user's settings were not checked (exit 4)."""
    monkeypatch.setattr(exactness, "build_session",
                        lambda pair, config, plain: real_build_session(pair, config, plain=True))
    target, draft = gguf_files
    code, report, _ = run_check(capsys, "-m", target, "-md", draft, "--samples", 40, "-n", 8,
                                "--exact-kernels")
    assert report["drafted"] == 0 and report["greedy_identical"] is True
    assert report["passed"] is False and code == 4 and report["failures"] == []
    assert report["verdict"].startswith("not checked: your settings drafted no token")


def test_a_pass_names_each_setting_that_drafted_nothing():
    """adaptive k that declines every draft leaves that setting unchecked: the verdict says so."""
    def suite(mode, adaptive_drafted):
        return exactness.GreedySuite(mode=mode, identical=True, prompts=4, drafted=30,
                                     accepted=10, settings={"your settings": [30, 10],
                                                            "adaptive k": [adaptive_drafted, 0]})

    def report(adaptive_drafted):
        return exactness.ExactReport(greedy=suite("fast", 5), exact=suite("exact",
                                                                             adaptive_drafted),
                                     p_value=0.5, p_first=0.5, p_second=0.5, samples=40,
                                     temperature=1.0, top_k=20, draft_max=4,
                                     sampled_drafted=40, sampled_accepted=20)

    idle = report(0)
    assert idle.passed and idle.idle_settings() == ["adaptive k"]
    assert "adaptive k drafted nothing on these prompts" in idle.verdict()
    assert idle.to_dict()["settings_that_drafted_nothing"] == ["adaptive k"]
    assert report(3).idle_settings() == [] and "drafted nothing" not in report(3).verdict()
