from __future__ import annotations

import math

import aiohttp
import pytest
from aiohttp import web

from speclab.metrics.scraper import MetricsScraper, sample_summary
from speclab.model.names import PROM_QUEUE_TIME, PROM_TTFT
from speclab.servers.process import free_port

M = 'model_name="Qwen/Qwen3-8B"'


def exposition(scale: float = 1.0, *, engines: int = 1, drift: float | None = 0.002, created: float = 1.79606114806e09) -> str:
    """vLLM 0.33's format (reference §2.5) with every counter multiplied by ``scale``."""
    lines = [
        "# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.",
        "# TYPE vllm:spec_decode_num_drafts_total counter",
    ]
    for e in range(engines):
        lab = f'engine="{e}",{M}'
        lines += [
            f"vllm:spec_decode_num_drafts_total{{{lab}}} {1234.0 * scale}",
            f"vllm:spec_decode_num_drafts_created{{{lab}}} {created}",
            f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {3702.0 * scale}",
            f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {2100.0 * scale}",
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="0"}} {1000.0 * scale}',
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="1"}} {700.0 * scale}',
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="2"}} {400.0 * scale}',
            f"vllm:kv_cache_usage_perc{{{lab}}} {0.42 + 0.1 * e}",
            f"vllm:num_requests_running{{{lab}}} 8.0",
            f"vllm:num_requests_waiting{{{lab}}} 2.0",
            f'vllm:num_requests_waiting_by_reason{{{lab},reason="capacity"}} 0.0',
            f"vllm:generation_tokens_total{{{lab}}} {27453.0 * scale}",
            f"vllm:prompt_tokens_total{{{lab}}} {5000.0 * scale}",
            f"vllm:num_preemptions_total{{{lab}}} {3.0 * scale}",
            f'vllm:request_success_total{{engine="{e}",finished_reason="stop",{M}}} {131.0 * scale}',
            f'vllm:request_success_total{{engine="{e}",finished_reason="length",{M}}} {9.0 * scale}',
            f'vllm:request_queue_time_seconds_bucket{{engine="{e}",le="0.3",{M}}} {120.0 * scale}',
            f'vllm:request_queue_time_seconds_bucket{{engine="{e}",le="0.5",{M}}} {126.0 * scale}',
            f'vllm:request_queue_time_seconds_bucket{{engine="{e}",le="+Inf",{M}}} {131.0 * scale}',
            f"vllm:request_queue_time_seconds_count{{{lab}}} {131.0 * scale}",
            f"vllm:request_queue_time_seconds_sum{{{lab}}} {9.7 * scale}",
            f'vllm:time_to_first_token_seconds_bucket{{engine="{e}",le="0.001",{M}}} {0.0}',
            f'vllm:time_to_first_token_seconds_bucket{{engine="{e}",le="0.1",{M}}} {100.0 * scale}',
            f'vllm:time_to_first_token_seconds_bucket{{engine="{e}",le="+Inf",{M}}} {131.0 * scale}',
            f"vllm:time_to_first_token_seconds_count{{{lab}}} {131.0 * scale}",
            f"vllm:time_to_first_token_seconds_sum{{{lab}}} {13.1 * scale}",
            f'vllm:iteration_tokens_total_bucket{{engine="{e}",le="8.0",{M}}} {4096.0 * scale}',
        ]
    if drift is not None:
        lines += ["# TYPE speclab_sim_clock_drift_seconds gauge", f"speclab_sim_clock_drift_seconds {drift}"]
    return "\n".join(lines) + "\n"


