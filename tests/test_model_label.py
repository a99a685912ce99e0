"""A model's name read from its files without loading weights (app.models.model_label): the
GGUF converter's own parts and the quantization its file type names, general.name where the
parts are missing, a transformers folder's hub name or folder name, and "" where no model
can be read (the window then shows the path)."""

from __future__ import annotations

import json

from app.models.model_label import model_label
from tests.tiny_gguf import write_tiny_gguf

CONVERTER_PARTS = {"general.name": "Tiny Coder 1.5B Instruct", "general.basename": "Tiny-Coder",
                   "general.size_label": "1.5B", "general.finetune": "Instruct"}


def test_a_gguf_is_named_by_its_converter_parts_and_quantization(tmp_path):
    path = write_tiny_gguf(tmp_path / "tiny-coder-1.5b-instruct-q8_0.gguf",
                           weight_type="Q8_0", metadata=CONVERTER_PARTS)
    assert model_label(path) == "Tiny-Coder 1.5B Instruct · Q8_0"


def test_the_demo_pairs_metadata_names_both_models_without_their_repositorys_packing(tmp_path):
    """The demo files' fields as they are: the converter copied "-GGUF" and "-AWQ" from the
    repositories' names into the finetune."""
    for size, packing in (("1.5B", "GGUF"), ("0.5B", "AWQ")):
        path = write_tiny_gguf(tmp_path / f"{size}.gguf", weight_type="Q8_0", metadata={
            "general.name": f"Qwen2.5 Coder {size} Instruct {packing}",
            "general.basename": "Qwen2.5-Coder", "general.size_label": size,
            "general.finetune": f"Instruct-{packing}"})
        assert model_label(path) == f"Qwen2.5-Coder {size} Instruct · Q8_0"
    named = write_tiny_gguf(tmp_path / "n.gguf", metadata={"general.name": "Coder 7B-Chat GPTQ"})
    assert model_label(named) == "Coder 7B-Chat · F32"


def test_a_gguf_without_the_parts_is_named_by_general_name_and_its_size(tmp_path):
    plain = write_tiny_gguf(tmp_path / "a.gguf", seed=3)
    assert model_label(plain) == "tiny-llama-seed3 · F32"
    sized = write_tiny_gguf(tmp_path / "b.gguf", metadata={"general.name": "Tiny Coder",
                                                           "general.size_label": "40K"})
    assert model_label(sized) == "Tiny Coder 40K · F32"
    named_with_size = write_tiny_gguf(tmp_path / "c.gguf", metadata={
        "general.name": "Tiny Coder 40K", "general.size_label": "40K"})
    assert model_label(named_with_size) == "Tiny Coder 40K · F32"  # the size said once


def test_a_file_rewritten_in_place_is_read_again(tmp_path):
    path = write_tiny_gguf(tmp_path / "m.gguf", metadata={"general.name": "First"})
    assert model_label(path).startswith("First")
    write_tiny_gguf(path, n_layer=1, metadata={"general.name": "Second"})
    assert model_label(path).startswith("Second")


def test_a_transformers_folder_is_named_by_its_hub_name_or_its_folder(hf_dirs, tmp_path):
    target = hf_dirs[0]
    assert model_label(target) == f"{target.name} · float32"
    config = json.loads((target / "config.json").read_text())
    saved = tmp_path / "models--Org--Tiny-Chat-0.5B" / "snapshots" / ("c" * 40)
    saved.mkdir(parents=True)
    (saved / "config.json").write_text(json.dumps(config))
    assert model_label(saved) == "Tiny-Chat-0.5B · float32"  # the repository, not the commit
    config |= {"_name_or_path": "Org/Tiny-Chat-1.5B",
               "quantization_config": {"quant_method": "gptq", "bits": 4}}
    (saved / "config.json").write_text(json.dumps(config))
    assert model_label(saved) == "Tiny-Chat-1.5B · gptq 4-bit"
    config["_name_or_path"] = "/home/someone/checkpoints/run-3"  # a local path names no model
    (saved / "config.json").write_text(json.dumps(config))
    assert model_label(saved) == "Tiny-Chat-0.5B · gptq 4-bit"


def test_no_name_where_no_model_can_be_read(tmp_path):
    (tmp_path / "notes.gguf").write_text("not a model")
    truncated = tmp_path / "cut.gguf"
    truncated.write_bytes(write_tiny_gguf(tmp_path / "whole.gguf").read_bytes()[:40])
    (tmp_path / "empty-folder").mkdir()
    for path in ("missing.gguf", "notes.gguf", "cut.gguf", "empty-folder"):
        assert model_label(tmp_path / path) == "", path
