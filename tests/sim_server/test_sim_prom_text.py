"""The simulator's own /metrics writer gives generate_latest's bytes, over every kind of sample it has."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

from speclab.sim.api import StepStats
from speclab.sim.prom import SimMetrics
from speclab.sim.prom_text import TextExposition


def test_render_equals_generate_latest_as_values_change() -> None:
    m = SimMetrics("sim-8b", num_spec_tokens=3, max_model_len=4096, cache_info={"block_size": "16"}, time_scale=2.5)
    assert m.render() == generate_latest(m.registry)
    for i in range(40):
        m.observe_step(StepStats(running=i, waiting=i % 3, kv_cache_usage=i / 97, preemptions=i % 2,
                                 prompt_tokens=17 * i, generation_tokens=3 * i, iteration_tokens=i + 1,
                                 spec_drafts=i, spec_draft_tokens=3 * i, spec_accepted=2 * i,
                                 spec_accepted_per_pos=[i, i // 2, 0]))
        m.observe_step_time(0.0123 * (i + 1), 1e-7 * i)
        m.set_drift(1e-9 * i * i)
        m.observe_first_token(0.01 * i)
        m.observe_output_gap(1e-4 * i)
        m.observe_finished(reason=("stop", "length", "abort", "nonsense")[i % 4], e2e=0.1 * i, queue=None if i % 5 else 1e-3,
                           prefill=0.02, decode=0.3 * i, inference=2.0 ** -i, prompt_tokens=i, generation_tokens=i * 7,
                           max_tokens=4096, preemptions=i % 3)
        assert m.render() == generate_latest(m.registry), i


def test_label_values_are_escaped_like_generate_latest() -> None:
    r = CollectorRegistry()
    Gauge("g", 'a "doc"\\ with\nnewline', ["model_name"], registry=r).labels(model_name='x"y\\z\nw').set(1e22)
    Counter("c", "counted", registry=r).inc(123456789.5)
    assert TextExposition(r).render() == generate_latest(r)


def test_a_name_needing_utf8_escaping_is_refused() -> None:
    r = CollectorRegistry()
    Gauge("naïve", "x", registry=r).set(1)
    with pytest.raises(ValueError, match="generate_latest"):
        TextExposition(r).render()
