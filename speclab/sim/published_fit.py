"""The published vLLM step-time fit the simulator is calibrated to, and how its constants follow.

SpecDecode-Bench ("Speculative Decoding: Performance or Illusion?", arXiv 2601.11580; code in
``SpecDecode-Bench/simulator``, ``predictor.py``, class ``Llama8BH100``) fitted vLLM v0.10.1 on
Llama-3.1-8B-Instruct on one H100 at batch 1-64: a forward pass costs a fixed time, plus a time per
batched token, plus a time per token held in the KV cache; every engine step adds a scheduler
overhead; an EAGLE-3 proposal (3 head passes) has a fit of the same form. The same authors put a
draft model's forward pass at 37.5% of the 8B target's. :func:`derive_constants` turns those
figures into the per-GPU constants of ``hardware.GpuProfile`` (efficiencies against bandwidth and
FLOP/s, fixed seconds), so the same step model prices other shapes and GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from .shapes import MODEL_SHAPES, ModelShape, eagle_head


@dataclass(frozen=True, slots=True)
class PublishedFit:
    """``predictor.Llama8BH100``: seconds, per token where a count multiplies."""

    target_c_kv: float
    target_c_compute: float
    target_c_fixed: float
    draft_c_kv: float
    draft_c_num_spec_tokens: float
    draft_c_fixed: float
    ngram_draft_percentage: float
    overhead_constant_per_step: float

    def forward_pass(self, kv_tokens: float, batched_tokens: float) -> float:
        return kv_tokens * self.target_c_kv + batched_tokens * self.target_c_compute + self.target_c_fixed

    def step(self, kv_tokens: float, batched_tokens: float) -> float:
        """One engine step without drafting: the forward pass plus the per-step overhead."""
        return self.forward_pass(kv_tokens, batched_tokens) + self.overhead_constant_per_step

    def eagle_proposal(self, kv_tokens: float, draft_tokens: float) -> float:
        return kv_tokens * self.draft_c_kv + draft_tokens * self.draft_c_num_spec_tokens + self.draft_c_fixed


LLAMA_8B_H100: Final = PublishedFit(
    target_c_kv=3.92645679e-08,
    target_c_compute=2.10103129e-05,
    target_c_fixed=5.88590713e-03,
    draft_c_kv=2.37768493e-09,
    draft_c_num_spec_tokens=8.41429603e-07,
    draft_c_fixed=2.13526175e-03,
    ngram_draft_percentage=0.005875,
    overhead_constant_per_step=1.20683946e-03,
)
FIT_TARGET: Final = "sim-8b"  # Llama-3.1-8B-Instruct
FIT_DRAFT: Final = "sim-1b"  # Llama-3.2-1B-Instruct, the draft model the ratio below is applied to
EAGLE_PROPOSAL_PASSES: Final = 3  # the fitted EAGLE-3 proposal ran 3 head passes
DRAFT_TO_TARGET_PASS: Final = 0.375  # a draft model's forward pass ÷ the 8B target's (same authors)
RATIO_CONTEXT: Final = 1024  # context per sequence at which that ratio is taken (batch 1)
# The share of HBM bandwidth that streaming the weights achieves: the measured-copy ratio of the
# hardware table (H200: about 4.3 of 4.8 TB/s). The fit's fixed cost beyond that stream is per-layer
# launch gaps; the fit alone cannot split the two, so this figure is an assumption.
WEIGHT_STREAM_EFFICIENCY: Final = 0.89


@dataclass(frozen=True, slots=True)
class StepConstants:
    """The step model's per-GPU constants (see ``hardware.GpuProfile`` for their meaning)."""

    step_overhead_s: float
    weight_efficiency: float
    kv_efficiency: float
    flops_efficiency: float
    layer_s: float
    draft_pass_s: float
    draft_layer_s: float
    eagle_pass_s: float
    ngram_fraction: float


def derive_constants(hbm_bandwidth: float, peak_flops: float, fit: PublishedFit = LLAMA_8B_H100,
                     target: ModelShape = MODEL_SHAPES[FIT_TARGET],
                     draft: ModelShape = MODEL_SHAPES[FIT_DRAFT]) -> StepConstants:
    """The constants under which the step model reproduces ``fit`` on the GPU it was measured on."""
    bw, peak = hbm_bandwidth, peak_flops
    flops_eff = 2 * target.matmul_parameters / (fit.target_c_compute * peak)
    kv_eff = target.kv_bytes_per_token / (fit.target_c_kv * bw)
    weight_eff = WEIGHT_STREAM_EFFICIENCY
    layer_s = (fit.target_c_fixed - target.streamed_bytes / (bw * weight_eff)) / target.num_layers
    if layer_s < 0:
        raise ValueError("the fit's fixed cost is below the weight stream at the assumed efficiency")
    target_pass = fit.forward_pass(RATIO_CONTEXT, 1)
    draft_variable = (draft.num_layers * layer_s + draft.streamed_bytes / (bw * weight_eff)
                      + 2 * draft.matmul_parameters / (peak * flops_eff)
                      + RATIO_CONTEXT * draft.kv_bytes_per_token / (bw * kv_eff))
    head = eagle_head(target, "eagle3")
    eagle_pass_s = fit.draft_c_fixed / EAGLE_PROPOSAL_PASSES - layer_s - head.streamed_bytes / (bw * weight_eff)
    return StepConstants(
        step_overhead_s=fit.overhead_constant_per_step,
        weight_efficiency=weight_eff,
        kv_efficiency=kv_eff,
        flops_efficiency=flops_eff,
        layer_s=layer_s,
        draft_pass_s=DRAFT_TO_TARGET_PASS * target_pass - draft_variable,
        draft_layer_s=layer_s,
        eagle_pass_s=eagle_pass_s,
        ngram_fraction=fit.ngram_draft_percentage,
    )
