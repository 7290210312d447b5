"""The drill's figures and triggers on records with known answers (no servers)."""

from __future__ import annotations

import pytest

from speclab.gates.drill import Flip, GatewayWatch, drill_failures, measure_flip
from speclab.gates.spikes import link
from speclab.gates.triggers import TriggerWatch, parse_trigger
from speclab.model.errors import InputError
from speclab.model.records import Event, RequestRecord, SpecCounts
from speclab.model.scenario import Scenario
from speclab.traffic.schedule import build_plan
from speclab.traffic.tenants import split_among_tenants


def rec(i: int, backend: str, sent: float, done: float | None, *, error: str | None = None, tenant: str = "B",
        drafted: int = 0, accepted: int = 0, schema_valid: bool | None = None) -> RequestRecord:
    return RequestRecord(request_id=f"r{i}", variant="gateway", prompt_class="c", intended=sent, sent=sent,
                         first_token=None if done is None else sent + 0.01, last_token=done, done=done,
                         error_kind=error, tenant=tenant, backend=backend, output_tokens=8,
                         spec=SpecCounts(steps=drafted // 4, drafted=drafted, accepted=accepted, num_spec_tokens=4,
                                         source="exact" if drafted else "none"), schema_valid=schema_valid)


def test_the_later_observer_sets_each_figure_and_in_flight_requests_are_counted() -> None:
    records = [rec(0, "k4", 9.0, 10.4), rec(1, "k4", 9.9, 11.2), rec(2, "k4", 10.02, 10.5),
               rec(3, "baseline", 10.2, 10.9), rec(4, "baseline", 9.5, 10.3, tenant="A")]
    flip = Flip(command_s=10.0, confirmed_s=10.05, speculative=("k4",))
    watch = GatewayWatch(polls=40, in_flight_at_flip=2, total_at_flip=10, routed_after_command=1,
                         last_routed_s=10.04, drained_s=11.25)
    m = measure_flip(records, flip, watch)
    assert m.rollback_s == pytest.approx(0.04)  # HAProxy saw the last k4 routing after the client sent it
    assert m.drain_s == pytest.approx(1.25)
    assert m.confirmed_s == pytest.approx(0.05)
    assert m.in_flight_at_flip == 2 and m.failed_during_flip == 0 and m.converged
    assert m.observers["client"]["last_speculative_sent_s"] == pytest.approx(0.02)
    assert m.observers["client"]["speculative_sent_after_command"] == 1
    assert drill_failures(m) == []


def test_a_failure_across_the_flip_a_late_speculative_request_and_a_slow_rollback_each_fail_the_drill() -> None:
    records = [rec(0, "k4", 9.0, None, error="truncated"), rec(1, "k4", 12.9, 13.1), rec(2, "k4", 5.0, 6.0)]
    flip = Flip(command_s=10.0, confirmed_s=12.5, speculative=("k4",))
    watch = GatewayWatch(polls=10, in_flight_at_flip=1, total_at_flip=3, routed_after_command=1,
                         last_routed_s=12.9, drained_s=13.2)
    records[0].last_token = 10.3  # it broke after the command
    m = measure_flip(records, flip, watch)
    assert m.failed_during_flip == 1 and m.failed_samples[0]["error_kind"] == "truncated"
    assert m.rollback_s == pytest.approx(2.9) and not m.converged
    failures = " | ".join(drill_failures(m))
    assert "rollback_s 2.900 s" in failures and "took 2.500 s to confirm" in failures
    assert "1 request(s) in flight at the flip or sent during it failed (truncated)" in failures
    assert "did not converge" in failures


def test_no_speculative_traffic_and_no_rollback_are_failures_not_passes() -> None:
    flip = Flip(command_s=10.0, confirmed_s=10.01, speculative=("k4",))
    m = measure_flip([rec(0, "baseline", 9.0, 9.5)], flip, GatewayWatch(polls=3, in_flight_at_flip=0, total_at_flip=0,
                                                                    drained_s=10.001))
    assert m.rollback_s == 0.0 and any("no request reached a speculative backend" in f for f in drill_failures(m))
    assert drill_failures(None) == ["no rollback was made"]


