"""Records keep a reference to their prompt, not its text; the recording holds each prompt once."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from speclab.model.scenario import load_scenario
from speclab.recording.compare import compare_recordings
from speclab.recording.prompts import PROMPTS
from speclab.recording.reader import Recording
from speclab.recording.refire import refire_plan

from ..outcome import assert_measured
from .live_run import record_live


def test_a_recorded_run_stores_prompts_once_and_records_by_reference(tmp_path: Path) -> None:
    rec = tmp_path / "rec"
    out = subprocess.run([sys.executable, "-m", "speclab.cli.main", "run", "smoke", "--engine", "sim", "--variants",
                          "baseline", "--requests", "8", "--record", str(rec)], cwd=tmp_path, capture_output=True,
                         text=True, timeout=110)
    assert_measured(out)
    items = [item for spec in load_scenario("smoke").classes.values() for item in spec.items()]
    texts = [m["content"] for item in items for m in item.as_messages()]
    requests = (rec / "requests.jsonl").read_text()
    assert requests.count("\n") == 8
    assert not any(text in requests for text in texts)  # no copy of any prompt in the records
    table = [json.loads(line) for line in (rec / PROMPTS).read_text().splitlines()]
    assert sorted(item["ref"] for item in table) == ["continuation/0", "continuation/1", "factual_qa/0",
                                                     "factual_qa/1", "factual_qa/2", "factual_qa/3"]
    recording = Recording.open(rec)
    for record in recording.records:
        assert set(record.prompt) <= {"endpoint", "index", "ref", "sha256", "has_schema"}
    planned = refire_plan(recording)
    assert len(planned) == 8
    for _, req in planned:  # refire resolves the references back to exactly what was sent
        sent = req.messages[-1]["content"] if req.messages else req.prompt
        assert sent in texts


def test_compare_of_different_scenarios_says_so_and_never_matches_by_position(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    record_live(a)
    record_live(b)
    manifest = json.loads((b / "manifest.json").read_text())
    manifest["scenario"] = "another"
    (b / "manifest.json").write_text(json.dumps(manifest))
    lines = [json.loads(line) for line in (b / "requests.jsonl").read_text().splitlines()]
    for line in lines:  # the same positions, other prompts
        line["prompt"] = {"endpoint": "chat", "index": line["prompt"]["index"], "ref": "x/0", "sha256": "0" * 16}
    (b / "requests.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = compare_recordings(Recording.open(a), Recording.open(b))
    assert result["scenarios"]["same"] is False
    assert "different scenarios ('synthetic' in A, 'another' in B)" in result["scenarios"]["note"]
    assert all(out["matched"] == 0 for out in result["outputs"].values())
    same = compare_recordings(Recording.open(a), Recording.open(a))
    assert same["scenarios"]["same"] and any(out["matched"] for out in same["outputs"].values())
