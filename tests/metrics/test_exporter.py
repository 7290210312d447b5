"""speclab's Prometheus collector over snapshots: every series against the snapshot it came from.

The traffic is the relaunch scenario of ``test_epochs`` (k4 relaunched with k=6 at 10.4 s, its new
server answering at 12.6 s): counters per (variant, epoch, class) must equal the final snapshot's
epochs, buckets must equal an exact count of the recorded values, and ``speclab_config_info`` must
name the current epoch only.
"""

from __future__ import annotations

import socket
import urllib.request
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from speclab.metrics.aggregator import Aggregator
from speclab.metrics.cells import METRIC_VALUES, finish_time
from speclab.metrics.exporter import SpeclabCollector
from speclab.metrics.exporter_http import serve_metrics
from speclab.model.errors import InputError
from speclab.model.names import LATENCY_BUCKETS_S, Metric
from speclab.model.snapshot import ClassStats, ClientHealth, Snapshot

from .test_epochs import ANSWERED, K4, aggregate, record, traffic

RUN = {"lab": "default", "target_model": "meta-llama/Llama-3.1-8B-Instruct", "target_revision": "main",
       "draft_model": "meta-llama/Llama-3.2-1B-Instruct", "draft_revision": "abc123", "draft_method": "draft_model"}


def _collected(collector: SpeclabCollector) -> dict[str, list[tuple[dict[str, str], float]]]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def _samples(snap: Snapshot) -> dict[str, list[tuple[dict[str, str], float]]]:
    collector = SpeclabCollector(RUN)
    collector.update(snap)
    return _collected(collector)


