"""Tiny GGUF files with trained-style MTP (NextN) layers, for tests (a helper module).

The architecture is llama.cpp's `glm4moe` (GLM-4.5), the simplest one whose loader reads
`blk.N.nextn.*` tensors AND whose MTP graph (llama_model_glm4_moe::graph_mtp) runs on a plain
attention KV cache that can be rolled back: the hybrid Qwen3.5/Qwen3-Next trunks keep a
recurrent state that cannot be. Layout, from src/models/glm4-moe.cpp:
  block_count = trunk layers + nextn_predict_layers (one: graph_mtp asserts n_layer_nextn == 1)
  trunk layers 0..n-1: dense (leading_dense_block_count = n), so the target is a plain
    transformer whose verify pass stays batch-invariant;
  layer n (the MTP block): attention, a MoE FFN (ffn_gate_inp, exp_probs_b, *_exps) with a
    shared expert, and nextn.eh_proj {2·n_embd, n_embd}, nextn.enorm, nextn.hnorm,
    nextn.shared_head_norm; embed_tokens and shared_head_head are optional (the trunk's
    token_embd and output are used then).
Weights are random F32; the MTP block's predictions are therefore unrelated to the target's
except through what it shares (the token embedding and output head), which gives a draft
that is right now and then — enough rejections for the exactness tests.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

from tests.tiny_gguf import (
    RandomMatrices,
    attention,
    embeddings_and_head,
    finish_llama_gguf,
    tiny_vocab,
)

WORDS = ("the", "a", "cat", "dog", "sat", "on", "mat", "and", "ran", "to")


def write_tiny_mtp_gguf(
    path: str | Path,
    *,
    seed: int = 0,
    n_layer: int = 2,
    nextn: int = 1,
    hidden: int = 32,
    n_head: int = 4,
    n_ctx: int = 256,
    n_expert: int = 2,
    peak: float = 4.0,
    mix: float = 1.0,
    words: tuple[str, ...] = WORDS,
) -> Path:
    """Write a tiny glm4moe GGUF with `nextn` MTP blocks after `n_layer` dense trunk layers
    (nextn = 0 writes the same trunk without any: a model that must not be offered MTP).

    `mix` scales what every block adds to its residual stream (attention and FFN outputs).
    Small, each model is close to a bigram model that the MTP block, whose eh_proj then
    passes the next token's embedding through, predicts well: a draft that is accepted
    often but not always. 1.0 gives unrelated random predictions."""
    path = Path(path)
    texts, scores, types = tiny_vocab(words)
    n_vocab, n_ff, head_dim = len(texts), 2 * hidden, hidden // n_head
    mat = RandomMatrices(np.random.default_rng(seed))
    ones = np.ones(hidden, dtype=np.float32)
    tensors = embeddings_and_head(mat, n_vocab, hidden, peak)
    for i in range(n_layer + nextn):
        blk = f"blk.{i}"
        tensors |= attention(mat, blk, hidden, mix) | {
            f"{blk}.post_attention_norm.weight": ones.copy(),
        }
        if i < n_layer:
            tensors |= {
                f"{blk}.ffn_gate.weight": mat(n_ff, hidden),
                f"{blk}.ffn_up.weight": mat(n_ff, hidden),
                f"{blk}.ffn_down.weight": mat(hidden, n_ff, mix),
            }
            continue
        experts = [(mat(n_ff, hidden), mat(n_ff, hidden), mat(hidden, n_ff, mix))
                   for _ in range(n_expert)]
        tensors |= {  # numpy shapes are the GGUF shapes reversed
            f"{blk}.ffn_gate_inp.weight": mat(n_expert, hidden),
            f"{blk}.exp_probs_b.bias": np.zeros(n_expert, dtype=np.float32),
            f"{blk}.ffn_gate_exps.weight": np.stack([e[0] for e in experts]),
            f"{blk}.ffn_up_exps.weight": np.stack([e[1] for e in experts]),
            f"{blk}.ffn_down_exps.weight": np.stack([e[2] for e in experts]),
            f"{blk}.ffn_gate_shexp.weight": mat(n_ff, hidden),
            f"{blk}.ffn_up_shexp.weight": mat(n_ff, hidden),
            f"{blk}.ffn_down_shexp.weight": mat(hidden, n_ff, mix),
            # [embedding of the next token | the target's state] -> the block's input
            f"{blk}.nextn.eh_proj.weight": np.concatenate(
                [np.eye(hidden, dtype=np.float32) * (1.0 - min(mix, 1.0)), np.zeros(
                    (hidden, hidden), np.float32)], axis=1) + mat(hidden, 2 * hidden, mix),
            f"{blk}.nextn.enorm.weight": ones.copy(),
            f"{blk}.nextn.hnorm.weight": ones.copy(),
            f"{blk}.nextn.shared_head_norm.weight": ones.copy(),
        }

    arch = "glm4moe"
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tiny-glm4moe-mtp{nextn}-seed{seed}")
    writer.add_context_length(n_ctx)
    writer.add_embedding_length(hidden)
    writer.add_block_count(n_layer + nextn)
    writer.add_feed_forward_length(n_ff)
    writer.add_rope_dimension_count(head_dim)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head)
    writer.add_key_length(head_dim)
    writer.add_value_length(head_dim)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_expert_count(n_expert)
    writer.add_expert_used_count(1)
    writer.add_expert_shared_count(1)
    writer.add_expert_feed_forward_length(n_ff)
    writer.add_leading_dense_block_count(n_layer)
    writer.add_expert_weights_norm(True)
    writer.add_expert_weights_scale(1.0)
    if nextn:
        writer.add_nextn_predict_layers(nextn)
    finish_llama_gguf(writer, texts, scores, types, tensors)
    return path
