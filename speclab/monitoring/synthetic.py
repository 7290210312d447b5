"""Synthetic vLLM series for promtool's rule tests, and what the definitions say they should give.

A server's traffic is a list of segments, each a constant per-second rate of every spec-decode
counter for some seconds. ``input_series`` turns them into promtool's expanding notation at the
scrape interval; ``totals`` integrates the same rates over a window, so an expected acceptance
rate is Σaccepted / Σdrafted over the window, computed from the definitions rather than by PromQL.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from . import promql

JOB: Final = "vllm"
MODEL: Final = "meta-llama/Llama-3.1-8B-Instruct"


@dataclass(frozen=True)
class SpecRates:
    """Per-second rates of vLLM's spec-decode counters and of finished requests."""

    drafted: float
    accepted: float
    drafts: float
    per_pos: tuple[float, ...]
    finished: float

    def __post_init__(self) -> None:
        if abs(sum(self.per_pos) - self.accepted) > 1e-9:
            raise ValueError("per-position acceptances must add up to the accepted tokens")
        if self.accepted > self.drafted or any(a < b for a, b in zip(self.per_pos, self.per_pos[1:], strict=False)):
            raise ValueError("acceptance is a prefix: it cannot exceed drafting or grow with position")


@dataclass(frozen=True)
class Segment:
    rates: SpecRates
    seconds: int


@dataclass(frozen=True)
class Server:
    instance: str
    engine: str
    segments: tuple[Segment, ...]
    model: str = MODEL

    def labels(self, **more: str) -> str:
        labels = {"job": JOB, "instance": self.instance, "model_name": self.model, "engine": self.engine,
                  **more}
        return ",".join(f'{k}="{v}"' for k, v in labels.items())

    def selector(self) -> str:
        return f'job="{JOB}",instance="{self.instance}",model_name="{self.model}"'


def _num(x: float) -> str:
    return repr(float(x)).removesuffix(".0") if float(x).is_integer() else repr(float(x))


def counter_values(scrape_s: int, pieces: list[tuple[float, int]]) -> str:
    """Piecewise-linear counter samples from 0 at t=0, one per scrape, in expanding notation."""
    parts: list[str] = []
    value = 0.0
    for i, (rate, seconds) in enumerate(pieces):
        if seconds % scrape_s:
            raise ValueError(f"a segment of {seconds}s is not a whole number of {scrape_s}s scrapes")
        n, inc = seconds // scrape_s, rate * scrape_s
        start, count = (value, n) if i == 0 else (value + inc, n - 1)
        parts.append(f"{_num(start)}+{_num(inc)}x{count}")
        value = start + inc * count
    return " ".join(parts)


def input_series(server: Server, scrape_s: int) -> list[dict[str, str]]:
    segs = server.segments
    k = len(segs[0].rates.per_pos)

    def series(metric: str, pieces: list[tuple[float, int]], **more: str) -> dict[str, str]:
        return {"series": f"{metric}{{{server.labels(**more)}}}", "values": counter_values(scrape_s, pieces)}

    out = [
        series(promql.DRAFT_TOKENS, [(s.rates.drafted, s.seconds) for s in segs]),
        series(promql.ACCEPTED, [(s.rates.accepted, s.seconds) for s in segs]),
        series(promql.DRAFTS, [(s.rates.drafts, s.seconds) for s in segs]),
        series(promql.REQUESTS_FINISHED, [(s.rates.finished, s.seconds) for s in segs], finished_reason="stop"),
    ]
    out += [series(promql.ACCEPTED_PER_POS, [(s.rates.per_pos[p], s.seconds) for s in segs], position=str(p))
            for p in range(k)]
    return out


@dataclass(frozen=True)
class Totals:
    drafted: float
    accepted: float
    drafts: float
    per_pos: tuple[float, ...]
    finished: float

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted

    @property
    def rejection_rate(self) -> float:
        return 1.0 - self.acceptance_rate

    @property
    def acceptance_length(self) -> float:
        return 1.0 + self.accepted / self.drafts

    def __add__(self, other: Totals) -> Totals:
        return Totals(self.drafted + other.drafted, self.accepted + other.accepted, self.drafts + other.drafts,
                      tuple(a + b for a, b in zip(self.per_pos, other.per_pos, strict=True)),
                      self.finished + other.finished)


def totals(servers: list[Server], end_s: int, window_s: int) -> Totals:
    """Every counter's increase over [end − window, end], summed over the servers given."""
    start = end_s - window_s
    result: Totals | None = None
    for server in servers:
        t = 0
        for seg in server.segments:
            overlap = max(0, min(end_s, t + seg.seconds) - max(start, t))
            r = seg.rates
            part = Totals(r.drafted * overlap, r.accepted * overlap, r.drafts * overlap,
                          tuple(p * overlap for p in r.per_pos), r.finished * overlap)
            result = part if result is None else result + part
            t += seg.seconds
    assert result is not None
    return result