def test_triggers_parse_with_units_and_refuse_bad_specs() -> None:
    assert parse_trigger("rejection>40").threshold == 40 and parse_trigger("structured > 5%").metric == "structured"
    assert parse_trigger("p99>1.5s").threshold == 1500 and parse_trigger("p99>900ms").spec == "p99>900ms"
    for bad in ("p99>0", "rejection>100", "rejection>3s", "speed>3", "p99<4", ""):
        with pytest.raises(InputError):
            parse_trigger(bad)


def test_a_trigger_fires_after_n_consecutive_judged_intervals_and_quiet_intervals_do_not_break_a_streak() -> None:
    watch = TriggerWatch([parse_trigger("rejection>50")], intervals=3, min_drafted=8)
    watch.add([rec(0, "k4", 0.1, 0.5, drafted=40, accepted=35), rec(1, "k4", 1.0, 1.5, drafted=40, accepted=10),
               rec(2, "k4", 2.0, 2.4, drafted=40, accepted=10)])  # 12.5%, 75%, 75% rejected
    watch.add([rec(3, "k4", 3.1, 3.2, drafted=4, accepted=0)])  # interval 3: too few drafts, not judged
    watch.add([rec(4, "k4", 4.0, 4.6, drafted=40, accepted=10)])
    assert watch.judge(4.4) is None  # intervals 0-3 closed: 2 bad in a row so far
    fired = watch.judge(5.6)
    assert fired is not None and [i for i, _ in fired.intervals] == [1, 2, 4]
    assert fired.intervals[0][1] == pytest.approx(75.0) and "held for 3 intervals (1-4" in fired.message
    assert [row["rejection>50%"] for row in watch.judged] == [12.5, 75.0, 75.0, None, 75.0]


def test_structured_and_p99_triggers_judge_their_own_data() -> None:
    watch = TriggerWatch([parse_trigger("structured>20"), parse_trigger("p99>300ms")], intervals=1)
    watch.add([rec(0, "k4", 0.0, 0.2, schema_valid=True), rec(1, "k4", 0.5, 0.7, schema_valid=True)])
    assert watch.judge(1.6) is None
    watch.add([rec(2, "k4", 1.0, 1.8, schema_valid=True)])  # e2e 800 ms
    fired = watch.judge(2.6)
    assert fired is not None and fired.trigger.metric == "p99" and fired.intervals[0][1] == pytest.approx(800, rel=0.01)
    other = TriggerWatch([parse_trigger("structured>20")], intervals=1)
    other.add([rec(3, "k4", 0.0, 0.2, schema_valid=False), rec(4, "k4", 0.1, 0.3, schema_valid=True),
               rec(5, "k4", 0.1, 0.3)])  # no schema: not counted
    fired = other.judge(1.6)
    assert fired is not None and fired.intervals == ((0, 50.0),)


def test_the_spike_is_linked_to_the_latest_change_before_it() -> None:
    events = [Event(t=2.0, kind="route_change", message="gateway: tenant B: baseline -> k4 (x)",
                    data={"what": {"kind": "tenant", "name": "B", "from": "baseline", "to": "k4"}}),
              Event(t=3.0, kind="warning", message="not a change"),
              Event(t=30.0, kind="rollback", message="gateway: rollback")]
    linked = link(14.0, "rejection spike", events)
    assert linked["after_s"] == 12.0 and linked["text"] == "rejection spike began 12.0 s after tenant B moved from baseline to k4"
    assert link(1.0, "x", events)["after_change"] is None


def test_each_class_is_split_across_the_tenants_request_by_request() -> None:
    scenario = Scenario.model_validate({
        "name": "s", "requests": 40, "arrival": {"process": "constant", "rate": 10},
        "classes": {"a": {"prompts": ["one"], "weight": 1}, "b": {"prompts": ["two"], "weight": 1},
                    "pinned": {"prompts": ["three"], "weight": 1, "tenant": "Z"}}})
    plan = split_among_tenants(build_plan(scenario), ("A", "B"))
    reqs = [plan.request(i) for i in range(40)]
    base = build_plan(scenario)
    assert [r.prompt_class for r in reqs] == [base.request(i).prompt_class for i in range(40)]
    for r in reqs:
        if r.prompt_class == "pinned":
            assert r.tenant == "Z"
        else:
            assert r.tenant == ("A", "B")[r.index % 2] and r.headers["X-Tenant"] == r.tenant
    assert {(r.prompt_class, r.tenant) for r in reqs} >= {("a", "A"), ("a", "B"), ("b", "A"), ("b", "B")}
    with pytest.raises(InputError):
        split_among_tenants(base, ("A", "A"))
