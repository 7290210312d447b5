from __future__ import annotations

from pathlib import Path

import pytest

from speclab.model.errors import InputError
from speclab.recording import Recording
from speclab.recording.refire import refire_plan, refire_traffic_plan
from speclab.recording.writer import RecordingWriter

from . import synth
from .live_run import record_live


def test_refire_plan_has_each_planned_request_once_at_its_intended_time(tmp_path: Path) -> None:
    record_live(tmp_path / "rec")
    rec = Recording.open(tmp_path / "rec")
    plan = refire_plan(rec)
    originals = {r.prompt["index"]: r for r in synth.make_records() if r.variant == "k2"}
    assert [req.index for _, req in plan] == sorted(originals)
    assert [t for t, _ in plan] == sorted(t for t, _ in plan)
    origin = min(r.intended for r in originals.values())
    for offset, req in plan:
        original = originals[req.index]
        assert offset == pytest.approx(original.intended - origin)
        assert req.prompt_class == original.prompt_class and req.endpoint == "chat"
        assert req.messages == original.prompt["messages"] and req.prompt is None
        assert req.sampling == original.sampling
        assert req.info["index"] == req.index


def test_refire_needs_recorded_prompts(tmp_path: Path) -> None:
    records = synth.make_records(n=4)
    for record in records:
        record.prompt = {}
    with RecordingWriter(tmp_path / "old", synth.manifest()) as writer:
        writer.write_records(records)
    with pytest.raises(InputError, match="stores no prompts"):
        refire_plan(Recording.open(tmp_path / "old"))


def test_refire_keeps_the_recorded_warmup_of_each_request(tmp_path: Path) -> None:
    # warm-up by request count: the first two plan positions, whatever their send times
    records = synth.make_records(n=10)
    for record in records:
        record.warmup = record.prompt["index"] < 2
    with RecordingWriter(tmp_path / "rec", synth.manifest(warmup_s=0.0)) as writer:
        writer.write_records(records)
    plan = refire_traffic_plan(Recording.open(tmp_path / "rec"))
    flags = [plan.is_warmup(i, active_t=5.0) for i in range(len(plan.recorded))]
    assert flags == [req.info["index"] < 2 for _, req in plan.recorded]
    assert flags.count(True) == 2
