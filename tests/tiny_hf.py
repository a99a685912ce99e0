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
) -> Path:
    """A LlamaForCausalLM with a 37-token vocabulary, saved as safetensors + tokenizer.

    With noise > 0 every weight gets Gaussian noise of that many standard deviations (drawn
    from noise_seed): the same seed and shape then give a draft that mostly agrees.
    """
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate(SPECIALS + CHARS)}
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
        if noise > 0:
            generator = torch.Generator().manual_seed(noise_seed)
            for weights in model.parameters():
                jitter = torch.randn(weights.shape, generator=generator)
                weights.add_(jitter * noise * weights.std().clamp_min(1e-6))
    model.save_pretrained(folder)
    return folder
