"""Modelled step time: additive costs calibrated to measured vLLM steps, with a compute floor.

A forward pass of a model costs a fixed part (streaming its weights once, plus a launch cost per
layer), a part per batched token (2 FLOPs per parameter at the profile's share of peak) and a
part per KV-cache token its attention reads; it never costs less than its FLOPs (matmuls plus
attention) at that share of peak, which is what binds for long prefills. Every engine step adds
the scheduler overhead. On the published H100 fit the sum reproduces vLLM's steps, so a k=4
verify costs ~1.5x a decode at batch 64 rather than nothing. Drafting adds the passes it takes: a
draft model's k sequential passes (each with a fixed cost that grows with the draft's depth),
an EAGLE head's k passes, or n-gram lookup at a small share of the verify pass. Tensor
parallelism divides the weights, FLOPs and KV and adds two all-reduces per layer. Pipeline
parallelism (stages on other nodes) splits the layers: one batch still passes every layer in
turn, so its compute is unchanged, and each of the ``pp - 1`` stage boundaries adds a hop that
sends the batch's activations between nodes. Overlapping several batches across stages is not
modelled (the simulator runs one step at a time), so PP shows its memory relief and its cost,
not the throughput a full pipeline can reach.
"""

from __future__ import annotations

from dataclasses import dataclass

from .hardware import GpuProfile
from .shapes import ModelShape

# One pipeline hop between nodes: a 400 Gb/s NIC per GPU (InfiniBand NDR / RoCE), its send latency.
PP_LINK_BANDWIDTH = 50e9  # bytes/s
PP_HOP_LATENCY_S = 20e-6


@dataclass(slots=True)
class StepWork:
    """What one engine step computes."""

    tokens: int = 0  # target tokens: prefill chunks + 1+k per decoding sequence
    kv_read_tokens: int = 0  # context tokens whose KV the target's attention reads
    attn_pairs: int = 0  # query x key pairs the target's attention scores (for the compute floor)
    draft_passes: int = 0  # sequential draft forward passes (k for a draft model or head)
    draft_batch: int = 0  # sequences drafted per pass
    draft_kv_tokens: int = 0  # draft context tokens read per pass
    draft_prefill_tokens: int = 0  # prompt tokens the draft prefills this step (first pass)
    draft_prefill_pairs: int = 0  # their attention pairs
    lookups: int = 0  # sequences that ran n-gram prompt lookup this step


def attention_pairs(new_tokens: int, cached: int) -> int:
    """Query x key pairs when ``new_tokens`` attend causally after ``cached`` tokens."""
    return new_tokens * cached + new_tokens * (new_tokens + 1) // 2


class PassCost:
    """The time of one forward pass of ``shape`` on ``tp`` GPUs of ``gpu``."""

    def __init__(self, gpu: GpuProfile, shape: ModelShape, tp: int, pass_s: float, layer_s: float,
                 pp: int = 1) -> None:
        self.gpu, self.shape, self.tp, self.pp = gpu, shape, tp, pp
        self.fixed_s = (pass_s + shape.num_layers * layer_s
                        + shape.streamed_bytes / (tp * gpu.hbm_bandwidth * gpu.weight_efficiency))
        self.flops_per_s = tp * gpu.peak_flops * gpu.flops_efficiency
        self.token_s = 2 * shape.matmul_parameters / self.flops_per_s
        kv_shards = min(tp, shape.num_kv_heads)  # beyond that, KV heads are replicated
        self.kv_token_s = shape.kv_bytes_per_token / (kv_shards * gpu.hbm_bandwidth * gpu.kv_efficiency)
        self.pair_flops = 4 * shape.num_layers * shape.hidden_size  # QK^T and PV, per query-key pair

    def additive(self, tokens: int, kv_tokens: int) -> float:
        return self.fixed_s + tokens * self.token_s + kv_tokens * self.kv_token_s

    def floor(self, tokens: int, pairs: int) -> float:
        return (2 * self.shape.matmul_parameters * tokens + self.pair_flops * pairs) / self.flops_per_s

    def comm(self, tokens: int) -> float:
        return self.tp_comm(tokens) + self.pp_comm(tokens)

    def tp_comm(self, tokens: int) -> float:
        if self.tp == 1:
            return 0.0
        gpu, tp = self.gpu, self.tp
        payload = tokens * self.shape.hidden_size * self.shape.bytes_per_param * 2 * (tp - 1) / tp
        return 2 * self.shape.num_layers * (gpu.allreduce_latency_s + payload / gpu.interconnect_bandwidth)

    def pp_comm(self, tokens: int) -> float:
        """The stage boundaries' hops: each sends the batch's hidden states to the next node."""
        if self.pp == 1:
            return 0.0
        payload = tokens * self.shape.hidden_size * self.shape.bytes_per_param
        return (self.pp - 1) * (PP_HOP_LATENCY_S + payload / PP_LINK_BANDWIDTH)

    def time(self, tokens: int, kv_tokens: int, pairs: int | None = None) -> float:
        pairs = kv_tokens if pairs is None else pairs
        return max(self.additive(tokens, kv_tokens), self.floor(tokens, pairs)) + self.comm(tokens)


class StepTimeModel:
    """Step time for a target, optionally a draft model (or an EAGLE head, ``head=True``)."""

    def __init__(self, gpu: GpuProfile, target: ModelShape, draft: ModelShape | None = None, tp: int = 1, *,
                 head: bool = False, pp: int = 1) -> None:
        self.gpu, self.target_shape, self.draft_shape, self.tp = gpu, target, draft, tp
        self.target = PassCost(gpu, target, tp, 0.0, gpu.layer_s, pp)  # the draft runs unpipelined
        self.draft: PassCost | None = None
        if draft is not None:
            pass_s = gpu.eagle_pass_s if head else gpu.draft_pass_s
            self.draft = PassCost(gpu, draft, tp, pass_s, gpu.draft_layer_s)

    def target_pass(self, work: StepWork) -> float:
        return self.target.time(work.tokens, work.kv_read_tokens, work.attn_pairs)

    def draft_time(self, work: StepWork) -> float:
        if self.draft is None or not (work.draft_passes or work.draft_prefill_tokens):
            return 0.0
        t = 0.0
        batch = work.draft_batch if work.draft_passes else 0
        for i in range(max(work.draft_passes, 1)):
            tokens, kv = batch, work.draft_kv_tokens + i * batch
            pairs = kv
            if i == 0:
                tokens += work.draft_prefill_tokens
                kv += work.draft_prefill_tokens
                pairs += work.draft_prefill_pairs
            t += self.draft.time(tokens, kv, pairs)
        return t

    def step_time(self, work: StepWork) -> float:
        if work.tokens == 0 and work.draft_passes == 0:
            return 0.0
        target = self.target_pass(work)
        lookup = self.gpu.ngram_fraction * target if work.lookups else 0.0
        return self.gpu.step_overhead_s + target + self.draft_time(work) + lookup
