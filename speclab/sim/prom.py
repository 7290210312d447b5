"""The simulator's ``/metrics``: vLLM 0.33's Prometheus series on a dedicated registry.

Names, types, labels and buckets follow vLLM's ``PrometheusStatLogger`` and ``SpecDecodingProm``
so the scraper cannot tell the simulator from vLLM. Every series is pre-created at 0, as vLLM
does. Times are modelled seconds. ``speclab_sim_*`` series are the simulator's own: its clock drift, its
time scale and its modelled step time.
"""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from speclab.model import names

from .api import StepStats
from .prom_text import TextExposition

FINISHED_REASONS: Final = ("stop", "length", "abort", "error", "repetition")


def request_token_buckets(max_model_len: int) -> list[float]:
    """vLLM's 1-2-5 series up to max_model_len."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_model_len:
                return buckets
            buckets.append(float(value))
        exponent += 1


class SimMetrics:
    def __init__(self, model_name: str, *, num_spec_tokens: int | None, max_model_len: int,
                 cache_info: dict[str, str], time_scale: float = 1.0) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        labels = ["model_name", "engine"]
        lv = {"model_name": model_name, "engine": "0"}
        self._lv = lv

        def gauge(name: str, doc: str) -> Gauge:
            return Gauge(name, doc, labels, registry=r)

        def counter(name: str, doc: str) -> Counter:
            return Counter(name, doc, labels, registry=r)

        def hist(name: str, doc: str, buckets: tuple[float, ...] | list[float]) -> Histogram:
            return Histogram(name, doc, labels, buckets=list(buckets), registry=r)

        self.running = gauge(names.PROM_RUNNING, "Number of requests in model execution batches.").labels(**lv)
        self.waiting = gauge(names.PROM_WAITING, "Number of requests waiting to be processed.").labels(**lv)
        by_reason = Gauge("vllm:num_requests_waiting_by_reason", "Number of requests waiting, by reason.",
                          [*labels, "reason"], registry=r)
        self.waiting_capacity = by_reason.labels(**lv, reason="capacity")
        self.waiting_deferred = by_reason.labels(**lv, reason="deferred")
        self.kv_usage = gauge(names.PROM_KV_USAGE, "KV-cache usage. 1 means 100 percent usage.").labels(**lv)
        self.preemptions = counter(names.PROM_PREEMPTIONS, "Cumulative number of preemption from the engine.").labels(**lv)
        self.prompt_tokens = counter(names.PROM_PROMPT_TOKENS, "Number of prefill tokens processed.").labels(**lv)
        self.generation_tokens = counter(names.PROM_GENERATION_TOKENS, "Number of generation tokens processed.").labels(**lv)
        success = Counter(names.PROM_REQUEST_SUCCESS, "Count of successfully processed requests.",
                          [*labels, "finished_reason"], registry=r)
        self.success = {reason: success.labels(**lv, finished_reason=reason) for reason in FINISHED_REASONS}
        self.iteration_tokens = hist(names.PROM_ITERATION_TOKENS, "Histogram of number of tokens per engine_step.",
                                     names.BUCKETS_ITERATION_TOKENS).labels(**lv)
        token_buckets = request_token_buckets(max_model_len)
        self.req_prompt_tokens = hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                      token_buckets).labels(**lv)
        self.req_generation_tokens = hist("vllm:request_generation_tokens", "Number of generation tokens processed.",
                                          token_buckets).labels(**lv)
        self.req_max_tokens = hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.",
                                   token_buckets).labels(**lv)
        self.req_n = hist("vllm:request_params_n", "Histogram of the n request parameter.",
                          (1, 2, 5, 10, 20)).labels(**lv)
        self.req_preemptions = hist("vllm:request_num_preemptions", "Number of preemptions per request.",
                                    (1, 2, 3, 4, 5, 10, 20)).labels(**lv)
        self.ttft = hist(names.PROM_TTFT, "Histogram of time to first token in seconds.", names.BUCKETS_TTFT).labels(**lv)
        self.itl = hist(names.PROM_ITL, "Histogram of inter-token latency in seconds.", names.BUCKETS_ITL).labels(**lv)
        self.tpot = hist(names.PROM_TPOT, "Histogram of time_per_output_token_seconds per request.",
                         names.BUCKETS_ITL).labels(**lv)
        lat = names.BUCKETS_REQUEST_LATENCY
        self.e2e = hist(names.PROM_E2E_TIME, "Histogram of e2e request latency in seconds.", lat).labels(**lv)
        self.queue = hist(names.PROM_QUEUE_TIME, "Histogram of time spent in WAITING phase for request.", lat).labels(**lv)
        self.inference = hist(names.PROM_INFERENCE_TIME, "Histogram of time spent in RUNNING phase for request.",
                              lat).labels(**lv)
        self.prefill = hist(names.PROM_PREFILL_TIME, "Histogram of time spent in PREFILL phase for request.",
                            lat).labels(**lv)
        self.decode = hist(names.PROM_DECODE_TIME, "Histogram of time spent in DECODE phase for request.", lat).labels(**lv)
        info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                     [*sorted(cache_info), "engine"], registry=r)
        info.labels(**cache_info, engine="0").set(1)
        self.drift = Gauge(names.PROM_SIM_CLOCK_DRIFT,
                           "How far the simulator's real clock trails its modelled clock (seconds).", registry=r)
        self.time_scale = Gauge(names.PROM_SIM_TIME_SCALE,
                                "Wall seconds per modelled second (--sim-time-scale).", registry=r)
        self.time_scale.set(time_scale)
        # Modelled step time as a sum and a count, so a scraper's deltas give the mean step of an
        # interval, the yardstick drift is judged against.
        self.steps = Counter(names.PROM_SIM_STEPS, "Engine steps taken.", registry=r)
        self.step_seconds = Counter(names.PROM_SIM_STEP_SECONDS, "Modelled seconds of engine steps.", registry=r)
        self.step_drift = Counter(names.PROM_SIM_STEP_DRIFT, "Sum over engine steps of how late each ended "
                                  "against its modelled end (modelled seconds).", registry=r)
        self.num_spec_tokens = num_spec_tokens
        if num_spec_tokens:
            self.spec_drafts = counter(names.PROM_SPEC_DRAFTS, "Number of spec decoding drafts.").labels(**lv)
            self.spec_draft_tokens = counter(names.PROM_SPEC_DRAFT_TOKENS, "Number of draft tokens.").labels(**lv)
            self.spec_accepted = counter(names.PROM_SPEC_ACCEPTED, "Number of accepted tokens.").labels(**lv)
            per_pos = Counter(names.PROM_SPEC_ACCEPTED_PER_POS, "Accepted tokens per draft position.",
                              [*labels, "position"], registry=r)
            self.spec_per_pos = [per_pos.labels(**lv, position=str(i)) for i in range(num_spec_tokens)]
        self._text = TextExposition(r)

    def observe_step(self, stats: StepStats) -> None:
        self.running.set(stats.running)
        self.waiting.set(stats.waiting)
        self.waiting_capacity.set(stats.waiting)
        self.kv_usage.set(stats.kv_cache_usage)
        if stats.preemptions:
            self.preemptions.inc(stats.preemptions)
        if stats.prompt_tokens:
            self.prompt_tokens.inc(stats.prompt_tokens)
        if stats.generation_tokens:
            self.generation_tokens.inc(stats.generation_tokens)
        if stats.iteration_tokens > 0:
            self.iteration_tokens.observe(stats.iteration_tokens)
        if self.num_spec_tokens:
            self.spec_drafts.inc(stats.spec_drafts)
            self.spec_draft_tokens.inc(stats.spec_draft_tokens)
            self.spec_accepted.inc(stats.spec_accepted)
            for pos, count in enumerate(stats.spec_accepted_per_pos[: self.num_spec_tokens]):
                if count:
                    self.spec_per_pos[pos].inc(count)

    def set_idle(self) -> None:
        """Nothing left in the engine: no step will run to report it, so say so here."""
        for gauge in (self.running, self.waiting, self.waiting_capacity, self.waiting_deferred):
            gauge.set(0)

    def observe_first_token(self, ttft_s: float) -> None:
        self.ttft.observe(max(ttft_s, 0.0))

    def observe_output_gap(self, itl_s: float) -> None:
        self.itl.observe(max(itl_s, 0.0))

    def observe_finished(self, *, reason: str, e2e: float, queue: float | None, prefill: float | None,
                         decode: float | None, inference: float | None, prompt_tokens: int,
                         generation_tokens: int, max_tokens: int, preemptions: int) -> None:
        self.success.get(reason, self.success["abort"]).inc()
        self.e2e.observe(max(e2e, 0.0))
        for hist, value in ((self.queue, queue), (self.prefill, prefill), (self.decode, decode),
                            (self.inference, inference)):
            if value is not None:
                hist.observe(max(value, 0.0))
        if decode is not None and generation_tokens > 1:
            self.tpot.observe(max(decode, 0.0) / (generation_tokens - 1))
        self.req_prompt_tokens.observe(prompt_tokens)
        self.req_generation_tokens.observe(generation_tokens)
        self.req_max_tokens.observe(max_tokens)
        self.req_n.observe(1)
        self.req_preemptions.observe(preemptions)

    def observe_step_time(self, modelled_s: float, drift_s: float) -> None:
        if modelled_s > 0:
            self.steps.inc()
            self.step_seconds.inc(modelled_s)
            self.step_drift.inc(max(drift_s, 0.0))

    def set_drift(self, seconds: float) -> None:
        self.drift.set(seconds)

    def render(self) -> bytes:
        return self._text.render()
