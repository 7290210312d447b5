"""Reads a server's Prometheus ``/metrics`` and turns it into ``ServerSample`` deltas.

Samples are matched by exposed name (``..._total``, ``..._bucket``) rather than by family type,
because an exposition without ``# TYPE`` lines parses as "unknown" families; labels are read by
name (older prometheus_client versions print them in declaration order). Each series keeps its
previous value: a counter that goes down, or whose ``_created`` time changed, means the server
restarted, and the new value is the delta. Engines (the ``engine`` label) are summed. The first
scrape only sets the baseline, so the session should scrape once before traffic starts. Series are
read under speclab's names (vLLM 0.33's); a backend whose server exposes other names says so in
its ``prometheus`` table, and the scraper reads them back to speclab's.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from typing import Any

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from speclab.model.names import (
    PROM_DECODE_TIME,
    PROM_E2E_TIME,
    PROM_GENERATION_TOKENS,
    PROM_INFERENCE_TIME,
    PROM_ITL,
    PROM_KV_USAGE,
    PROM_PREEMPTIONS,
    PROM_PREFILL_TIME,
    PROM_PROMPT_TOKENS,
    PROM_QUEUE_TIME,
    PROM_REQUEST_SUCCESS,
    PROM_RUNNING,
    PROM_SIM_CLOCK_DRIFT,
    PROM_SIM_STEP_DRIFT,
    PROM_SIM_STEP_SECONDS,
    PROM_SIM_STEPS,
    PROM_SPEC_ACCEPTED,
    PROM_SPEC_ACCEPTED_PER_POS,
    PROM_SPEC_DRAFT_TOKENS,
    PROM_SPEC_DRAFTS,
    PROM_TPOT,
    PROM_TTFT,
    PROM_WAITING,
)
from speclab.model.records import ServerSample
from speclab.servers.backends.base import PromNames

COUNTERS: dict[str, str] = {
    PROM_PREEMPTIONS: "preemptions",
    PROM_PROMPT_TOKENS: "prompt_tokens",
    PROM_GENERATION_TOKENS: "generation_tokens",
    PROM_REQUEST_SUCCESS: "requests_finished",
    PROM_SPEC_DRAFTS: "spec_drafts",
    PROM_SPEC_DRAFT_TOKENS: "spec_draft_tokens",
    PROM_SPEC_ACCEPTED: "spec_accepted",
    PROM_SIM_STEPS: "sim_steps",
    PROM_SIM_STEP_SECONDS: "sim_step_s",
    PROM_SIM_STEP_DRIFT: "sim_drift_s",
}
HISTOGRAMS: tuple[str, ...] = (
    PROM_QUEUE_TIME,
    PROM_PREFILL_TIME,
    PROM_DECODE_TIME,
    PROM_INFERENCE_TIME,
    PROM_E2E_TIME,
    PROM_TTFT,
    PROM_ITL,
    PROM_TPOT,
)
_SeriesKey = tuple[str, tuple[tuple[str, str], ...]]


def _key(name: str, labels: Mapping[str, str]) -> _SeriesKey:
    return name, tuple(sorted(labels.items()))


class MetricsScraper:
    """Scrapes one variant's server; keeps the previous values needed for deltas."""

    def __init__(
        self,
        base_url: str,
        variant: str,
        *,
        headers: Mapping[str, str] | None = None,
        timeout_s: float = 5.0,
        fresh_server: bool = False,
        names: PromNames | None = None,
    ) -> None:
        """``fresh_server``: a server that just started (its counters are zero), so the first scrape
        counts everything instead of only setting the baseline. ``names``: the engine's series names
        where they differ from speclab's (its backend's ``prometheus``)."""
        self.url = base_url.rstrip("/") + "/metrics"
        self.variant = variant
        self._headers = dict(headers or {})
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._previous: dict[_SeriesKey, float] = {}
        self._created: dict[_SeriesKey, float] = {}
        self._baseline_taken = fresh_server
        self._renames = names.renames() if names is not None else {}

    async def scrape(self, session: aiohttp.ClientSession, t: float) -> ServerSample:
        try:
            async with session.get(self.url, headers=self._headers, timeout=self._timeout) as response:
                if response.status != 200:
                    return ServerSample(t=t, variant=self.variant, up=False, error=f"{self.url}: HTTP {response.status}")
                text = await response.text()
        except asyncio.TimeoutError:
            return ServerSample(t=t, variant=self.variant, up=False, error=f"{self.url}: timed out")
        except aiohttp.ClientError as exc:
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            return ServerSample(t=t, variant=self.variant, up=False, error=f"{self.url}: {reason}")
        try:
            return self.parse(text, t)
        except ValueError as exc:
            return ServerSample(t=t, variant=self.variant, up=False, error=f"{self.url}: unparsable metrics ({exc})")

    def parse(self, text: str, t: float) -> ServerSample:
        """One exposition text → one sample of deltas (gauges as read)."""
        sample = ServerSample(t=t, variant=self.variant)
        gauges: dict[str, list[float]] = {}
        current: dict[_SeriesKey, float] = {}
        created: dict[_SeriesKey, float] = {}
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                name = _ours(s.name, self._renames) if self._renames else s.name
                if name.endswith("_created"):
                    created[_key(name[: -len("_created")], s.labels)] = s.value
                elif name in (PROM_RUNNING, PROM_WAITING, PROM_KV_USAGE, PROM_SIM_CLOCK_DRIFT):
                    gauges.setdefault(name, []).append(s.value)
                else:
                    current[_key(name, s.labels)] = s.value
        deltas = self._deltas(current, created)
        self._apply_gauges(sample, gauges)
        for (name, labels), delta in deltas.items():
            self._apply_delta(sample, name, dict(labels), delta)
        for hist in sample.histograms.values():
            hist["buckets"] = _non_cumulative(hist.pop("_cumulative"))
        return sample

    def _deltas(self, current: dict[_SeriesKey, float], created: dict[_SeriesKey, float]) -> dict[_SeriesKey, float]:
        """Per-series deltas; a restart (a value went down or ``_created`` changed) resets a whole
        counter or histogram, so its new values are the deltas."""
        first = not self._baseline_taken
        restarted = {key for key, when in created.items() if self._created.get(key, when) != when}
        for key, value in current.items():
            previous = self._previous.get(key)
            if previous is not None and value < previous:
                restarted.add(_group(key))
        deltas: dict[_SeriesKey, float] = {}
        for key, value in current.items():
            previous = self._previous.get(key)
            if first:
                deltas[key] = 0.0
            elif previous is None or _group(key) in restarted:
                deltas[key] = value
            else:
                deltas[key] = value - previous
        self._previous = current
        self._created = created
        self._baseline_taken = True
        return deltas

    @staticmethod
    def _apply_gauges(sample: ServerSample, gauges: dict[str, list[float]]) -> None:
        sample.running = sum(gauges.get(PROM_RUNNING, []))
        sample.waiting = sum(gauges.get(PROM_WAITING, []))
        kv = gauges.get(PROM_KV_USAGE, [])
        sample.kv_usage = sum(kv) / len(kv) if kv else 0.0
        drift = gauges.get(PROM_SIM_CLOCK_DRIFT)
        sample.clock_drift_s = max(drift) if drift else None

    @staticmethod
    def _apply_delta(sample: ServerSample, name: str, labels: dict[str, str], delta: float) -> None:
        base = name[: -len("_total")] if name.endswith("_total") else name
        if base == PROM_SPEC_ACCEPTED_PER_POS:
            position = int(labels.get("position", "0"))
            while len(sample.spec_accepted_per_pos) <= position:
                sample.spec_accepted_per_pos.append(0.0)
            sample.spec_accepted_per_pos[position] += delta
            return
        field_name = COUNTERS.get(base)
        if field_name is not None and name.endswith("_total"):
            setattr(sample, field_name, getattr(sample, field_name) + delta)
            return
        for hist_name in HISTOGRAMS:
            if not name.startswith(hist_name):
                continue
            suffix = name[len(hist_name) :]
            if suffix not in ("_bucket", "_sum", "_count"):
                continue
            hist = sample.histograms.setdefault(hist_name, {"_cumulative": {}, "sum": 0.0, "count": 0.0})
            if suffix == "_bucket":
                le = float(labels.get("le", "+Inf"))
                hist["_cumulative"][le] = hist["_cumulative"].get(le, 0.0) + delta
            else:
                hist[suffix[1:]] += delta
            return


_SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def _ours(name: str, renames: Mapping[str, str]) -> str:
    """An exposed sample name under speclab's series name (suffixes kept)."""
    if name in renames:
        return renames[name]
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in renames:
            return renames[name[: -len(suffix)]] + suffix
    return name


def _group(key: _SeriesKey) -> _SeriesKey:
    """The counter or histogram a series belongs to: name without suffix, labels without ``le``."""
    name, labels = key
    for suffix in ("_total", "_bucket", "_sum", "_count"):
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return name, tuple((k, v) for k, v in labels if k != "le")


def _non_cumulative(cumulative: dict[float, float]) -> list[tuple[float, float]]:
    """Prometheus ``le`` buckets are cumulative; per-bucket deltas are what a histogram panel needs."""
    out: list[tuple[float, float]] = []
    below = 0.0
    for le in sorted(cumulative):
        count = cumulative[le]
        out.append((le if math.isfinite(le) else math.inf, max(0.0, count - below)))
        below = count
    return out


def sample_summary(sample: ServerSample) -> dict[str, Any]:
    """The acceptance figures ``vllm bench serve`` prints, from one sample (or a summed one)."""
    drafts = sample.spec_drafts
    return {
        "acceptance_rate": sample.spec_accepted / sample.spec_draft_tokens if sample.spec_draft_tokens else None,
        "acceptance_length": 1 + sample.spec_accepted / drafts if drafts else None,
        "per_position": [n / drafts for n in sample.spec_accepted_per_pos] if drafts else [],
    }
