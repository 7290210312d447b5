"""The shapes of the real models each simulator stand-in stands for, from their public configs.

The step-time and memory models price a pass by these figures (weights streamed, FLOPs per token,
KV bytes per token), so a stand-in costs what its real model costs. ``vocab_size`` is the real
model's (vLLM refuses a draft_model pair whose vocab sizes differ); the simulator's own tokenizer
is far smaller and is what the tokenizer-alignment gate reads from the stand-in's files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

# EAGLE-3 heads predict over a reduced draft vocabulary (32,000 for the public Llama-3.1 heads).
EAGLE3_DRAFT_VOCAB: Final = 32000


@dataclass(frozen=True, slots=True)
class ModelShape:
    stands_for: str
    num_parameters: float
    num_layers: int
    hidden_size: int  # also the attention query width (heads × head_dim) of these models
    num_kv_heads: int
    head_dim: int
    max_position_embeddings: int
    vocab_size: int
    tied_embeddings: bool  # the input embedding is the lm_head (counted once in num_parameters)
    bytes_per_param: int = 2  # bf16

    @property
    def weight_bytes(self) -> float:
        """What the weights occupy in GPU memory."""
        return self.num_parameters * self.bytes_per_param

    @property
    def matmul_parameters(self) -> float:
        """Parameters a forward pass multiplies by; an untied embedding table is only indexed."""
        return self.num_parameters - (0 if self.tied_embeddings else self.vocab_size * self.hidden_size)

    @property
    def streamed_bytes(self) -> float:
        """Weight bytes one forward pass reads from HBM."""
        return self.matmul_parameters * self.bytes_per_param

    @property
    def layer_parameters(self) -> float:
        tables = self.vocab_size * self.hidden_size * (1 if self.tied_embeddings else 2)
        return (self.num_parameters - tables) / self.num_layers

    @property
    def kv_bytes_per_token(self) -> int:
        return 2 * self.num_layers * self.num_kv_heads * self.head_dim * self.bytes_per_param


MODEL_SHAPES: Final[dict[str, ModelShape]] = {
    "sim-70b": ModelShape("meta-llama/Llama-3.1-70B-Instruct", 70.55e9, 80, 8192, 8, 128, 131072, 128256, False),
    "sim-72b": ModelShape("Qwen/Qwen2.5-72B-Instruct", 72.71e9, 80, 8192, 8, 128, 32768, 152064, False),
    "sim-8b": ModelShape("meta-llama/Llama-3.1-8B-Instruct", 8.03e9, 32, 4096, 8, 128, 131072, 128256, False),
    "sim-1b": ModelShape("meta-llama/Llama-3.2-1B-Instruct", 1.236e9, 16, 2048, 8, 64, 131072, 128256, True),
    "sim-1b-misaligned": ModelShape("meta-llama/Llama-3.2-1B-Instruct", 1.236e9, 16, 2048, 8, 64, 131072, 128256,
                                    True),
    "sim-0.5b": ModelShape("Qwen/Qwen2.5-0.5B-Instruct", 0.494e9, 24, 896, 2, 64, 32768, 151936, True),
}


def eagle_head(target: ModelShape, method: str) -> ModelShape:
    """The draft head EAGLE (``eagle``), EAGLE-3 (``eagle3``) or an MTP module (``mtp``) adds to ``target``.

    One decoder layer of the target's width, an input projection fusing 2 (EAGLE, MTP: the token
    embedding and the hidden state) or 3 (EAGLE-3) hidden states, and an lm_head over the full or
    the reduced draft vocabulary (an MTP module shares the target's, which each pass still reads);
    the token embedding is the target's, so it is not counted again.
    """
    h = target.hidden_size
    fused = 3 if method == "eagle3" else 2
    vocab = EAGLE3_DRAFT_VOCAB if method == "eagle3" else target.vocab_size
    params = target.layer_parameters + fused * h * h + vocab * h
    return ModelShape(f"{method} head for {target.stands_for}", params, 1, h, target.num_kv_heads, target.head_dim,
                      target.max_position_embeddings, target.vocab_size, True, target.bytes_per_param)


def vocab_mismatch(target: str, draft: str) -> tuple[int, int] | None:
    """(target, draft) real vocab sizes when the stand-ins' real models differ, else None."""
    t, d = MODEL_SHAPES.get(target), MODEL_SHAPES.get(draft)
    if t is None or d is None or t.vocab_size == d.vocab_size:
        return None
    return t.vocab_size, d.vocab_size


def vocab_mismatch_message(target_vocab: int, draft_vocab: int) -> str:
    """vLLM 0.33's words (``SpeculativeConfig.verify_equal_vocab_size_if_draft_model``)."""
    return ("Target and draft model should have the same vocabulary size. "
            f"Target model vocab_size={target_vocab}. "
            f"Draft model vocab_size={draft_vocab}. "
            "Using models with different tokenizers can cause out-of-bounds "
            "errors during speculative decoding.")