def _one(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    found = [v for lab, v in samples.get(name, []) if all(lab.get(k) == x for k, x in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


@pytest.fixture(scope="module")
def final() -> tuple[Snapshot, Any]:
    records = traffic()
    agg = aggregate(records)
    return agg.snapshot(20.0, finished=True), records


def test_counters_equal_the_snapshots_epochs(final: tuple[Snapshot, Any]) -> None:
    snap, _ = final
    samples = _samples(snap)
    seen = 0
    for variant, epochs in snap.epochs.items():
        for e in epochs:
            c = e.stats.classes["qa"]
            key = {"variant": variant, "epoch": str(e.info.epoch), "class": "qa"}
            assert _one(samples, "speclab_requests_total", **key) == c.requests
            assert _one(samples, "speclab_spec_decode_draft_tokens_total", **key) == c.acceptance.drafted
            assert _one(samples, "speclab_spec_decode_accepted_tokens_total", **key) == c.acceptance.accepted
            assert _one(samples, "speclab_spec_decode_verify_steps_total", **key) == c.acceptance.steps
            assert _one(samples, "speclab_output_tokens_total", **key) == c.output_tokens
            for kind, n in c.errors.items():
                assert _one(samples, "speclab_request_errors_total", **key, kind=kind) == n
            seen += 1
    assert seen == 3  # baseline epoch 1, k4 epochs 1 and 2: never summed across epochs
    assert not any(lab.get("class") == "all" for lab, _ in samples["speclab_requests_total"])
    assert _one(samples, "speclab_spec_decode_draft_tokens_total", variant="k4", epoch="2", **{"class": "qa"}) > 0


def test_latency_buckets_count_the_recorded_values(final: tuple[Snapshot, Any]) -> None:
    snap, records = final
    samples = _samples(snap)
    mine = [r for r in records if r.variant == "k4" and r.epoch == 2 and r.ok and not r.warmup]
    values = sorted(METRIC_VALUES[Metric.E2E](r) or 0.0 for r in mine)
    key = {"variant": "k4", "epoch": "2", "class": "qa"}
    buckets = {lab["le"]: v for lab, v in samples["speclab_request_e2e_seconds_bucket"]
               if all(lab.get(k) == x for k, x in key.items())}
    assert list(buckets) == [*(str(float(b)) for b in LATENCY_BUCKETS_S), "+Inf"]
    for bound in LATENCY_BUCKETS_S:
        exact = sum(v <= bound for v in values)
        within = sum(v <= bound * 1.001 for v in values)  # 3 significant digits
        assert exact <= buckets[str(float(bound))] <= within, bound
    assert buckets["+Inf"] == len(values) == _one(samples, "speclab_request_e2e_seconds_count", **key)
    assert _one(samples, "speclab_request_e2e_seconds_sum", **key) == pytest.approx(sum(values), rel=1e-3)


def test_acceptance_length_histogram_is_per_verify_step(final: tuple[Snapshot, Any]) -> None:
    snap, _ = final
    samples = _samples(snap)
    acc = snap.epochs["k4"][1].stats.classes["qa"].acceptance
    key = {"variant": "k4", "epoch": "2", "class": "qa"}
    buckets = {lab["le"]: v for lab, v in samples["speclab_spec_decode_acceptance_length_bucket"]
               if all(lab.get(k) == x for k, x in key.items())}
    assert list(buckets) == [str(float(j)) for j in range(1, 8)] + ["+Inf"]  # k=6: 1..7 tokens per step
    assert buckets["+Inf"] == acc.steps == _one(samples, "speclab_spec_decode_acceptance_length_count", **key)
    assert _one(samples, "speclab_spec_decode_acceptance_length_sum", **key) == acc.steps + acc.accepted


def test_config_info_names_each_variants_current_epoch(final: tuple[Snapshot, Any]) -> None:
    snap, _ = final
    samples = _samples(snap)
    info = {lab["variant"]: lab for lab, v in samples["speclab_config_info"] if v == 1.0}
    assert len(samples["speclab_config_info"]) == 2
    assert info["k4"]["epoch"] == "2" and info["k4"]["k"] == "6" and info["k4"]["label"].startswith("k4·2")
    assert info["k4"]["draft_model"] == RUN["draft_model"] and info["k4"]["draft_revision"] == "abc123"
    assert info["k4"]["method"] == "draft_model"
    assert info["baseline"]["k"] == "0" and info["baseline"]["draft_model"] == ""
    assert _one(samples, "speclab_variant_epoch", variant="k4") == 2
    assert _one(samples, "speclab_run_finished") == 1
    transition = snap.transitions[0]
    assert _one(samples, "speclab_transition_requests_total", variant="k4", from_epoch="1",
                to_epoch="2") == transition.requests


def _where(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> dict[str, float]:
    return {lab["le"]: v for lab, v in samples.get(name, []) if all(lab.get(k) == x for k, x in labels.items())}


def test_every_class_of_every_epoch_is_served_at_zero_until_its_first_request() -> None:
    """A class whose requests all finish between two scrapes still shows as an increase, so the
    dashboard's rate() and histogram_quantile panels have a baseline from the epoch's start."""
    early = [r for r in traffic() if finish_time(r) < ANSWERED]  # k4's epoch 2 begun, none of its requests done
    snap = aggregate(early, 13.0).snapshot(13.0)
    assert [e.info.epoch for e in snap.epochs["k4"]] == [1, 2]
    assert not snap.epochs["k4"][1].stats.classes.get("qa", ClassStats()).requests
    collector = SpeclabCollector(RUN)
    collector.expect_classes(["qa", "code"])  # the scenario's classes; "code" never sends here
    collector.update(snap)
    samples = _collected(collector)
    for variant, epoch in (("baseline", "1"), ("k4", "1"), ("k4", "2")):
        key = {"variant": variant, "epoch": epoch, "class": "code"}
        assert _one(samples, "speclab_requests_total", **key) == 0
        assert _one(samples, "speclab_request_e2e_seconds_count", **key) == 0
        assert set(_where(samples, "speclab_request_e2e_seconds_bucket", **key).values()) == {0.0}
    fresh = {"variant": "k4", "epoch": "2", "class": "qa"}
    assert _one(samples, "speclab_requests_total", **fresh) == 0
    assert _one(samples, "speclab_spec_decode_accepted_tokens_total", **fresh) == 0
    length = "speclab_spec_decode_acceptance_length_bucket"
    assert _where(samples, length, **fresh) == {**{str(float(j)): 0.0 for j in range(1, 8)}, "+Inf": 0.0}  # k=6
    assert not _where(samples, length, variant="baseline")  # no drafts, no acceptance length
    assert _one(_samples(snap), "speclab_requests_total", **fresh) == 0  # a class seen in any epoch counts too

    final = aggregate(traffic()).snapshot(20.0, finished=True)
    collector.update(final)
    after = _collected(collector)
    qa = final.epochs["k4"][1].stats.classes["qa"]
    assert _one(after, "speclab_requests_total", **fresh) == qa.requests > 0  # the same series, counting
    assert set(_where(after, length, **fresh)) == set(_where(samples, length, **fresh))
    assert _where(after, length, **fresh)["+Inf"] == qa.acceptance.steps


def test_before_the_first_snapshot_only_the_run_series_exist() -> None:
    collector = SpeclabCollector()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    names = {f.name for f in text_string_to_metric_families(generate_latest(registry).decode())}
    assert names == {"speclab_run_elapsed_seconds", "speclab_run_finished", "speclab_time_scale"}


def test_endpoint_serves_and_a_port_in_use_is_bad_input(final: tuple[Snapshot, Any]) -> None:
    endpoint = serve_metrics(0, run=RUN)
    try:
        endpoint.collector.update(final[0])
        with urllib.request.urlopen(endpoint.url, timeout=5) as r:
            body = r.read().decode()
        assert 'speclab_config_info{' in body and "speclab_request_tpot_seconds_bucket" in body
        with pytest.raises(InputError, match=rf"--metrics-port {endpoint.port}: 127.0.0.1:{endpoint.port} is already in use"):
            serve_metrics(endpoint.port)
    finally:
        endpoint.close()
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):  # closed: nobody listens there now
        s.connect(("127.0.0.1", endpoint.port))


def _cell(variant: str, k: int, requests: int, *, finished: bool) -> Snapshot:
    """One sweep cell's session: a single variant, one epoch, ``requests`` finished requests."""
    agg = Aggregator([variant], ["qa"])
    agg.launch(variant, {**K4, "num_speculative_tokens": k} if k else {"max_num_seqs": 64}, baseline=not k)
    agg.add_records(record(n, 0.1 * n + 0.01, 0.05, variant=variant, k=k) for n in range(requests))
    agg.tick(5.0)
    return agg.snapshot(5.0, finished=finished)


def test_a_snapshot_after_the_final_one_is_not_served(final: tuple[Snapshot, Any]) -> None:
    collector = SpeclabCollector(RUN)
    collector.update(final[0])
    collector.update(_cell("k4", 4, 3, finished=False))  # a late tick of the session's pump
    assert collector.snapshot is final[0]
    assert _one(_collected(collector), "speclab_run_finished") == 1


def test_sweep_cells_keep_their_counts_and_each_cell_marks_its_config() -> None:
    collector = SpeclabCollector(RUN)
    collector.begin_part("1", {"cell": "k0-c1", "load": "concurrency=1"})
    collector.update(_cell("k0", 0, 4, finished=True))
    collector.begin_part("2", {"cell": "k2-c1", "load": "concurrency=1"})
    collector.update(_cell("k2", 2, 6, finished=False))
    samples = _collected(collector)
    assert _one(samples, "speclab_requests_total", variant="k0", epoch="1") == 4  # the finished cell stays up
    assert _one(samples, "speclab_requests_total", variant="k2", epoch="2") == 6
    info = [lab for lab, _ in samples["speclab_config_info"]]
    assert [(i["variant"], i["epoch"], i["cell"], i["load"], i["k"]) for i in info] == [
        ("k2", "2", "k2-c1", "concurrency=1", "2")]  # only the running cell's configuration is current
    assert {lab["variant"]: v for lab, v in samples["speclab_variant_epoch"]} == {"k0": 1.0, "k2": 2.0}
    assert _one(samples, "speclab_run_finished") == 0  # a cell's final snapshot does not end the sweep
    assert _one(samples, "speclab_run_elapsed_seconds") == 10.0
    collector.update(_cell("k2", 2, 6, finished=True))
    collector.end()
    assert _one(_collected(collector), "speclab_run_finished") == 1


def test_the_client_health_gauges_carry_the_flags_inputs_in_seconds() -> None:
    health = ClientHealth(schedule_lag_p99_ms=3.0, send_delay_p99_ms=6.5, read_lateness_ms=2.25, cpu_percent=40.0,
                          saturated=True)
    samples = _samples(Snapshot(t=2.0, interval=1, health=health))
    assert _one(samples, "speclab_client_send_delay_p99_seconds") == pytest.approx(0.0065)
    assert _one(samples, "speclab_client_read_lateness_seconds") == pytest.approx(0.00225)
    assert _one(samples, "speclab_client_schedule_lag_p99_seconds") == pytest.approx(0.003)
    assert _one(samples, "speclab_client_saturated") == 1.0


def test_the_time_scale_is_served_as_a_gauge_and_on_the_config(final: tuple[Snapshot, Any]) -> None:
    """Counters count modelled events but rate() is per wall second: the dashboard multiplies by S."""
    samples = _samples(final[0])  # a run that names no scale: real servers, or S = 1
    assert _one(samples, "speclab_time_scale") == 1.0
    assert {lab["time_scale"] for lab, _ in samples["speclab_config_info"]} == {"1"}
    scaled = SpeclabCollector({**RUN, "time_scale": 4.0})
    scaled.update(final[0])
    samples = _collected(scaled)
    assert _one(samples, "speclab_time_scale") == 4.0
    assert {lab["time_scale"] for lab, _ in samples["speclab_config_info"]} == {"4"}
    assert _one(samples, "speclab_requests_total", variant="k4", epoch="2", **{"class": "qa"}) == \
        final[0].epochs["k4"][1].stats.classes["qa"].requests  # the counts themselves stay modelled events
    scaled.set_time_scale(2.5)
    assert _one(_collected(scaled), "speclab_time_scale") == 2.5
    with pytest.raises(ValueError, match="at least 1"):
        scaled.set_time_scale(0.5)
    with pytest.raises(ValueError, match="at least 1"):
        SpeclabCollector({"time_scale": 0})


def test_each_sweep_cell_serves_its_own_time_scale() -> None:
    collector = SpeclabCollector(RUN)
    collector.begin_part("1", {"cell": "k0-c1", "load": "concurrency=1"}, time_scale=1.0)
    collector.update(_cell("k0", 0, 4, finished=True))
    assert _one(_collected(collector), "speclab_time_scale") == 1.0
    collector.begin_part("2", {"cell": "k2-c64", "load": "concurrency=64"}, time_scale=8.0)
    collector.update(_cell("k2", 2, 6, finished=False))
    samples = _collected(collector)
    assert _one(samples, "speclab_time_scale") == 8.0  # the running cell's
    assert [(i["cell"], i["time_scale"]) for i, _ in samples["speclab_config_info"]] == [("k2-c64", "8")]
    collector.begin_part("3", {"cell": "k4-c64", "load": "concurrency=64"})  # no scale given: unchanged
    assert collector.time_scale == 8.0
