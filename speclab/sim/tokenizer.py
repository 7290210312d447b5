"""Simulator model names, their bundled directories, and the tokenizer the server uses.

Every model directory is HF-shaped (``tokenizer.json``, ``tokenizer_config.json``,
``config.json``) so the tokenizer-alignment gate can read it like a real checkpoint.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Final

from tokenizers import Tokenizer

from .errors import UnknownModelError

MODELS_DIR: Final = Path(__file__).resolve().parent / "data" / "models"
SIM_MODELS: Final[tuple[str, ...]] = ("sim-0.5b", "sim-1b", "sim-8b", "sim-70b", "sim-72b", "sim-1b-misaligned")


def model_dir(name: str) -> Path:
    """The bundled directory of a simulator model; UnknownModelError for any other name."""
    if name not in SIM_MODELS:
        raise UnknownModelError(
            f"Unknown model {name!r}; the simulator's models are: {', '.join(SIM_MODELS)}")
    return MODELS_DIR / name


@cache
def model_config(name: str) -> dict[str, Any]:
    return dict(json.loads((model_dir(name) / "config.json").read_text(encoding="utf-8")))


class SimTokenizer:
    """A ``tokenizers`` BPE plus the special tokens and chat format from tokenizer_config.json."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.backend = Tokenizer.from_file(str(directory / "tokenizer.json"))
        cfg = json.loads((directory / "tokenizer_config.json").read_text(encoding="utf-8"))
        self.chat_template: str = cfg["chat_template"]
        self.bos_token: str = cfg["bos_token"]
        self.eos_token: str = cfg["eos_token"]
        self.pad_token: str = cfg["pad_token"]
        self.bos_token_id = self.token_id(self.bos_token)
        self.eos_token_id = self.token_id(self.eos_token)
        self.pad_token_id = self.token_id(self.pad_token)
        self.special_ids = frozenset(int(k) for k in cfg["added_tokens_decoder"])
        self.vocab_size = self.backend.get_vocab_size()
        self._llama_style = self.bos_token == "<s>"

    def token_id(self, token: str) -> int:
        found = self.backend.token_to_id(token)
        if found is None:
            raise ValueError(f"{self.directory}: special token {token!r} is not in the vocabulary")
        return int(found)

    def encode(self, text: str) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return str(self.backend.decode(ids, skip_special_tokens=skip_special_tokens))

    def id_to_token(self, token_id: int) -> str | None:
        found = self.backend.id_to_token(token_id)
        return None if found is None else str(found)

    def apply_chat_template(self, messages: list[dict[str, str]]) -> str:
        """The prompt text for ``messages`` with the generation prompt, as the Jinja template renders it."""
        parts = [self.bos_token]
        for message in messages:
            role, content = message["role"], message["content"]
            if not self._llama_style:
                parts.append(f"<|{role}|>{content}<|end|>")
            elif role == "system":
                parts.append(f"<<SYS>>{content}<</SYS>>")
            elif role == "user":
                parts.append(f"[INST] {content} [/INST]")
            else:
                parts.append(f" {content}{self.eos_token}")
        if not self._llama_style:
            parts.append("<|assistant|>")
        return "".join(parts)


@cache
def load_tokenizer(name: str) -> SimTokenizer:
    return SimTokenizer(model_dir(name))
