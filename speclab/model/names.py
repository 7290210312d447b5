"""Names shared by every layer: latency metrics, error kinds, percentile points, vLLM series.

Use these constants instead of string literals so the UI, reports, recordings and simulator agree.
"""

from __future__ import annotations

from enum import Enum
from typing import Final


class Metric(str, Enum):
    """Latency metrics kept as HDR histograms (microseconds), per (metric, class, variant)."""

    SCHEDULE_LAG = "schedule_lag"
    TTFT = "ttft"
    TTFT_CORRECTED = "ttft_corrected"
    E2E = "e2e"
    E2E_CORRECTED = "e2e_corrected"
    TPOT = "tpot"
    SERVER_QUEUE = "server_queue"
    SERVER_PREFILL = "server_prefill"
    SERVER_DECODE = "server_decode"


LATENCY_METRICS: Final = tuple(Metric)

# Corrected view is the default; these pairs map an uncorrected metric to its corrected twin.
CORRECTED: Final = {Metric.TTFT: Metric.TTFT_CORRECTED, Metric.E2E: Metric.E2E_CORRECTED}


class ErrorKind(str, Enum):
    CONNECT = "connect"
    HTTP_4XX = "http_4xx"
    HTTP_429 = "http_429"
    HTTP_5XX = "http_5xx"
    TIMEOUT = "timeout"
    STALL = "stall"
    MALFORMED_STREAM = "malformed_stream"
    STREAM_ERROR_EVENT = "stream_error_event"
    TRUNCATED = "truncated"
    CANCELLED = "cancelled"


class CountSource(str, Enum):
    """Where a speculative-decoding or timing number came from."""

    EXACT = "exact"  # the response's per-request metrics
    ESTIMATED = "estimated"  # tokens per streamed chunk (chunks can merge)
    SERVER = "server_metrics"  # /metrics histogram deltas: aggregate only, bucket resolution
    MIXED = "mixed"  # some requests had per-request timing, some did not
    NONE = "none"


# Percentile points every snapshot carries: one pass over the counts computes all of them.
PERCENTILE_POINTS: Final[tuple[float, ...]] = (
    0.0, 50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.95, 99.99, 100.0,
)

# Upper bounds (seconds) of the latency buckets speclab's own Prometheus histograms expose: one set
# for every latency, fine enough for TPOT (ms) and wide enough for long e2e (minutes).
LATENCY_BUCKETS_S: Final[tuple[float, ...]] = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
)

HIST_LOWEST_US: Final = 1
HIST_HIGHEST_US: Final = 3_600_000_000
HIST_SIGNIFICANT_DIGITS: Final = 3
INTERVAL_S: Final = 1.0
# The environment variable carrying the token a launched simulator serves on /version, so speclab
# knows the server answering on a port is the one it started (speclab.servers.identity).
LAUNCH_TOKEN_ENV: Final = "SPECLAB_LAUNCH_TOKEN"
SNAPSHOT_HZ: Final = 4.0

# vLLM 0.33 Prometheus series (as exposed, prefix included) that speclab serves and scrapes.
VLLM_PREFIX: Final = "vllm:"
PROM_RUNNING: Final = "vllm:num_requests_running"
PROM_WAITING: Final = "vllm:num_requests_waiting"
PROM_KV_USAGE: Final = "vllm:kv_cache_usage_perc"
PROM_PREEMPTIONS: Final = "vllm:num_preemptions"
PROM_PROMPT_TOKENS: Final = "vllm:prompt_tokens"
PROM_GENERATION_TOKENS: Final = "vllm:generation_tokens"
PROM_REQUEST_SUCCESS: Final = "vllm:request_success"
PROM_SPEC_DRAFTS: Final = "vllm:spec_decode_num_drafts"
PROM_SPEC_DRAFT_TOKENS: Final = "vllm:spec_decode_num_draft_tokens"
PROM_SPEC_ACCEPTED: Final = "vllm:spec_decode_num_accepted_tokens"
PROM_SPEC_ACCEPTED_PER_POS: Final = "vllm:spec_decode_num_accepted_tokens_per_pos"
PROM_QUEUE_TIME: Final = "vllm:request_queue_time_seconds"
PROM_PREFILL_TIME: Final = "vllm:request_prefill_time_seconds"
PROM_DECODE_TIME: Final = "vllm:request_decode_time_seconds"
PROM_INFERENCE_TIME: Final = "vllm:request_inference_time_seconds"
PROM_E2E_TIME: Final = "vllm:e2e_request_latency_seconds"
PROM_TTFT: Final = "vllm:time_to_first_token_seconds"
PROM_ITL: Final = "vllm:inter_token_latency_seconds"
PROM_TPOT: Final = "vllm:request_time_per_output_token_seconds"
PROM_ITERATION_TOKENS: Final = "vllm:iteration_tokens_total"
PROM_SIM_CLOCK_DRIFT: Final = "speclab_sim_clock_drift_seconds"
PROM_SIM_TIME_SCALE: Final = "speclab_sim_time_scale"
PROM_SIM_STEPS: Final = "speclab_sim_steps"  # a counter: exposed as ..._total
PROM_SIM_STEP_SECONDS: Final = "speclab_sim_step_seconds"  # a counter of modelled seconds: ..._total
PROM_SIM_STEP_DRIFT: Final = "speclab_sim_step_drift_seconds"  # a counter: summed lateness of steps, ..._total

# vLLM's default bucket families (v1/metrics/buckets.py).
BUCKETS_REQUEST_LATENCY: Final = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)
BUCKETS_TTFT: Final = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)
BUCKETS_ITL: Final = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0,
)
BUCKETS_ITERATION_TOKENS: Final = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
