"""Tiny llama-architecture GGUF files for tests (a helper module, not a test file).

`write_tiny_gguf` writes a model of a few hundred KB with random F32 weights and a
SentencePiece-style vocabulary that llama.cpp (llama-cpp-python 0.3.36) loads and generates
from. Every seed gives another model over the SAME vocabulary, so two seeds make a target and a
draft that disagree now and then; `noise_from` instead perturbs an existing file's weights, for a
draft that mostly agrees with its target.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import gguf
import numpy as np
from gguf.quants import quantize

DEFAULT_WORDS = (
    "def", "return", "print", "hello", "world", "self", "import", "from", "class", "for",
    "in", "if", "else", "while", "the", "a", "is", "of", "to", "and",
    "int", "str", "list", "value", "name", "data", "result", "true", "false", "none",
    "fib", "add", "sum", "x", "y", "n", "i", "range", "len", "code",
)  # fmt: skip
SPACE = "\u2581"  # SentencePiece's word-start marker "▁"
BOS_ID, EOS_ID, UNK_ID = 1, 2, 0
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"
)


def tiny_vocab(
    words: Sequence[str] = DEFAULT_WORDS, byte_tokens: bool = True
) -> tuple[list[str], list[float], list[int]]:
    """Token texts, scores and types: specials, byte tokens, single characters, word pieces.

    Each word is added with every prefix of "▁word" so llama.cpp's SentencePiece merges can
    build it; characters that are not covered fall back to the byte tokens.
    """
    texts = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    if byte_tokens:
        texts += [f"<0x{b:02X}>" for b in range(256)]
        types += [gguf.TokenType.BYTE] * 256
    pieces = [SPACE, *"abcdefghijklmnopqrstuvwxyz0123456789"]
    for word in words:
        marked = SPACE + word
        pieces += [marked[:end] for end in range(2, len(marked) + 1)]
    seen = set(texts)
    for piece in pieces:
        if piece not in seen:
            seen.add(piece)
            texts.append(piece)
            types.append(gguf.TokenType.NORMAL)
    scores = [0.0 if t != gguf.TokenType.NORMAL else -0.1 * i for i, t in enumerate(types)]
    return texts, scores, [int(t) for t in types]


class RandomMatrices:
    """Random F32 weight matrices from one generator, drawn in the order they are asked for
    (the same seed gives the same model), scaled by 1/sqrt(fan-in)."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng

    def __call__(self, rows: int, cols: int, scale: float = 1.0) -> np.ndarray:
        return (self.rng.standard_normal((rows, cols)) * scale / np.sqrt(cols)).astype(
            np.float32)


def embeddings_and_head(mat: RandomMatrices, n_vocab: int, hidden: int,
                        peak: float) -> dict[str, np.ndarray]:
    """Token embeddings, the final norm and the output head (scaled by `peak`, so that
    next-token distributions are peaked rather than uniform)."""
    return {
        "token_embd.weight": mat.rng.standard_normal((n_vocab, hidden)).astype(np.float32),
        "output_norm.weight": np.ones(hidden, dtype=np.float32),
        "output.weight": mat(n_vocab, hidden, peak),
    }


def attention(mat: RandomMatrices, blk: str, hidden: int,
              out_scale: float = 1.0) -> dict[str, np.ndarray]:
    """A block's attention: its input norm and the q, k, v and output projections (the
    output's scaled by `out_scale`)."""
    return {
        f"{blk}.attn_norm.weight": np.ones(hidden, dtype=np.float32),
        f"{blk}.attn_q.weight": mat(hidden, hidden),
        f"{blk}.attn_k.weight": mat(hidden, hidden),
        f"{blk}.attn_v.weight": mat(hidden, hidden),
        f"{blk}.attn_output.weight": mat(hidden, hidden, out_scale),
    }


