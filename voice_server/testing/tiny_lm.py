"""A tiny random causal LM written to disk, for running a thinker through its
real loading path where no real weights may be fetched (tests, the GPU check).

Its words mean nothing: what it exercises is the executor (loading, streaming,
per-request caches, release mid-way), not the model.
"""

from __future__ import annotations

from pathlib import Path

CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

TEXT = ("The quick brown fox jumps over the lazy dog. Paris is the capital of France. "
        "Hello, how are you today? I am fine, thank you. Voice agents answer briefly. ") * 20


def write_tiny_qwen2(directory: str | Path, seed: int = 0) -> str:
    """A ~10 M-parameter Qwen2 with a 512-token byte-level BPE and a ChatML template,
    saved with ``save_pretrained``; returns the directory."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=512, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([TEXT], trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", bos_token=None)
    fast.chat_template = CHATML

    torch.manual_seed(seed)
    cfg = Qwen2Config(vocab_size=max(fast.vocab_size, 512),
                      hidden_size=256, intermediate_size=768, num_hidden_layers=8,
                      num_attention_heads=4, num_key_value_heads=2,
                      max_position_embeddings=1024, tie_word_embeddings=True,
                      eos_token_id=fast.convert_tokens_to_ids("<|im_end|>"))
    model = Qwen2ForCausalLM(cfg)
    model.save_pretrained(directory)
    fast.save_pretrained(directory)
    return str(directory)
