"""PromQL over vLLM 0.33's series, written once for the rules and the dashboard alike.

Each builder takes a range (``"1m"`` for a rule, ``"$__rate_interval"`` for a panel) and a label
selector (empty for a rule, the dashboard's variables for a panel), so a panel plots exactly what
the recording rule of the same name records. The definitions are docs/measurements.md's: acceptance rate =
Σaccepted / Σdrafted, acceptance length = 1 + Σaccepted / Σdrafts (bonus token included),
per-position rate = Σaccepted at position i / Σdrafts, drafts per request = verify steps per
finished request. Sums run over vLLM's ``engine`` label (data-parallel engines) and keep ``job``,
``instance`` and ``model_name``; an idle server yields no sample rather than NaN.

speclab's simulator under a time scale S counts modelled events, S times slower than wall time, and
says so on its ``/metrics`` (``speclab_sim_time_scale``): a per-second rate of its counters is
multiplied by S (``per_modelled_second``), so it reads like the report; a real server has no such
series and its rate is left as it is. Ratios of rates need no factor.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from speclab.model import names

BY_INSTANCE: Final = ("job", "instance", "model_name")
BY_MODEL: Final = ("job", "model_name")

DRAFTS: Final = names.PROM_SPEC_DRAFTS + "_total"
DRAFT_TOKENS: Final = names.PROM_SPEC_DRAFT_TOKENS + "_total"
ACCEPTED: Final = names.PROM_SPEC_ACCEPTED + "_total"
ACCEPTED_PER_POS: Final = names.PROM_SPEC_ACCEPTED_PER_POS + "_total"
REQUESTS_FINISHED: Final = names.PROM_REQUEST_SUCCESS + "_total"
PROMPT_TOKENS: Final = names.PROM_PROMPT_TOKENS + "_total"
CACHE_CONFIG_INFO: Final = "vllm:cache_config_info"
SIM_TIME_SCALE: Final = names.PROM_SIM_TIME_SCALE


@dataclass(frozen=True)
class Phase:
    """One of vLLM's per-request latency histograms: the split of where a request's time went."""

    key: str
    metric: str
    title: str
    meaning: str


PHASES: Final = (
    Phase("queue", names.PROM_QUEUE_TIME, "Queue time", "QUEUED → first SCHEDULED, in the engine core"),
    Phase("prefill", names.PROM_PREFILL_TIME, "Prefill time", "first SCHEDULED → first token"),
    Phase("decode", names.PROM_DECODE_TIME, "Decode time", "first token → last token"),
    Phase("ttft", names.PROM_TTFT, "Time to first token",
          "arrival at the API server → first token (tokenization, queue and prefill)"),
    Phase("e2e", names.PROM_E2E_TIME, "End-to-end latency", "arrival at the API server → last token"),
    Phase("tpot", names.PROM_TPOT, "Time per output token",
          "decode time / (output tokens − 1), per finished request: per token, correct under speculation"),
)
QUANTILES: Final = (0.5, 0.9, 0.99)

_DURATION = re.compile(r"^([1-9][0-9]*)(s|m|h)$")
_UNIT_S: Final = {"s": 1, "m": 60, "h": 3600}


def parse_duration(text: str) -> int:
    """A Prometheus duration in whole seconds, minutes or hours (``15s``, ``1m``) → seconds."""
    match = _DURATION.match(text.strip())
    if not match:
        raise ValueError(f"{text!r} is not a duration such as 15s, 1m or 1h")
    return int(match.group(1)) * _UNIT_S[match.group(2)]


def format_duration(seconds: int) -> str:
    """Seconds → the shortest exact Prometheus duration (3600 → ``1h``, 90 → ``90s``)."""
    for unit in ("h", "m"):
        if seconds % _UNIT_S[unit] == 0:
            return f"{seconds // _UNIT_S[unit]}{unit}"
    return f"{seconds}s"


def _by(labels: tuple[str, ...]) -> str:
    return ", ".join(labels)


def _m(metric: str, selector: str) -> str:
    return f"{metric}{{{selector}}}" if selector else metric


def rate_sum(metric: str, window: str, selector: str = "", by: tuple[str, ...] = BY_INSTANCE) -> str:
    return f"sum by ({_by(by)}) (rate({_m(metric, selector)}[{window}]))"


def per_modelled_second(rate: str) -> str:
    """A rate per wall second → per modelled second: × S on a time-scaled simulator, as it is elsewhere."""
    return f"(\n{rate}\n* on (job, instance) group_left ()\n{SIM_TIME_SCALE}\n)\nor\n{rate}"


def ratio(numerator: str, denominator: str) -> str:
    """numerator / denominator, where a zero denominator (an idle server) gives no sample."""
    return f"({numerator})\n/\n({denominator} > 0)"


def acceptance_rate(window: str, selector: str = "", by: tuple[str, ...] = BY_INSTANCE) -> str:
    return ratio(rate_sum(ACCEPTED, window, selector, by), rate_sum(DRAFT_TOKENS, window, selector, by))


def rejection_rate(window: str, selector: str = "", by: tuple[str, ...] = BY_INSTANCE) -> str:
    return f"1 - (\n{acceptance_rate(window, selector, by)}\n)"


def acceptance_length(window: str, selector: str = "", by: tuple[str, ...] = BY_INSTANCE) -> str:
    return f"1 + (\n{ratio(rate_sum(ACCEPTED, window, selector, by), rate_sum(DRAFTS, window, selector, by))}\n)"


def position_acceptance(window: str, selector: str = "") -> str:
    """Per draft position i: the share of drafts whose positions 0..i were all accepted."""
    by_pos = (*BY_INSTANCE, "position")
    return (f"{rate_sum(ACCEPTED_PER_POS, window, selector, by_pos)}\n"
            f"/ on ({_by(BY_INSTANCE)}) group_left ()\n"
            f"({rate_sum(DRAFTS, window, selector)} > 0)")


def drafts_per_request(window: str, selector: str = "") -> str:
    """Verify steps per finished request (vLLM counts one draft per request per verify step)."""
    return ratio(rate_sum(DRAFTS, window, selector), rate_sum(REQUESTS_FINISHED, window, selector))


def num_speculative_tokens(selector: str = "") -> str:
    """k, read off the per-position series vLLM creates for positions 0..k-1 (engines counted once)."""
    by_pos = _by((*BY_INSTANCE, "position"))
    return f"count by ({_by(BY_INSTANCE)}) (count by ({by_pos}) ({_m(ACCEPTED_PER_POS, selector)}))"


def quantile(phase: Phase, q: float, window: str, selector: str = "") -> str:
    buckets = rate_sum(phase.metric + "_bucket", window, selector, (*BY_INSTANCE, "le"))
    return f"histogram_quantile({q}, {buckets})"


def mean(phase: Phase, window: str, selector: str = "") -> str:
    return ratio(rate_sum(phase.metric + "_sum", window, selector), rate_sum(phase.metric + "_count", window, selector))


def restarts(window: str, selector: str = "") -> str:
    """A server restarted: vLLM's prompt-token counter went back (every series is re-created at 0)."""
    return f"sum by ({_by(BY_INSTANCE)}) (resets({_m(PROMPT_TOKENS, selector)}[{window}])) > 0"


def draft_length_changed(window: str, selector: str = "") -> str:
    """k changed: the number of per-position series changed within the window."""
    return f"changes(({num_speculative_tokens(selector)})[{window}:]) > 0"


def cache_config_changed(window: str, selector: str = "") -> str:
    """More than one ``vllm:cache_config_info`` label set (KV blocks, memory utilization, block size,
    dtype, prefix caching) seen on one server within the window, data-parallel engines counted once:
    the cache config changed. The series has no ``model_name``; select it by instance only."""
    seen = f"count without (engine) (count_over_time({_m(CACHE_CONFIG_INFO, selector)}[{window}]))"
    return f"count by (job, instance) ({seen}) > 1"
