"""The parent keeps nothing per request: records stream to the aggregator and the recording.

Drives the parent's whole intake (records as they come off the wire, ``LiveSession._on_records``,
the aggregator's snapshots and the recorder's interval log, as the session's pump does) with 200
requests per second of run clock, and measures with tracemalloc what stays allocated between a
warmed-up point and 8,000 requests later: for `speclab run` (every closed interval kept, in a
temporary file, for the report's timeline) and for `speclab lab` (a retention window of closed
intervals, and the app's state fed every snapshot). Before records streamed, the parent kept
~4.8 KB per request; before closed intervals went to disk, ~60 bytes.
"""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest

from speclab.model.records import RequestRecord, SpecCounts
from speclab.model.snapshot import Snapshot
from speclab.session import live
from speclab.session.live import LiveSession
from speclab.session.options import RunOptions
from speclab.traffic.shipping import ingest, to_wire
from speclab.ui.state import LabState

RATE = 200
BYTES_PER_REQUEST = 300
LAB_WINDOW = 20  # the lab's retention, shortened so that the test runs past it


def _batch(start: int, n: int) -> list[RequestRecord]:
    out = []
    for i in range(start, start + n):
        t = i / RATE
        out.append(RequestRecord(
            request_id=f"smoke-{i}", variant="bench", prompt_class="factual_qa" if i % 3 else "continuation",
            intended=t, sent=t + 2e-4, first_token=t + 0.05, last_token=t + 0.69, done=t + 0.7, chunks=64,
            token_reads=60, prompt_tokens=40, output_tokens=64, output_token_ids=list(range(1000, 1064)),
            output_text=" the sea" * 32, finish_reason="length", server_queue_ms=0.2, server_prefill_ms=40.0,
            server_decode_ms=600.0, spec=SpecCounts(20, 60, 43, [2, 3, 5, 10], 3, "exact"),
            sampling={"max_tokens": 64, "temperature": 0.0}, prompt={"endpoint": "chat", "index": i},
            route="/v1/chat/completions"))
    return out


def _drive(session: LiveSession, start: int, seconds: int, view: Callable[[Snapshot], None] | None = None) -> int:
    i = start
    for _ in range(seconds):
        for _ in range(10):  # a worker flushes every 0.1 s
            session._on_records(ingest(to_wire(("records", _batch(i, RATE // 10)))[1]))
            i += RATE // 10
        now = i / RATE + 1.0
        session.aggregator.tick(now)
        snap = session.aggregator.snapshot(now)
        if view is not None:
            view(snap)
        assert session.recorder is not None
        session.recorder.write_closed_intervals(session.aggregator)
    return i


def _kept_per_request(session: LiveSession, warm_s: int, measured_s: int,
                      view: Callable[[Snapshot], None] | None = None) -> tuple[int, float]:
    """Requests driven in all, and bytes still allocated per request driven after the warm-up."""
    session.recorder = session._open_recorder()
    try:
        i = _drive(session, 0, warm_s, view)  # warm: histograms pooled, first intervals closed
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        n = _drive(session, i, measured_s, view) - i
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
    finally:
        assert session.recorder is not None
        session.recorder.close({"status": "complete"})
    return i + n, grown / n


def test_parent_memory_grows_by_almost_nothing_per_request(tmp_path: Path) -> None:
    options = RunOptions(scenario="smoke", attach=("bench=http://127.0.0.1:9",), record_path=tmp_path / "rec",
                         keep_records=False)
    session = LiveSession(options)
    total, kept = _kept_per_request(session, 10, 40)
    assert session.records == [] and session.events == [] and session.tally.measured == total
    assert session.aggregator.stored_intervals == session.aggregator.last_closed_interval + 1  # all, on disk
    assert kept < BYTES_PER_REQUEST, f"{kept:.0f} bytes kept per request"


def test_the_lab_session_and_its_screen_state_keep_a_bounded_window(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`speclab lab`'s session (no records, closed intervals for a retention window) and the app's
    state fed every snapshot: past the window, nothing grows with the requests."""
    monkeypatch.setattr(live, "LAB_RETAIN_INTERVALS", LAB_WINDOW)
    options = RunOptions(scenario="smoke", attach=("bench=http://127.0.0.1:9",), record_path=tmp_path / "rec",
                         keep_records=False, keep_intervals=False)
    session = LiveSession(options)
    state = LabState(session.info)
    total, kept = _kept_per_request(session, LAB_WINDOW + 10, 40, state.ingest)
    assert session.records == [] and session.tally.measured == total
    assert session.aggregator.stored_intervals <= LAB_WINDOW + 1
    assert state.last_interval == session.aggregator.last_closed_interval
    assert kept < BYTES_PER_REQUEST, f"{kept:.0f} bytes kept per request"
