"""A synthetic, seeded run: RequestRecords, samples and events as traffic and scraper would produce."""

from __future__ import annotations

import random
from typing import Any

from speclab.model.records import Event, RequestRecord, ServerSample, SpecCounts

VARIANTS = ["baseline", "k2"]
CLASSES = ["qa", "tool"]
SECRET = "sk-live-0123456789abcdefSECRET"


def manifest(**extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "lab": "synthetic",
        "scenario": "synthetic",
        "variants": VARIANTS,
        "classes": CLASSES,
        "simulated": True,
        "pair": {"target": "sim-8b", "draft": "sim-1b"},
        "arrival": {"process": "poisson", "rate": 8.0},
        "interval_s": 1.0,
    }
    base.update(extra)
    return base


def greedy_ids(index: int, n: int) -> list[int]:
    rng = random.Random(index)
    return [rng.randrange(50, 5000) for _ in range(n)]


def make_records(n: int = 120, seed: int = 7, duration: float = 10.0, *, variants: list[str] | None = None,
                 perturb: dict[str, float] | None = None) -> list[RequestRecord]:
    """``n`` planned requests sent to every variant; ``perturb`` slows a variant's decode by a factor."""
    rng = random.Random(seed)
    out: list[RequestRecord] = []
    for i in range(n):
        intended = duration * i / n * 0.8
        cls = CLASSES[i % len(CLASSES)]
        tokens = rng.randint(8, 40)
        for variant in variants or VARIANTS:
            k = 0 if variant == "baseline" else 2
            slow = (perturb or {}).get(variant, 1.0)
            sent = intended + rng.uniform(0, 0.004)
            queue = rng.uniform(0.001, 0.05)
            prefill = rng.uniform(0.01, 0.04)
            decode = tokens * rng.uniform(0.008, 0.012) * (0.6 if k else 1.0) * slow
            first = sent + queue + prefill
            last = first + decode
            done = last + 0.001
            spec = SpecCounts()
            if k:
                steps = max(1, tokens // 2)
                hist = [0, 0, 0]
                accepted = 0
                for _ in range(steps):
                    j = rng.choice([0, 1, 2, 2])
                    hist[j] += 1
                    accepted += j
                spec = SpecCounts(steps=steps, drafted=steps * k, accepted=accepted, histogram=hist,
                                  num_spec_tokens=k, source="exact")
            record = RequestRecord(
                request_id=f"r{i}-{variant}", variant=variant, prompt_class=cls, intended=intended,
                sent=sent, first_token=first, last_token=last, done=done, warmup=intended < 0.5,
                prompt_tokens=20, output_tokens=tokens, output_token_ids=greedy_ids(i, tokens),
                output_text=f"answer {i}", finish_reason="length",
                server_queue_ms=queue * 1000, server_prefill_ms=prefill * 1000, server_decode_ms=decode * 1000,
                spec=spec, schema_valid=(rng.random() > 0.2) if cls == "tool" else None,
                sampling={"temperature": 0.0, "max_tokens": 40, "seed": 1},
                prompt={"messages": [{"role": "user", "content": f"question {i}"}], "endpoint": "chat", "index": i},
            )
            if i % 37 == 5:
                record.done = None
                record.last_token = None
                record.error_kind = "http_5xx"
                record.http_status = 500
                record.error_message = "server error"
            out.append(record)
    return out


def make_samples(duration: float = 10.0) -> list[ServerSample]:
    return [ServerSample(t=t + 0.5, variant=v, running=3, waiting=1, kv_usage=0.1 * (t % 5),
                         generation_tokens=100.0, spec_drafts=10.0 if v != "baseline" else 0.0)
            for t in range(int(duration)) for v in VARIANTS]


def make_events() -> list[Event]:
    return [Event(t=3.2, kind="config_change", message="k2: num_speculative_tokens 2 -> 2", variant="k2",
                  data={"headers": {"Authorization": f"Bearer {SECRET}"}, "api_key": SECRET})]
