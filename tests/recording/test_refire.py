from __future__ import annotations

from pathlib import Path

import pytest

from speclab.model.errors import InputError
from speclab.recording import Recording
from speclab.recording.refire import refire_plan
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
