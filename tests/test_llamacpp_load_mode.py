"""Where llama.cpp's weights live: read into the process's memory where the model runs on the
CPU and fits twice over in the memory free (plain decoding was 5-9% faster so on the build
machine: docs/benchmarks.md), else the file mapped. Checked in the process's own memory map,
with the logits the same either way, and the CLI's --mmap / --no-mmap reaching the spec."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from app.cli.main import build_parser
from app.cli.options import drafter_choice, model_spec
from app.models.loading import ModelSpec, load_model
from backends.llamacpp import LlamaCppModel
from backends.llamacpp_load import weights_read_into_memory

GB = 1 << 30


def mapped(path: Path) -> bool:
    """Whether this process maps the file (Linux: /proc/self/maps)."""
    return str(path) in Path("/proc/self/maps").read_text()


def test_weights_are_read_into_memory_only_on_the_cpu_and_where_they_fit_twice():
    assert weights_read_into_memory("cpu", GB, 2 * GB)
    assert not weights_read_into_memory("cpu", GB, 2 * GB - 1)
    assert not weights_read_into_memory("gpu", GB, 64 * GB)
    assert not weights_read_into_memory("rpc", GB, 64 * GB)
    assert not weights_read_into_memory("cpu", GB, None)  # free memory unknown: map


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads Linux's memory map")
def test_weights_read_into_memory_are_not_mapped_and_give_the_same_logits(gguf_files, tmp_path):
    as_map, as_read = tmp_path / "mapped.gguf", tmp_path / "read.gguf"
    for copy in (as_map, as_read):
        shutil.copyfile(gguf_files[0], copy)
    models = [LlamaCppModel(as_map, n_gpu_layers=0, n_ctx=256, mmap=True),
              LlamaCppModel(as_read, n_gpu_layers=0, n_ctx=256, mmap=False)]
    try:
        assert mapped(as_map) and not mapped(as_read)
        assert [m.mmap for m in models] == [True, False]
        ids = models[0].tokenize("def add(a, b):\n    return a + b\n")
        first, second = (m.extend(ids, 4) for m in models)
        np.testing.assert_array_equal(first, second)
    finally:
        for model in models:
            model.close()
    assert not mapped(as_map)  # closing unmaps it


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="reads Linux's memory map")
def test_the_app_reads_a_small_model_into_memory_by_default(gguf_files, tmp_path):
    path = tmp_path / "target.gguf"
    shutil.copyfile(gguf_files[0], path)
    model = load_model(str(path), ModelSpec(target=str(path), backend="llamacpp",
                                            n_gpu_layers=0, n_ctx=256))
    try:
        assert model.mmap is False and not mapped(path)
    finally:
        model.close()
    model = load_model(str(path), ModelSpec(target=str(path), backend="llamacpp",
                                            n_gpu_layers=0, n_ctx=256, mmap=True))
    try:
        assert model.mmap is True and mapped(path)
    finally:
        model.close()


@pytest.mark.parametrize(("flag", "want"), [([], None), (["--mmap"], True),
                                            (["--no-mmap"], False)])
def test_the_cli_flag_reaches_the_spec(flag, want):
    args = build_parser().parse_args(["run", "-m", "t.gguf", "--ngram", "-p", "x", *flag])
    assert model_spec(args, drafter_choice(args)).mmap is want
