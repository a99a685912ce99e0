"""One value says what drafts: `--spec-type NAME[,NAME...]` (llama.cpp's word) resolved by the
registry; each older flag that names a drafter is an alias of it; a list chains drafters in
order of preference, and every chain keeps greedy output identical to plain decoding."""

from __future__ import annotations

import json

import pytest

from app.cli.main import build_parser, main
from app.cli.options import drafter_choice, model_spec
from app.engine.decode_config import DecodeConfig, DrafterChoice, DrafterOptions
from app.engine.drafters.chain import ChainDrafter
from app.engine.drafters.registry import DRAFTERS, label
from app.engine.drafters.suffix import SUFFIX_COPY, SUFFIX_GUESS
from app.errors import SettingsError
from app.models.loading import ModelSpec, load_pair
from app.runs import new_drafter
from tests.helpers import assert_drafted

TARGET = ["-m", "t.gguf"]
# (the old flags, the --spec-type flags they stand for)
ALIASES = {
    "-md": (["-md", "d.gguf"], ["--spec-type", "draft", "-md", "d.gguf"]),
    "--ngram": (["--ngram"], ["--spec-type", "ngram"]),
    "--ngram -md": (["--ngram", "-md", "d.gguf"], ["--spec-type", "ngram,draft", "-md", "d.gguf"]),
    "--suffix": (["--suffix"], ["--spec-type", "suffix"]),
    "--suffix --draft-memory": (["--suffix", "--draft-memory", "m.json"],
                                ["--spec-type", "suffix", "--draft-memory", "m.json"]),
    "--draft-mtp": (["--draft-mtp"], ["--spec-type", "mtp"]),
    "--draft-heads": (["--draft-heads", "h.st"], ["--spec-type", "heads", "--draft-heads", "h.st"]),
    "--self-skip": (["--self-skip", "3-5"], ["--spec-type", "self", "--self-skip", "3-5"]),
    "--ngram --self-skip": (["--ngram", "--self-skip", "auto"],
                            ["--spec-type", "ngram,self", "--self-skip", "auto"]),
    "--cross-vocab": (["-md", "d.gguf", "--cross-vocab", "string"],
                      ["--spec-type", "draft", "-md", "d.gguf", "--cross-vocab", "string"]),
}


def parse(*flags: str):
    return build_parser().parse_args(["run", *TARGET, "-p", "x", *flags])


@pytest.mark.parametrize("alias", ALIASES.values(), ids=ALIASES.keys())
def test_each_older_flag_is_an_alias_of_spec_type(alias):
    old, new = (parse(*flags) for flags in alias)
    assert drafter_choice(old) == drafter_choice(new)
    choice = drafter_choice(new)
    assert model_spec(old, choice) == model_spec(new, choice)


def test_the_aliases_name_what_they_did():
    assert drafter_choice(parse("-md", "d.gguf")).names == ("draft",)
    assert drafter_choice(parse("--ngram", "-md", "d.gguf")).names == ("ngram", "draft")
    suffix = drafter_choice(parse("--suffix", "--draft-memory", "m.json"))
    assert suffix.names == ("suffix",) and suffix.options.memory == "m.json"
    heads = drafter_choice(parse("--draft-heads", "h.st"))
    assert heads.names == ("heads",) and heads.options.heads == "h.st"
    assert drafter_choice(parse("--self-skip", "3-5")).options.skip == "3-5"
    assert drafter_choice(parse("--spec-type", "self")).options.skip == ""  # auto
    mtp = parse("--draft-mtp")
    assert model_spec(mtp, drafter_choice(mtp)).with_mtp
    # the draft model file is loaded only where a draft model drafts
    ngram = parse("--spec-type", "ngram")
    assert model_spec(ngram, drafter_choice(ngram)) == ModelSpec("t.gguf")


def test_a_copying_drafter_first_makes_drafts_longer_by_default():
    assert DecodeConfig().draft_max == 8
    from app.cli.options import decode_config

    assert decode_config(parse("--spec-type", "suffix,draft", "-md", "d.gguf")).draft_max == 32
    assert decode_config(parse("--spec-type", "draft", "-md", "d.gguf")).draft_max == 8


