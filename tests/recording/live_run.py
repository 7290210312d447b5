"""Drive a synthetic run through a live Aggregator and a RecordingWriter, as the session does."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from speclab.metrics.aggregator import Aggregator
from speclab.model.records import Event, RequestRecord
from speclab.model.snapshot import ClientHealth, Snapshot
from speclab.recording.reader import finish_time
from speclab.recording.writer import RecordingWriter

from . import synth

END_S = 10.5
WARMUP_S = 0.5


def record_live(path: Path, records: list[RequestRecord] | None = None, *, events: list[Event] | None = None,
                servers: dict[str, dict[str, Any]] | None = None, closing: dict[str, Any] | None = None,
                keep: list[Aggregator] | None = None) -> Snapshot:
    """Records reach the parent 50 ms after they finish (every 7th one 800 ms late, past the close delay).

    ``servers``: the manifest's launch facts per variant (their settings launch epoch 1); ``closing``:
    more facts for the recording's ``final``; ``keep`` gets the live aggregator (the timeline reads it)."""
    records = records if records is not None else synth.make_records()
    samples, events = synth.make_samples(), events if events is not None else synth.make_events()
    arrival = {id(r): finish_time(r) + (0.8 if i % 7 == 0 else 0.05) for i, r in enumerate(records)}
    agg = Aggregator(synth.VARIANTS, synth.CLASSES, interval_s=1.0, simulated=True, warmup_s=WARMUP_S)
    for name, facts in (servers or {}).items():
        agg.launch(name, dict(facts["settings"]), baseline=bool(facts.get("baseline")))
    writer = RecordingWriter(path, synth.manifest(warmup_s=WARMUP_S, **({"servers": servers} if servers else {})))
    if keep is not None:
        keep.append(agg)
    pending = sorted(records, key=lambda r: arrival[id(r)])
    steps = int(END_S / 0.25)
    for step in range(1, steps + 1):
        now = step * 0.25
        batch = [r for r in pending if arrival[id(r)] <= now]
        pending = [r for r in pending if arrival[id(r)] > now]
        agg.add_records(batch)
        writer.write_records(batch)
        new_samples = [s for s in samples if now - 0.25 < s.t <= now]
        for sample in new_samples:
            agg.add_server_sample(sample)
        writer.write_samples(new_samples)
        new_events = [e for e in events if now - 0.25 < e.t <= now]
        for event in new_events:
            agg.add_event(event)
        writer.write_events(new_events)
        if step == 20:
            agg.mark_saturated(4)
            writer.mark_saturated(4, now)
        agg.tick(now)
        agg.snapshot(now)
        writer.write_closed_intervals(agg)
    agg.add_records(pending)
    writer.write_records(pending)
    health = ClientHealth(schedule_lag_p99_ms=1.5, loop_lag_max_ms=2.0, cpu_percent=4.0)
    agg.set_health(health)
    final = agg.snapshot(END_S, finished=True)
    writer.write_closed_intervals(agg)
    writer.close({"health": asdict(health), **(closing or {})}, end_s=END_S)
    return final
