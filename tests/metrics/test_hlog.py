from __future__ import annotations

import random
from pathlib import Path

import pytest
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader

from speclab.metrics.hdr import LatencyHistogram
from speclab.metrics.hlog import HlogWriter, TruncatedLogWarning, make_tag, parse_tag, read_hlog
from speclab.model.errors import InputError
from speclab.model.names import HIST_HIGHEST_US, PERCENTILE_POINTS, Metric

START = 1_767_225_600.0


def _hist(seed: int) -> LatencyHistogram:
    rng = random.Random(seed)
    h = LatencyHistogram()
    for _ in range(200):
        h.record_us(rng.lognormvariate(10, 1))
    return h


def _write(path: Path, n: int) -> list[tuple[str, LatencyHistogram]]:
    written = []
    with HlogWriter(path, start_time_epoch_s=START) as writer:
        for i in range(n):
            tag = make_tag(Metric.E2E_CORRECTED, "qa", f"k{i % 2}")
            h = _hist(i)
            writer.write(tag, float(i), 1.0, h)
            written.append((tag, h))
    return written


def test_library_reader_reads_our_file_with_same_percentiles(tmp_path: Path) -> None:
    path = tmp_path / "intervals.hlog"
    written = _write(path, 4)
    reader = HistogramLogReader(str(path), HdrHistogram(1, HIST_HIGHEST_US, 3))
    try:
        for i, (tag, ours) in enumerate(written):
            theirs = reader.get_next_interval_histogram()
            assert theirs is not None
            assert theirs.get_tag() == tag
            assert theirs.get_start_time_stamp() == pytest.approx((START + i) * 1000.0)
            assert [theirs.get_value_at_percentile(p) for p in PERCENTILE_POINTS] == list(
                ours.percentiles().values
            )
        assert reader.get_next_interval_histogram() is None
    finally:
        reader.close()


def test_our_reader_roundtrip_and_append(tmp_path: Path) -> None:
    path = tmp_path / "intervals.hlog"
    written = _write(path, 3)
    with HlogWriter(path, start_time_epoch_s=START) as writer:  # reopening appends, no second header
        writer.write("ttft.qa.k0", 3.0, 1.0, _hist(9))
    contents = read_hlog(path)
    assert contents.start_time_epoch_s == pytest.approx(START)
    assert not contents.truncated
    assert [i.tag for i in contents.intervals] == [t for t, _ in written] + ["ttft.qa.k0"]
    for interval, (_, h) in zip(contents.intervals[:3], written, strict=True):
        assert interval.histogram.percentiles() == h.percentiles()
    assert path.read_text().count("#[StartTime") == 1
    assert len(list(contents.by_tag("ttft.qa.k0"))) == 1


def test_truncated_last_line_warns_and_keeps_complete(tmp_path: Path) -> None:
    path = tmp_path / "intervals.hlog"
    _write(path, 3)
    text = path.read_text()
    path.write_text(text[: len(text) - 40])
    with pytest.warns(TruncatedLogWarning, match="truncated"):
        contents = read_hlog(path)
    assert contents.truncated
    assert len(contents.intervals) == 2


def test_corrupt_middle_line_is_one_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "intervals.hlog"
    _write(path, 3)
    lines = path.read_text().splitlines(keepends=True)
    lines[5] = "Tag=x.y.z,1.0,1.0,1.0,garbage\n"
    path.write_text("".join(lines))
    with pytest.raises(InputError, match=r"intervals.hlog:6"):
        read_hlog(path)


def test_tags() -> None:
    assert make_tag(Metric.TTFT, "tool_call", "spec.k3") == "ttft.tool_call.spec.k3.e1"
    assert make_tag(Metric.TTFT, "tool_call", "k4", 2) == "ttft.tool_call.k4.e2"
    assert parse_tag("ttft.tool_call.spec.k3.e1") == ("ttft", "tool_call", "spec.k3", 1)
    assert parse_tag("ttft.tool_call.k4.e12") == ("ttft", "tool_call", "k4", 12)
    # Written before epochs: no .eN, so epoch 1 (even where the variant has dots of its own).
    assert parse_tag("ttft.tool_call.spec.k3") == ("ttft", "tool_call", "spec.k3", 1)
    assert parse_tag("ttft.tool_call.127.0.0.1:8000") == ("ttft", "tool_call", "127.0.0.1:8000", 1)
    with pytest.raises(InputError):
        make_tag(Metric.TTFT, "qa", "v", 0)
    for bad in ("with space", "a,b", ""):
        with pytest.raises(InputError):
            make_tag(Metric.TTFT, bad, "v")
    with pytest.raises(InputError):
        make_tag(Metric.TTFT, "a.b", "v")


def test_aggregator_intervals_through_hlog_match_its_windows(tmp_path: Path) -> None:
    from speclab.metrics.aggregator import Aggregator
    from speclab.model.records import RequestRecord

    rng = random.Random(4)
    agg = Aggregator(["k3"], ["qa", "tool"])
    records = []
    for i in range(120):
        done = rng.uniform(0, 3)
        sent = done - rng.uniform(0.1, 0.5)
        records.append(
            RequestRecord(request_id=str(i), variant="k3", prompt_class=rng.choice(["qa", "tool"]),
                          intended=sent - 0.002, sent=sent, first_token=sent + 0.03, last_token=done, done=done,
                          output_tokens=10)
        )
    agg.add_records(records)
    agg.finish(3.0)
    path = tmp_path / "intervals.hlog"
    with HlogWriter(path, start_time_epoch_s=START) as writer:
        for _, start_s, end_s, tag, hist in agg.iter_closed_intervals():
            writer.write(tag, start_s, end_s - start_s, hist)
    contents = read_hlog(path)
    assert len(contents.intervals) == 3 * 2 * 6  # intervals x classes x metrics measured here
    for interval in contents.intervals:
        metric, cls, variant, epoch = parse_tag(interval.tag or "")
        assert epoch == 1
        expected = agg.window(int(interval.start_s), int(interval.start_s))[variant].classes[cls].latency[metric]
        assert interval.histogram.percentiles() == expected
