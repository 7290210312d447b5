"""Pipeline parallelism in the step-time model: the layers split over stages, one activation hop
per stage boundary, the compute of one batch unchanged; and the weights spread over TP x PP GPUs."""

from __future__ import annotations

import pytest

from speclab.sim.hardware import GPU_PROFILES
from speclab.sim.shapes import MODEL_SHAPES
from speclab.sim.timing import PP_HOP_LATENCY_S, PP_LINK_BANDWIDTH, StepTimeModel, StepWork


@pytest.mark.parametrize("tp", [1, 2])
def test_each_stage_boundary_adds_one_activation_hop(tp: int) -> None:
    gpu, shape = GPU_PROFILES["H100"], MODEL_SHAPES["sim-70b"]
    work = StepWork(tokens=64, kv_read_tokens=64 * 900, attn_pairs=64 * 900)
    flat = StepTimeModel(gpu, shape, tp=tp).target_pass(work)
    for pp in (2, 4):
        piped = StepTimeModel(gpu, shape, tp=tp, pp=pp).target_pass(work)
        hop = PP_HOP_LATENCY_S + 64 * shape.hidden_size * shape.bytes_per_param / PP_LINK_BANDWIDTH
        assert piped - flat == pytest.approx((pp - 1) * hop, rel=1e-9)


def test_a_model_too_big_for_two_gpus_fits_on_two_by_two() -> None:
    from speclab.sim.api import EngineConfig
    from speclab.sim.engine import SimEngine
    from speclab.sim.errors import SimStartupError

    with pytest.raises(SimStartupError):
        SimEngine(EngineConfig(model="sim-70b", tensor_parallel_size=1, max_model_len=4096))
    two_by_two = SimEngine(EngineConfig(model="sim-70b", tensor_parallel_size=2, pipeline_parallel_size=2,
                                        max_model_len=4096))
    one_by_four = SimEngine(EngineConfig(model="sim-70b", tensor_parallel_size=4, max_model_len=4096))
    assert two_by_two.memory.kv_cache_gib == pytest.approx(one_by_four.memory.kv_cache_gib)
