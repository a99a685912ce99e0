"""Builds tiny random-weight transformers models (with a character tokenizer) for tests."""

from __future__ import annotations

from pathlib import Path

CHARS = list("abcdefghijklmnopqrstuvwxyz .,():=\n")
SPECIALS = ["<s>", "</s>", "<unk>"]


def write_tiny_hf(
    folder: Path,
    *,
    seed: int = 0,
    hidden: int = 64,
    n_layer: int = 2,
    sharpness: float = 4.0,
    max_positions: int = 512,
    noise: float = 0.0,
    noise_seed: int = 1,
    pad_vocab: int = 0,
    pad_logit_scale: float = 0.0,
    chars: list[str] | None = None,
    rows_from: Path | None = None,
) -> Path:
    """A LlamaForCausalLM with a 37-token vocabulary, saved as safetensors + tokenizer.

    With noise > 0 every weight gets Gaussian noise of that many standard deviations (drawn
    from noise_seed): the same seed and shape then give a draft that mostly agrees.

    `pad_vocab` pads config.vocab_size (the embedding and lm_head rows) past the tokenizer's
    37 tokens, as Qwen2.5 7B+ do (152,064 logit rows for 151,665 tokens); the real tokens'
    weights stay those of the unpadded model. The padding's lm_head rows are zero (logit 0)
    unless `pad_logit_scale` gives them random weights of that scale.

    `chars` replaces the character vocabulary (another vocabulary); `rows_from` (a folder
    written here) then gives a draft that mostly agrees with that model: its layers, and for
    each character it has too, its embedding and output rows (before the noise).
    """
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate(SPECIALS + (chars or CHARS))}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    tokenizer.decoder = decoders.Fuse()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    fast.chat_template = (
        "{% for m in messages %}<s>{{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}= {% endif %}"
    )
    fast.save_pretrained(folder)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=n_layer,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_positions,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        model.lm_head.weight.mul_(sharpness)
        if rows_from is not None:
            _copy_by_text(model, vocab, Path(rows_from))
        if noise > 0:
            generator = torch.Generator().manual_seed(noise_seed)
            for weights in model.parameters():
                jitter = torch.randn(weights.shape, generator=generator)
                weights.add_(jitter * noise * weights.std().clamp_min(1e-6))
        if pad_vocab:
            model = _padded(model, config, pad_vocab, pad_logit_scale, seed)
    model.save_pretrained(folder)
    return folder


def _copy_by_text(model, vocab: dict[str, int], source: Path) -> None:
    """The source model's weights, each token's rows taken from its token of the same text."""
    import json

    from safetensors.torch import load_file

    state = load_file(str(source / "model.safetensors"))
    source_vocab = json.loads((source / "tokenizer.json").read_text())["model"]["vocab"]
    own = model.state_dict()
    for name, weights in state.items():
        if name in ("model.embed_tokens.weight", "lm_head.weight"):
            rows = own[name].clone()
            for text, i in vocab.items():
                if text in source_vocab:
                    rows[i] = weights[source_vocab[text]]
            weights = rows
        own[name] = weights
    model.load_state_dict(own)


def _padded(model, config, pad: int, logit_scale: float, seed: int):
    """The same model with `pad` extra rows in its embedding and lm_head."""
    import torch
    from transformers import LlamaForCausalLM

    n_real, hidden = model.lm_head.weight.shape
    config.vocab_size = n_real + pad
    padded = LlamaForCausalLM(config)
    state = model.state_dict()
    generator = torch.Generator().manual_seed(seed + 7919)
    extra_embd = torch.randn((pad, hidden), generator=generator) * 0.02
    extra_head = torch.randn((pad, hidden), generator=generator) * logit_scale / hidden**0.5
    state["model.embed_tokens.weight"] = torch.cat([state["model.embed_tokens.weight"],
                                                    extra_embd])
    state["lm_head.weight"] = torch.cat([state["lm_head.weight"], extra_head])
    padded.load_state_dict(state)
    return padded
