from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from speclab.metrics.hdr import LatencyHistogram
from speclab.model.errors import InputError
from speclab.model.names import PERCENTILE_POINTS
from speclab.recording import layout
from speclab.recording.reader import Recording, finish_time
from speclab.recording.writer import RecordingWriter

from . import synth


def _write_run(path: Path, *, close: bool = True, upto: int = 10) -> RecordingWriter:
    """Records per interval, one e2e histogram per interval and variant, a marker per closed interval."""
    records = synth.make_records()
    writer = RecordingWriter(path, synth.manifest())
    for index in range(upto):
        batch = [r for r in records if index <= finish_time(r) < index + 1]
        writer.write_records(batch)
        writer.write_samples([s for s in synth.make_samples() if index <= s.t < index + 1])
        for variant in synth.VARIANTS:
            hist = LatencyHistogram()
            for r in batch:
                if r.variant == variant and r.e2e is not None:
                    hist.record_s(r.e2e)
            writer.write_interval(index, index, index + 1.0, f"e2e.all.{variant}", hist)
        writer.flush(closed_interval=index)
    if close:
        writer.write_records([r for r in records if finish_time(r) >= upto])
        writer.close(end_s=float(upto))
    return writer


def test_refuses_to_overwrite_without_force(tmp_path: Path) -> None:
    target = tmp_path / "rec"
    RecordingWriter(target, synth.manifest()).close()
    with pytest.raises(InputError, match=r"already exists.*--force"):
        RecordingWriter(target, synth.manifest())
    RecordingWriter(target, synth.manifest(lab="second"), force=True).close()
    assert json.loads((target / layout.MANIFEST).read_text())["lab"] == "second"
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("mine")
    with pytest.raises(InputError, match="not a recording"):
        RecordingWriter(other, synth.manifest(), force=True)
    assert (other / "keep.txt").exists()


def test_secrets_never_reach_the_files(tmp_path: Path) -> None:
    secret = synth.SECRET
    manifest = synth.manifest(
        servers={"k2": {"command": f"vllm serve m --api-key {secret} --port 8001",
                        "headers": {"Authorization": f"Bearer {secret}"}}},
        attach={"url": "http://x", "api_key": "plainvalue-123", "api_key_env": "MY_KEY"},
        env={"OPENAI_API_KEY": "another-secret-value", "HF_TOKEN": "hf_abcdefghijklmnopqrstuvwxyz"},
    )
    writer = RecordingWriter(tmp_path / "rec", manifest, secrets=["known-value-xyz"])
    record = synth.make_records(n=2)[0]
    record.error_message = f"401 for Authorization: Bearer {secret} (key known-value-xyz)"
    writer.write_records([record])
    writer.write_events(synth.make_events())
    log = tmp_path / "server.log"
    log.write_text(f"INFO args: --api-key {secret}\nINFO header x-api-key: abcdef123456\nINFO ready\n")
    writer.copy_log("k2", log)
    writer.close()
    everything = "".join(p.read_text() for p in (tmp_path / "rec").rglob("*") if p.is_file())
    for leaked in (secret, "plainvalue-123", "another-secret-value", "hf_abcdefghij", "known-value-xyz", "abcdef123456"):
        assert leaked not in everything
    assert "[REDACTED]" in everything
    rec = Recording.open(tmp_path / "rec")
    assert rec.manifest["attach"]["api_key_env"] == "MY_KEY"  # the variable's name is not a secret
    assert rec.manifest["servers"]["k2"]["command"].endswith("--port 8001")
    assert "INFO ready" in (tmp_path / "rec" / "logs" / "k2.log").read_text()


def test_hlog_reads_back_through_hdrh_reader(tmp_path: Path) -> None:
    _write_run(tmp_path / "rec")
    records = synth.make_records()
    reader = HistogramLogReader(str(tmp_path / "rec" / layout.INTERVALS), HdrHistogram(1, 3_600_000_000, 3))
    theirs: dict[str, HdrHistogram] = {}
    while (hist := reader.get_next_interval_histogram()) is not None:
        tag = hist.get_tag()
        if tag in theirs:
            theirs[tag].add(hist)
        else:
            theirs[tag] = hist
    reader.close()
    assert set(theirs) == {f"e2e.all.{v}" for v in synth.VARIANTS}
    rec = Recording.open(tmp_path / "rec")
    for variant in synth.VARIANTS:
        ours = rec.histograms("e2e", "all", variant)
        expected = sum(1 for r in records if r.variant == variant and r.e2e is not None and finish_time(r) < 10)
        assert ours.count == expected == theirs[f"e2e.all.{variant}"].get_total_count()
        for p in PERCENTILE_POINTS[1:]:
            assert ours.percentiles().at(p) == theirs[f"e2e.all.{variant}"].get_value_at_percentile(p)


