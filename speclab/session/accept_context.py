"""What every accept stage shares: the lab, the resolved gates profile, the servers and a sender.

Stages that need a handful of exact requests (golden set, equivalence, structured output) send
them directly with the traffic client, a bounded number in flight per variant; every record keeps
the exact sampling parameters that were sent. Results that more than one stage reads (the greedy
golden responses) are computed once and cached here.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, TextIO

import aiohttp

from speclab.gates.answered import AnsweredTally
from speclab.gates.golden import GoldenCase
from speclab.model.gates import GateProfile
from speclab.model.lab import Lab
from speclab.model.prompt_ref import reference
from speclab.model.records import RequestRecord
from speclab.model.scenario import Scenario
from speclab.model.time_scale import TimeScale
from speclab.servers.engine import EngineChoice
from speclab.servers.manager import RunningServer
from speclab.traffic.client import Target, run_request
from speclab.traffic.schedule import PlannedRequest

from .record_spool import RecordSpool

REQUEST_TIMEOUT_S = 120.0
STALL_TIMEOUT_S = 30.0
IN_FLIGHT_PER_VARIANT = 16
# A load stage's aggregator closes an interval this long after its end, so the records shipped
# from the workers are all in (as rebuilding it from every record at the end would count them),
# and its histograms are encoded from then on rather than held open for the whole stage. It keeps
# closed intervals (on disk) and their summaries for ten seconds: its snapshot's cumulative view and
# A/B windows grow as intervals close, and no stage reads an older interval back.
STAGE_CLOSE_DELAY_S = 5.0
STAGE_RETAIN_INTERVALS = 10


class RecordSink(Protocol):
    """A gate's accumulator: fed each batch of a stage's records as it arrives (and nothing kept)."""

    def add(self, records: Iterable[RequestRecord]) -> None: ...


def planned(
    request_id: str,
    prompt_class: str,
    sampling: dict[str, Any],
    *,
    messages: list[dict[str, str]] | None = None,
    prompt: str | None = None,
    schema: dict[str, Any] | None = None,
    index: int = 0,
) -> PlannedRequest:
    """One request as the traffic client sends it: chat when ``messages`` are given, else completions."""
    endpoint = "chat" if messages is not None else "completions"
    asked = {"messages": messages} if messages is not None else {"prompt": prompt or ""}
    info = reference(endpoint, index, request_id, asked, schema is not None)
    return PlannedRequest(
        index=index, request_id=request_id, prompt_class=prompt_class, endpoint=endpoint,
        messages=messages, prompt=prompt if messages is None else None, sampling=dict(sampling),
        schema=schema, info=info,
    )


def case_request(case: GoldenCase, request_id: str, sampling: dict[str, Any]) -> PlannedRequest:
    messages = [m.model_dump() for m in case.messages] if case.messages is not None else None
    return planned(request_id, case.prompt_class, sampling, messages=messages, prompt=case.prompt)


@dataclass
class AcceptContext:
    """Built by ``run_accept_stages``; servers and targets are filled in once the servers are up."""

    lab: Lab
    profile: GateProfile
    engine: EngineChoice
    seed: int
    force: bool
    golden_cases: list[GoldenCase]
    canary_scenario: Scenario
    out: TextIO = sys.stdout
    servers: dict[str, RunningServer] = field(default_factory=dict)
    targets: dict[str, Target] = field(default_factory=dict)
    run_start: float = field(default_factory=time.monotonic)
    # Nothing per request is kept for the run: answered counts, the running stage's AnsweredTally,
    # and every record on disk (the report's fallback tables, should no load stage run).
    answered: Counter[str] = field(default_factory=Counter)  # answered requests per variant, every stage
    requests_sent: int = 0
    spool: RecordSpool = field(default_factory=RecordSpool)
    misaligned: bool = False  # tokenizer alignment failed and was not forced
    gateway_dir: Path | None = None  # where a gateway canary writes its HAProxy files (in the report)
    golden_responses: dict[str, dict[str, RequestRecord]] | None = None
    log_dir: Path | None = None
    record_path: str | Path | None = None
    pair: dict[str, Any] = field(default_factory=dict)
    stage_answers: AnsweredTally = field(default_factory=AnsweredTally)  # what the running stage sent or reused
    time_scale: TimeScale = field(default_factory=TimeScale)  # the simulators' S (records are modelled)
    workers: int | None = 1  # the load stages' traffic workers (None: one per CPU of the cluster)
    cluster: str | None = None  # --cluster: where those workers run
    clock: Callable[[], float] = time.monotonic  # the load stages' run clock (a test's own)
    _http: aiohttp.ClientSession | None = None

    @property
    def baseline(self) -> str:
        return self.lab.baseline

    @property
    def variants(self) -> tuple[str, ...]:
        return self.lab.variant_names

    def say(self, line: str) -> None:
        print(line, file=self.out, flush=True)

    def now(self) -> float:
        """The run clock in modelled seconds."""
        return self.time_scale.to_model(time.monotonic() - self.run_start)

    def set_servers(self, servers: Mapping[str, RunningServer]) -> None:
        self.servers = dict(servers)
        self.targets = {
            name: Target(
                variant=name, base_url=s.base_url, model=s.model_name or "", headers=dict(s.headers),
                num_spec_tokens=int(s.settings.get("num_speculative_tokens") or 0) if s.settings.get("method") else 0,
                engine=s.backend.id,
            )
            for name, s in self.servers.items()
        }

    async def http(self) -> aiohttp.ClientSession:
        if self._http is None:
            self._http = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0))
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None

    def add_records(self, records: Iterable[RequestRecord]) -> None:
        """Records as they arrive, from whichever stage sent them: counted, checked and spooled."""
        records = list(records)
        self.requests_sent += len(records)
        self.answered.update(r.variant for r in records if r.ok)
        self.stage_answers.add(records)
        self.spool.add(records)

    def begin_stage(self) -> None:
        self.stage_answers = AnsweredTally()

    async def send(
        self, requests: Mapping[str, Sequence[PlannedRequest]], *, in_flight: int = IN_FLIGHT_PER_VARIANT
    ) -> dict[str, list[RequestRecord]]:
        """Send each variant its requests (variants concurrently); records come back in request order."""
        session = await self.http()
        scale = self.time_scale
        timeout = aiohttp.ClientTimeout(total=scale.to_wall(REQUEST_TIMEOUT_S), sock_read=scale.to_wall(STALL_TIMEOUT_S),
                                        sock_connect=10.0)

        async def one_variant(variant: str, reqs: Sequence[PlannedRequest]) -> list[RequestRecord]:
            target = self.targets[variant]
            slots = asyncio.Semaphore(in_flight)
            got: list[RequestRecord | None] = [None] * len(reqs)

            async def one(i: int, req: PlannedRequest) -> None:
                async with slots:
                    def keep(record: RequestRecord) -> None:
                        got[i] = record
                    await run_request(session, target, req, time.monotonic() - self.run_start, keep,
                                      run_start=self.run_start, timeout=timeout, time_scale=scale.s)

            await asyncio.gather(*(one(i, r) for i, r in enumerate(reqs)))
            return [r for r in got if r is not None]

        names = list(requests)
        results = await asyncio.gather(*(one_variant(v, requests[v]) for v in names))
        out = dict(zip(names, results, strict=True))
        for records in out.values():
            self.add_records(scale.ingest(records))
        return out

    async def golden(self) -> dict[str, dict[str, RequestRecord]]:
        """Every golden case answered greedily by every variant (sent once, shared by later stages)."""
        if self.golden_responses is None:
            sampling_of = {c.id: {"max_tokens": c.max_tokens or 64, "temperature": 0.0, "seed": self.seed}
                           for c in self.golden_cases}
            requests = {
                v: [case_request(c, f"golden-{v}-{c.id}", sampling_of[c.id]) for c in self.golden_cases]
                for v in self.variants
            }
            sent = await self.send(requests)
            self.golden_responses = {
                v: {c.id: r for c, r in zip(self.golden_cases, records, strict=True)} for v, records in sent.items()
            }
        else:  # a later stage judges the cached responses: their errors are that stage's too
            self.stage_answers.add(r for by_case in self.golden_responses.values() for r in by_case.values())
        return self.golden_responses
