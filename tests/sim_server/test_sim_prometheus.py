"""/metrics: vLLM's series, types and labels, pre-created, and spec counters that reconcile."""

from __future__ import annotations

import asyncio

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from speclab.model import names

from .conftest import SimProcess
from .sse import chunks, get, post_stream


async def scrape(url: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    status, text = await get(url + "/metrics")
    assert status == 200
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def one(series: dict[str, dict[tuple[tuple[str, str], ...], float]], name: str, **labels: str) -> float:
    values = [v for k, v in series[name].items() if set(labels.items()) <= set(k)]
    assert len(values) == 1, (name, labels, series.get(name))
    return values[0]


async def test_series_precreated_without_spec(sim_plain: SimProcess) -> None:
    s = await scrape(sim_plain.url)
    for name in (names.PROM_RUNNING, names.PROM_WAITING, names.PROM_KV_USAGE):
        assert one(s, name, model_name="plain-8b", engine="0") >= 0
    for name in (names.PROM_PREEMPTIONS, names.PROM_PROMPT_TOKENS, names.PROM_GENERATION_TOKENS):
        assert name + "_total" in s
    for reason in ("stop", "length", "abort"):
        assert (names.PROM_REQUEST_SUCCESS + "_total") in s
        one(s, names.PROM_REQUEST_SUCCESS + "_total", finished_reason=reason)
    for hist in (names.PROM_QUEUE_TIME, names.PROM_PREFILL_TIME, names.PROM_DECODE_TIME, names.PROM_INFERENCE_TIME,
                 names.PROM_E2E_TIME, names.PROM_TTFT, names.PROM_ITL, names.PROM_TPOT, names.PROM_ITERATION_TOKENS):
        assert hist + "_bucket" in s and hist + "_count" in s, hist
    les = sorted(float(dict(k)["le"]) for k in s[names.PROM_QUEUE_TIME + "_bucket"])
    assert les[:-1] == list(names.BUCKETS_REQUEST_LATENCY)
    assert not any(n.startswith("vllm:spec_decode") for n in s)
    assert names.PROM_SIM_CLOCK_DRIFT in s
    assert one(s, "vllm:cache_config_info", engine="0") == 1
    one(s, "vllm:num_requests_waiting_by_reason", reason="capacity")


async def test_spec_counters_reconcile_with_per_request_sums(sim: SimProcess) -> None:
    before = await scrape(sim.url)
    body = {"prompt": "The history of", "max_tokens": 20, "stream_options": {"include_usage": True},
            "return_token_ids": True, "ignore_eos": True}
    results = await asyncio.gather(*(post_stream(sim.url + "/v1/completions", body) for _ in range(4)))
    after = await scrape(sim.url)
    steps = drafted = accepted = tokens = gaps = 0
    for events in results:
        *content, tail = chunks(events)
        gaps += len(content) - 1
        sd = tail["metrics"]["speculative_decoding"]
        steps += sd["num_spec_steps"]
        drafted += sd["num_draft_tokens"]
        accepted += sd["num_accepted_draft_tokens"]
        tokens += tail["usage"]["completion_tokens"]

    def delta(name: str, **labels: str) -> float:
        return one(after, name, **labels) - one(before, name, **labels)

    assert delta(names.PROM_SPEC_DRAFTS + "_total") == steps
    assert delta(names.PROM_SPEC_DRAFT_TOKENS + "_total") == drafted
    assert delta(names.PROM_SPEC_ACCEPTED + "_total") == accepted
    per_pos = [delta(names.PROM_SPEC_ACCEPTED_PER_POS + "_total", position=str(i)) for i in range(3)]
    assert sum(per_pos) == accepted and per_pos == sorted(per_pos, reverse=True)
    assert delta(names.PROM_GENERATION_TOKENS + "_total") == tokens
    assert delta(names.PROM_REQUEST_SUCCESS + "_total", finished_reason="length") == 4
    assert delta(names.PROM_E2E_TIME + "_count") == 4
    assert delta(names.PROM_TTFT + "_count") == 4
    # one ITL observation per engine output after the first: per chunk gap, not per token
    assert delta(names.PROM_ITL + "_count") == gaps


async def test_client_disconnect_aborts_in_engine(sim_plain: SimProcess) -> None:
    before = await scrape(sim_plain.url)
    async with aiohttp.ClientSession() as s, s.post(sim_plain.url + "/v1/completions",
                                                    json={"prompt": "a", "max_tokens": 1000, "stream": True,
                                                          "ignore_eos": True}) as r:
        await r.content.readline()
    for _ in range(100):
        after = await scrape(sim_plain.url)
        aborted = (one(after, names.PROM_REQUEST_SUCCESS + "_total", finished_reason="abort")
                   - one(before, names.PROM_REQUEST_SUCCESS + "_total", finished_reason="abort"))
        if aborted == 1 and one(after, names.PROM_RUNNING) == 0:
            break
        await asyncio.sleep(0.02)
    assert aborted == 1
    generated = one(after, names.PROM_GENERATION_TOKENS + "_total") - one(before, names.PROM_GENERATION_TOKENS + "_total")
    assert generated < 1000