@pytest.mark.parametrize("flags, needle", [
    (["--spec-type", "medusa"], "unknown drafter 'medusa'"),
    (["--spec-type", "draft,ngram", "-md", "d.gguf"], "put draft last"),
    (["--spec-type", "ngram,ngram"], "names a drafter twice"),
    (["--spec-type", "suffix", "-md", "d.gguf"], "-md is the draft model of --spec-type draft"),
    (["--spec-type", "suffix", "--ngram"], "--ngram names a drafter that --spec-type suffix"),
    (["--spec-type", "heads"], "--draft-heads HEADS"),
    (["--spec-type", "self", "--self-cost", "0"], "--self-cost is the self-draft's cost"),
    (["--spec-type", "ngram", "--draft-memory", "m.json"], "--spec-type suffix"),
    (["--spec-type", "ngram", "--cross-vocab", "tli"], "--cross-vocab tli is for a draft"),
    (["--spec-type", "ngram,"], "--spec-type takes names"),
    (["--ngram", "--suffix"], "pick one draft"),
])
def test_a_bad_spec_type_says_what_is_wrong(flags, needle):
    with pytest.raises(SettingsError, match=needle):
        drafter_choice(parse(*flags))


def test_every_registered_drafter_has_a_label_and_llama_cpp_words_are_understood():
    options = DrafterOptions(skip="2-5", heads="dir/h.st")
    labels = {name: label(DrafterChoice((name,), options), "d.gguf") for name in DRAFTERS}
    assert labels == {"draft": "d.gguf", "ngram": "n-gram lookup", "suffix": "suffix decoding",
                      "mtp": "its own MTP layers", "heads": "draft heads (h.st)",
                      "self": "self-draft (skips layers 2-5)"}
    assert drafter_choice(parse("--spec-type", "draft-mtp")).names == ("mtp",)
    assert label(DrafterChoice(("ngram", "draft")), "d.gguf") == "n-gram lookup + d.gguf"


# --- chains, built by the registry, on tiny real models ----------------------------------

PROMPT = "the cat sat on the mat. the dog sat on the mat. the cat sat on the"


@pytest.fixture(scope="module")
def exact_pair(gguf_files):
    pair = load_pair(ModelSpec(str(gguf_files[0]), str(gguf_files[1]), n_ctx=512,
                               batch_invariant=True))
    yield pair
    pair.close()


def greedy(pair, names, n=40, draft_max=6):
    config = DecodeConfig(n_predict=n, draft_max=draft_max, stop_at_eos=False,
                          drafter=DrafterChoice(names))
    drafter = new_drafter(pair, config)
    from app.engine.session import Session

    session = Session(pair.target, drafter, config)
    steps = list(session.steps(pair.target.tokenize(PROMPT)))
    return session.output_ids, steps, drafter


@pytest.mark.parametrize("names", [("draft",), ("ngram",), ("suffix",), ("ngram", "draft"),
                                   ("suffix", "draft"), ("ngram", "suffix")])
def test_every_chain_built_by_the_registry_keeps_greedy_output(exact_pair, names):
    expected, _, _ = greedy(exact_pair, ())
    got, steps, drafter = greedy(exact_pair, names)
    assert got == expected
    assert_drafted(steps)
    assert isinstance(drafter, ChainDrafter) == (len(names) > 1)


def test_a_chain_asks_the_suffix_first_and_the_draft_model_where_it_has_nothing(exact_pair):
    _, steps, drafter = greedy(exact_pair, ("suffix", "draft"), n=60)
    sources = {s.source for s in steps if s.k}
    assert sources & {SUFFIX_COPY.name, SUFFIX_GUESS.name}, sources
    assert "model" in sources, sources
    assert drafter.name.startswith("suffix decoding + draft model")


def test_run_spec_type_suffix_draft_chains(gguf_files, capsys, tmp_path):
    target, draft = gguf_files
    trace = tmp_path / "run.jsonl"
    code = main(["run", "-m", str(target), "-md", str(draft), "--spec-type", "suffix,draft",
                 "-p", PROMPT, "-n", "40", "--trace", str(trace), "--exact-kernels"])
    assert code == 0, capsys.readouterr().err
    lines = [json.loads(line) for line in trace.read_text().splitlines()]
    header = lines[0]
    assert header["draft"] == f"suffix decoding + {draft}"
    assert header["settings"]["drafter"]["names"] == ["suffix", "draft"]
    sources = {line["source"] for line in lines[1:-1] if line["k"]}
    assert "model" in sources and sources & {SUFFIX_COPY.name, SUFFIX_GUESS.name}, sources