def test_first_scrape_is_baseline_then_deltas() -> None:
    scraper = MetricsScraper("http://x/", "k3")
    first = scraper.parse(exposition(1.0), t=0.0)
    assert first.up and first.spec_drafts == 0 and first.histograms[PROM_QUEUE_TIME]["count"] == 0
    assert first.running == 8 and first.waiting == 2 and first.kv_usage == pytest.approx(0.42)
    assert first.clock_drift_s == pytest.approx(0.002)
    second = scraper.parse(exposition(1.5), t=1.0)
    assert second.spec_drafts == pytest.approx(617)
    assert second.spec_draft_tokens == pytest.approx(1851)
    assert second.spec_accepted == pytest.approx(1050)
    assert second.spec_accepted_per_pos == pytest.approx([500, 350, 200])
    assert second.generation_tokens == pytest.approx(13726.5)
    assert second.prompt_tokens == pytest.approx(2500)
    assert second.preemptions == pytest.approx(1.5)
    assert second.requests_finished == pytest.approx(70)
    queue = second.histograms[PROM_QUEUE_TIME]
    assert queue["buckets"] == [(0.3, pytest.approx(60)), (0.5, pytest.approx(3)), (math.inf, pytest.approx(2.5))]
    assert queue["count"] == pytest.approx(65.5) and queue["sum"] == pytest.approx(4.85)
    assert second.histograms[PROM_TTFT]["buckets"][0] == (0.001, 0.0)
    summary = sample_summary(second)
    assert summary["acceptance_length"] == pytest.approx(1 + 1050 / 617)
    assert summary["acceptance_rate"] == pytest.approx(2100 / 3702)


def test_engines_are_summed_and_restart_resets() -> None:
    scraper = MetricsScraper("http://x", "k3")
    scraper.parse(exposition(2.0, engines=2), t=0.0)
    grown = scraper.parse(exposition(3.0, engines=2), t=1.0)
    assert grown.spec_drafts == pytest.approx(2 * 1234)
    assert grown.running == 16 and grown.kv_usage == pytest.approx(0.47)
    restarted = scraper.parse(exposition(0.5, engines=2), t=2.0)  # counters went down
    assert restarted.spec_drafts == pytest.approx(1234)
    assert restarted.histograms[PROM_QUEUE_TIME]["count"] == pytest.approx(131)
    # restarted and already grown past the old value: the _created time tells
    later = scraper.parse(exposition(4.0, engines=2, created=1.9e9), t=3.0)
    assert later.spec_drafts == pytest.approx(2 * 4 * 1234)


def test_missing_series_are_fine() -> None:
    scraper = MetricsScraper("http://x", "base")
    text = "vllm:num_requests_running{engine=\"0\"} 1.0\n"
    scraper.parse(text, 0.0)
    sample = scraper.parse(text, 1.0)
    assert sample.up and sample.spec_drafts == 0 and sample.spec_accepted_per_pos == []
    assert sample.histograms == {} and sample.clock_drift_s is None


async def test_against_a_live_server_changing_text() -> None:
    state = {"scale": 1.0, "status": 200}

    async def metrics(request: web.Request) -> web.Response:
        assert request.headers.get("X-Probe") == "1"
        return web.Response(text=exposition(state["scale"]), status=int(state["status"]))

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    scraper = MetricsScraper(f"http://127.0.0.1:{port}", "k3", headers={"X-Probe": "1"}, timeout_s=2.0)
    try:
        async with aiohttp.ClientSession() as session:
            assert (await scraper.scrape(session, 0.0)).spec_drafts == 0
            state["scale"] = 2.0
            assert (await scraper.scrape(session, 1.0)).spec_drafts == pytest.approx(1234)
            state["status"] = 500
            broken = await scraper.scrape(session, 2.0)
            assert not broken.up and broken.error is not None and "HTTP 500" in broken.error
            state["status"], state["scale"] = 200, 0.25  # came back restarted
            assert (await scraper.scrape(session, 3.0)).spec_drafts == pytest.approx(308.5)

    finally:
        await runner.cleanup()
    async with aiohttp.ClientSession() as session:
        down = await scraper.scrape(session, 4.0)
    assert not down.up and down.error is not None and "\n" not in down.error
    assert down.error.startswith(f"http://127.0.0.1:{port}/metrics: ")