_CRASH = """
import os, signal, sys
from pathlib import Path
from tests.recording.test_recording_files import _write_run
from tests.recording import synth
from speclab.recording.reader import finish_time
writer = _write_run(Path(sys.argv[1]), close=False, upto=6)
writer.write_records([r for r in synth.make_records() if 6 <= finish_time(r) < 7])
writer.flush()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_sigkilled_recording_replays_up_to_last_closed_interval(tmp_path: Path) -> None:
    path = tmp_path / "rec"
    proc = subprocess.run([sys.executable, "-c", _CRASH, str(path)], cwd=Path(__file__).parents[2], timeout=60)
    assert proc.returncode == -signal.SIGKILL
    records = synth.make_records()
    later = [r for r in records if 6 <= finish_time(r) < 7]
    # ... and the kill landed mid-write: half a line at the end of requests.jsonl and intervals.hlog.
    with open(path / layout.REQUESTS, "a") as fh:
        fh.write(json.dumps(later[0].to_dict())[:57])
    with open(path / layout.INTERVALS, "a") as fh:
        fh.write("Tag=e2e.all.k2,6.000,1.000,0.1,HISTFAAAACh42pNpmSzMwM")
    rec = Recording.open(path)
    assert not rec.complete
    assert rec.last_closed_interval == 5
    assert rec.duration == 6.0
    assert any("requests.jsonl: line" in w and "truncated" in w for w in rec.warnings)
    assert any("intervals.hlog: line" in w and "truncated" in w for w in rec.warnings)
    assert any("did not finish" in w and f"{len(later)} later request record(s) dropped" in w for w in rec.warnings)
    assert len(rec.records) == sum(1 for r in records if finish_time(r) < 6)
    assert max(i.index for i in rec.intervals) == 5
    assert all(s.t < 6 for s in rec.samples)


def test_bad_manifest_names_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "rec"
    RecordingWriter(path, synth.manifest()).close()
    data = json.loads((path / layout.MANIFEST).read_text())
    data["variants"] = []
    (path / layout.MANIFEST).write_text(json.dumps(data))
    with pytest.raises(InputError, match=r"manifest\.json: variants: "):
        Recording.open(path)
    (path / layout.MANIFEST).write_text("{ not json")
    with pytest.raises(InputError, match=r"manifest\.json: line 1 column 3"):
        Recording.open(path)
    with pytest.raises(InputError, match="not a speclab recording"):
        Recording.open(tmp_path)


def test_corrupt_middle_line_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "rec"
    _write_run(path, upto=3)
    lines = (path / layout.REQUESTS).read_text().splitlines(keepends=True)
    lines[3] = "{broken\n"
    (path / layout.REQUESTS).write_text("".join(lines))
    with pytest.raises(InputError, match=r"requests\.jsonl: line 4: not a valid entry"):
        Recording.open(path)


@pytest.mark.parametrize("name", [layout.REQUESTS, layout.INTERVALS])
def test_a_recording_file_that_cannot_be_read_is_bad_input_in_one_line(tmp_path: Path, name: str) -> None:
    path = tmp_path / "rec"
    _write_run(path, upto=3)
    (path / name).unlink()
    (path / name).mkdir()  # a directory where the file should be
    with pytest.raises(InputError, match=rf"{name.replace('.', r'[.]')}: cannot read this recording file: Is a directory"):
        Recording.open(path)


def test_request_records_lost_from_a_recording_are_named_beside_what_its_histograms_measured(tmp_path: Path) -> None:
    path = tmp_path / "rec"
    _write_run(path, upto=3)
    assert Recording.open(path).warnings == []  # whole: no warning
    measured = {v: sum(i.histogram().count for i in Recording.open(path).intervals if i.variant == v)
                for v in synth.VARIANTS}
    assert sum(measured.values()) > 0
    (path / layout.REQUESTS).write_text("")  # emptied (a full disk, a file replaced by hand)
    rec = Recording.open(path)
    assert rec.records == []
    assert sorted(rec.warnings) == sorted(
        f"{path / layout.REQUESTS}: 0 answered request record(s) of {v}, but {path / layout.INTERVALS} measured "
        f"{n}: {n} record(s) are missing" for v, n in measured.items() if n)
