"""Training the simulator's BPE tokenizers and writing HF-style model directories.

Only ``python -m speclab.sim.corpus --write`` runs this; the server loads the committed files.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Final

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from .shapes import MODEL_SHAPES

MODELS_DIR: Final = Path(__file__).resolve().parent / "data" / "models"

TARGET_SPECIALS: Final = ["<|pad|>", "<|bos|>", "<|eos|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]
TARGET_TEMPLATE: Final = (
    "{{ bos_token }}{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + "
    "'<|end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)
MISALIGNED_SPECIALS: Final = ["<unk>", "<s>", "</s>", "<pad>", "[INST]", "[/INST]", "<<SYS>>", "<</SYS>>"]
MISALIGNED_TEMPLATE: Final = (
    "{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ '<<SYS>>' + "
    "message['content'] + '<</SYS>>' }}{% elif message['role'] == 'user' %}{{ '[INST] ' + message['content'] + "
    "' [/INST]' }}{% else %}{{ ' ' + message['content'] + eos_token }}{% endif %}{% endfor %}"
)

# The language model each name stands for: n-gram order, share of the corpus it saw, smoothing
# strength (Witten-Bell type-count multiplier) and the weights of its copy features. The drafts are
# weak on purpose: at k=4 on the bundled prompts sim-1b accepts about 3.0 tokens per step (k=4 pays at
# batch 1 and stops paying by batch 32 on sim-8b) and sim-0.5b about 1.9 (it loses at batch 1), either
# side of Spec-Bench's draft-model average of 2.19.
LM_SPECS: Final[dict[str, dict[str, Any]]] = {
    "sim-70b": {"order": 14, "data_fraction": 1.0, "smoothing": 1.0, "copy_boost": 2.5, "induction_boost": 2.0, "pointer_boost": 2.0},
    "sim-72b": {"order": 14, "data_fraction": 1.0, "smoothing": 1.0, "copy_boost": 2.5, "induction_boost": 2.0, "pointer_boost": 2.0},
    "sim-8b": {"order": 12, "data_fraction": 1.0, "smoothing": 1.0, "copy_boost": 2.5, "induction_boost": 2.0, "pointer_boost": 2.0},
    "sim-1b": {"order": 3, "data_fraction": 0.1, "smoothing": 3.0, "copy_boost": 2.0, "induction_boost": 1.5, "pointer_boost": 1.5},
    "sim-1b-misaligned": {"order": 3, "data_fraction": 0.1, "smoothing": 3.0, "copy_boost": 2.0,
                          "induction_boost": 1.5, "pointer_boost": 1.5},
    "sim-0.5b": {"order": 2, "data_fraction": 0.05, "smoothing": 4.0, "copy_boost": 1.0, "induction_boost": 0.0, "pointer_boost": 0.0},
}


def train_target_tokenizer(texts: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3200, min_frequency=2, special_tokens=TARGET_SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def train_misaligned_tokenizer(texts: list[str]) -> Tokenizer:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=2400, min_frequency=2, special_tokens=MISALIGNED_SPECIALS,
                                  show_progress=False)
    tok.train_from_iterator(texts, trainer)
    return tok


def _tokenizer_config(tok: Tokenizer, misaligned: bool) -> dict[str, Any]:
    specials = MISALIGNED_SPECIALS if misaligned else TARGET_SPECIALS
    bos, eos, pad = ("<s>", "</s>", "<pad>") if misaligned else ("<|bos|>", "<|eos|>", "<|pad|>")
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": bos, "eos_token": eos, "pad_token": pad,
        "unk_token": "<unk>" if misaligned else None,
        "chat_template": MISALIGNED_TEMPLATE if misaligned else TARGET_TEMPLATE,
        "model_max_length": 4096,
        "clean_up_tokenization_spaces": False,
        "added_tokens_decoder": {
            str(tok.token_to_id(s)): {"content": s, "special": True, "lstrip": False, "rstrip": False,
                                      "normalized": False, "single_word": False}
            for s in specials
        },
    }


def _model_config(name: str, tok: Tokenizer, misaligned: bool) -> dict[str, Any]:
    shape = MODEL_SHAPES[name]
    bos, eos, pad = ("<s>", "</s>", "<pad>") if misaligned else ("<|bos|>", "<|eos|>", "<|pad|>")
    return {
        "architectures": ["SimNgramForCausalLM"],
        "model_type": "speclab-sim-ngram",
        "stands_for": shape.stands_for,
        "stands_for_vocab_size": shape.vocab_size,
        "vocab_size": tok.get_vocab_size(),
        "num_parameters": shape.num_parameters,
        "hidden_size": shape.hidden_size,
        "num_hidden_layers": shape.num_layers,
        "num_key_value_heads": shape.num_kv_heads,
        "head_dim": shape.head_dim,
        "max_position_embeddings": shape.max_position_embeddings,
        "torch_dtype": "bfloat16",
        "bos_token_id": tok.token_to_id(bos),
        "eos_token_id": tok.token_to_id(eos),
        "pad_token_id": tok.token_to_id(pad),
        "sim_lm": LM_SPECS[name],
    }


_cache: dict[bool, Tokenizer] = {}


def write_model_dir(name: str, texts: list[str]) -> list[Path]:
    misaligned = name.endswith("-misaligned")
    if misaligned not in _cache:
        _cache[misaligned] = (train_misaligned_tokenizer if misaligned else train_target_tokenizer)(texts)
    tok = _cache[misaligned]
    out = MODELS_DIR / name
    out.mkdir(parents=True, exist_ok=True)
    paths = [out / "tokenizer.json", out / "tokenizer_config.json", out / "config.json"]
    tok.save(str(paths[0]))
    paths[1].write_text(json.dumps(_tokenizer_config(tok, misaligned), indent=2) + "\n", encoding="utf-8")
    paths[2].write_text(json.dumps(_model_config(name, tok, misaligned), indent=2) + "\n", encoding="utf-8")
    return paths
