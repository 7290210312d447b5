"""Builds small real Hugging Face style model directories in tmp for the alignment tests."""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import Tokenizer, models, pre_tokenizers, trainers

CORPUS = [
    "What is the capital of France? The capital of France is Paris.",
    "The chemical symbol for gold is Au. The chemical symbol for iron is Fe.",
    '{"name": "get_weather", "arguments": {"city": "Berlin", "unit": "celsius"}}',
    "Once upon a time there lived an old clockmaker by the sea.",
    "I can't help with that request.",
] * 20

TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}<|eos|>{% endfor %}<|assistant|>"
SPECIALS = ["<|pad|>", "<|bos|>", "<|eos|>", "<|user|>", "<|assistant|>"]


def write_model_dir(
    path: Path,
    *,
    vocab_size: int = 300,
    specials: list[str] = SPECIALS,
    eos: str = "<|eos|>",
    template: str = TEMPLATE,
) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token=None))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer=trainer)
    tokenizer.save(str(path / "tokenizer.json"))
    eos_id = tokenizer.token_to_id(eos)
    (path / "tokenizer_config.json").write_text(json.dumps({
        "bos_token": "<|bos|>", "eos_token": eos, "pad_token": "<|pad|>", "chat_template": template,
    }))
    (path / "config.json").write_text(json.dumps({
        "vocab_size": tokenizer.get_vocab_size(), "eos_token_id": eos_id,
        "bos_token_id": tokenizer.token_to_id("<|bos|>"),
    }))
    return path
