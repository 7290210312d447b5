"""The latency metric registry is the one declaration: every view and the docs follow it."""

from __future__ import annotations

from pathlib import Path

from speclab.metrics.ab import AB_METRICS
from speclab.metrics.cells import METRIC_VALUES
from speclab.metrics.exporter import LATENCY_SERIES
from speclab.model.latency_metrics import BY_METRIC, LATENCY_METRICS, Shown, markdown_table, shown_in
from speclab.model.names import Metric
from speclab.model.records import RequestRecord
from speclab.recording.compare import COMPARED_METRICS
from speclab.reports.build import SPLIT_PARTS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_metric_is_declared_once_and_reaches_every_view() -> None:
    assert set(BY_METRIC) == set(Metric) and len(LATENCY_METRICS) == len(Metric)
    assert list(METRIC_VALUES) == list(Metric)
    assert {m: name for m, (name, _) in LATENCY_SERIES.items()} == {m.metric: m.prom for m in LATENCY_METRICS}
    assert sorted(AB_METRICS) == ["e2e", "e2e_corrected", "tpot", "ttft", "ttft_corrected"]
    assert [m.value for m in COMPARED_METRICS] == [
        "e2e_corrected", "e2e", "ttft_corrected", "ttft", "server_queue", "server_prefill", "server_decode", "tpot"]
    assert [m.value for m in shown_in(Shown.SPECTRUM)] == [
        "e2e", "ttft", "server_queue", "server_prefill", "server_decode", "tpot"]
    assert SPLIT_PARTS == ("schedule_lag", "server_queue", "server_prefill", "server_decode", "client_transport")


def test_values_are_seconds_from_the_record() -> None:
    record = RequestRecord(request_id="r", variant="v", prompt_class="c", intended=1.0, sent=1.5, first_token=2.0,
                           last_token=3.0, done=3.5, output_tokens=5, server_queue_ms=250.0)
    assert BY_METRIC[Metric.E2E_CORRECTED].value(record) == 2.5
    assert BY_METRIC[Metric.SCHEDULE_LAG].value(record) == 0.5
    assert BY_METRIC[Metric.TPOT].value(record) == 0.25
    assert BY_METRIC[Metric.SERVER_QUEUE].value(record) == 0.25
    assert BY_METRIC[Metric.SERVER_DECODE].value(record) is None


def test_every_metric_is_documented_as_declared() -> None:
    assert markdown_table() in (DOCS / "measurements.md").read_text()