def write_tiny_gguf(
    path: str | Path,
    *,
    seed: int = 0,
    n_layer: int = 2,
    hidden: int = 32,
    n_head: int = 4,
    n_ctx: int = 256,
    words: Sequence[str] = DEFAULT_WORDS,
    byte_tokens: bool = True,
    noise_from: Path | None = None,
    noise: float = 0.05,
    peak: float = 4.0,
    pad_vocab: int = 0,
    pad_logit_scale: float = 0.0,
    rows_from: Path | None = None,
    weight_type: str = "F32",
    metadata: dict[str, str] | None = None,
) -> Path:
    """Write a tiny llama GGUF; returns its path.

    `metadata`: string fields to write (general.basename, general.size_label, ... as
    llama.cpp's converter writes them); a general.name among them replaces the default.

    `weight_type` "Q4_0" or "Q8_0" quantises the blocks' matrices (the embeddings and output
    head stay F32): llama.cpp's CPU backend repacks such weights for its gemm/gemv kernels
    when their rows are a multiple of 8 (ggml-cpu/repack.cpp), which F32 weights never take.

    `peak` scales output.weight so next-token distributions are peaked rather than uniform.
    With `noise_from`, the weights are that file's plus Gaussian noise of `noise` times each
    matrix's standard deviation (the shapes and vocabulary must match).

    `pad_vocab` appends that many unused tokens "[PAD<id>]" after the real ones, as converters
    pad Qwen2.5 7B+ or Llama vocabularies to a round size. The real tokens' weights are those
    of the unpadded model of the same seed; the padding's output rows are zero (logit 0, so
    greedy never picks one while some real logit is positive) unless `pad_logit_scale` gives
    them random weights of that scale (for tests where padding must carry mass). With
    `noise_from`, a source with another padding is cut or padded to this one's first.

    `rows_from` makes a draft of ANOTHER vocabulary (other `words`) that mostly agrees with
    that file's model: its layers are the source's, and each token's embedding and output
    rows are those of the source token of the same text (fresh random rows for tokens the
    source lacks), then `noise` as with `noise_from`.
    """
    path = Path(path)
    if hidden % n_head:
        raise ValueError(f"hidden ({hidden}) must be a multiple of n_head ({n_head})")
    texts, scores, types = tiny_vocab(words, byte_tokens)
    n_real, n_ff = len(texts), 2 * hidden
    texts += [f"[PAD{i}]" for i in range(n_real, n_real + pad_vocab)]
    scores += [0.0] * pad_vocab
    types += [int(gguf.TokenType.UNUSED)] * pad_vocab
    rng = np.random.default_rng(seed)
    mat = RandomMatrices(rng)
    ones = np.ones(hidden, dtype=np.float32)
    tensors = embeddings_and_head(mat, n_real, hidden, peak)
    for i in range(n_layer):
        blk = f"blk.{i}"
        tensors |= attention(mat, blk, hidden) | {
            f"{blk}.ffn_norm.weight": ones.copy(),
            f"{blk}.ffn_gate.weight": mat(n_ff, hidden),
            f"{blk}.ffn_up.weight": mat(n_ff, hidden),
            f"{blk}.ffn_down.weight": mat(hidden, n_ff),
        }
    if rows_from is not None:
        tensors = _jitter(_rows_by_text(Path(rows_from), texts, tensors), rng, noise)
    elif noise_from is not None:
        tensors = _perturb(Path(noise_from), tensors, rng, noise)
    if pad_vocab:
        tensors = _pad_rows(tensors, pad_vocab, pad_logit_scale, seed)

    writer = gguf.GGUFWriter(str(path), "llama")
    metadata = {"general.name": f"tiny-llama-seed{seed}", **(metadata or {})}
    for key, value in metadata.items():
        writer.add_string(key, value)
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(hidden)
    writer.add_block_count(n_layer)
    writer.add_feed_forward_length(n_ff)
    writer.add_rope_dimension_count(hidden // n_head)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    finish_llama_gguf(writer, texts, scores, types, tensors, weight_type)
    return path


def finish_llama_gguf(writer: gguf.GGUFWriter, texts: list[str], scores: list[float],
                      types: list[int], tensors: dict[str, np.ndarray],
                      weight_type: str = "F32") -> None:
    """The file type, the SentencePiece-style vocabulary and chat template, the tensors,
    and the file written: what every tiny test GGUF shares."""
    quant = None if weight_type == "F32" else gguf.GGMLQuantizationType[weight_type]
    writer.add_file_type(gguf.LlamaFileType.ALL_F32 if quant is None else
                         gguf.LlamaFileType[f"MOSTLY_{weight_type}"])
    writer.add_vocab_size(len(texts))
    writer.add_tokenizer_model("llama")
    writer.add_token_list(texts)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(UNK_ID)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    for name, array in tensors.items():
        if quant is not None and name.startswith("blk.") and array.ndim == 2:
            writer.add_tensor(name, quantize(array, quant), raw_dtype=quant)
        else:
            writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


_VOCAB_TENSORS = ("token_embd.weight", "output.weight")


def _pad_rows(
    tensors: dict[str, np.ndarray], pad: int, logit_scale: float, seed: int
) -> dict[str, np.ndarray]:
    """Rows for the padding tokens, drawn apart so the real tokens' weights stay as they are."""
    pad_rng = np.random.default_rng([seed, pad])
    embd, output = (tensors[name] for name in _VOCAB_TENSORS)
    hidden = embd.shape[1]
    extra_embd = pad_rng.standard_normal((pad, hidden)).astype(np.float32)
    extra_out = (pad_rng.standard_normal((pad, hidden)) * logit_scale / np.sqrt(hidden))
    return tensors | {
        "token_embd.weight": np.concatenate([embd, extra_embd]),
        "output.weight": np.concatenate([output, extra_out.astype(np.float32)]),
    }


def _rows_by_text(
    source: Path, texts: list[str], fresh: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Source-shaped tensors whose vocabulary rows follow `texts`: a token the source has
    takes its rows, any other keeps the fresh random ones (written where _perturb reads)."""
    reader = gguf.GGUFReader(source)
    field = reader.fields["tokenizer.ggml.tokens"]
    source_texts = [bytes(field.parts[i]).decode() for i in field.data]
    base = {t.name: np.array(t.data, dtype=np.float32) for t in reader.tensors}
    del reader
    index = {text: i for i, text in enumerate(source_texts)}
    out = dict(fresh)
    for name in _VOCAB_TENSORS:
        rows = fresh[name].copy()
        source_rows = base[name].reshape(-1, rows.shape[1])
        for i, text in enumerate(texts[: rows.shape[0]]):
            if text in index:
                rows[i] = source_rows[index[text]]
        out[name] = rows
    for name, array in base.items():
        if name not in _VOCAB_TENSORS:
            out[name] = array.reshape(fresh[name].shape)
    return out


def _jitter(
    tensors: dict[str, np.ndarray], rng: np.random.Generator, noise: float
) -> dict[str, np.ndarray]:
    """Gaussian noise of `noise` times each matrix's standard deviation; norms kept."""
    out = {}
    for name, weights in tensors.items():
        if weights.ndim == 2:
            jitter = rng.standard_normal(weights.shape) * noise * float(weights.std())
            weights = (weights + jitter).astype(np.float32)
        out[name] = weights
    return out


def _perturb(
    source: Path, fresh: dict[str, np.ndarray], rng: np.random.Generator, noise: float
) -> dict[str, np.ndarray]:
    """The source file's tensors plus noise on every matrix; norms are kept as they are."""
    reader = gguf.GGUFReader(source)
    base = {t.name: np.array(t.data, dtype=np.float32) for t in reader.tensors}
    del reader
    if set(base) != set(fresh):
        raise ValueError(f"{source} has other tensors than this shape asks for")
    out: dict[str, np.ndarray] = {}
    for name, want in fresh.items():
        if name in _VOCAB_TENSORS:  # the source may be padded: keep its real tokens' rows
            base[name] = base[name].reshape(-1, want.shape[1])[: want.shape[0]]
        weights = base[name].reshape(want.shape) if base[name].size == want.size else None
        if weights is None:
            raise ValueError(f"{source}: {name} has shape {base[name].shape}, not {want.shape}")
        if weights.ndim == 2:
            jitter = rng.standard_normal(weights.shape) * noise * float(weights.std())
            weights = (weights + jitter).astype(np.float32)
        out[name] = weights
    return out
