"""Exit-code judgement, progress lines and report rendering from synthetic snapshots."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from speclab.headless.progress import progress_line
from speclab.headless.run import judge
from speclab.metrics.aggregator import Aggregator
from speclab.metrics.run_tally import RunTally
from speclab.metrics.sim_drift import DriftJudge
from speclab.model.exit_codes import ExitCode
from speclab.model.records import RequestRecord, SpecCounts
from speclab.model.snapshot import ClientHealth, Snapshot
from speclab.model.time_scale import TimeScale
from speclab.reports import build_report, render_markdown
from speclab.session.api import ServerView, SessionInfo


def _record(i: int, *, variant: str = "k2", error: str | None = None, t: float = 0.5) -> RequestRecord:
    rec = RequestRecord(request_id=f"r{i}", variant=variant, prompt_class="qa", intended=t, sent=t + 0.001)
    if error is None:
        rec.first_token, rec.last_token, rec.done = t + 0.02, t + 0.1, t + 0.1
        rec.output_tokens = 10
        rec.spec = SpecCounts(steps=4, drafted=8, accepted=6, histogram=[0, 2, 2], num_spec_tokens=2, source="exact")
    else:
        rec.error_kind, rec.error_message, rec.done = error, "HTTP 500: boom", t + 0.01
    return rec


def _final(records: list[RequestRecord], end: float, saturated: tuple[int, ...] = ()) -> Snapshot:
    agg = Aggregator(["k2"], ["qa"])
    agg.add_records(records)
    for i in saturated:
        agg.mark_saturated(i)
    return agg.snapshot(end, finished=True)


def _session(records: list[RequestRecord], traffic_errors: tuple[str, ...] = (),
             servers_exited: dict[str, str] | None = None) -> Any:
    tally = RunTally()
    tally.add_records(records)
    return SimpleNamespace(tally=tally, change_failures=[], traffic_errors=lambda: list(traffic_errors),
                           drift=DriftJudge(), time_scale=TimeScale(), servers_exited=servers_exited or {})


def test_a_server_that_died_during_the_run_is_exit_3_naming_its_cause() -> None:
    """Requests answered before the crash are no "ok" run: the exit names the server and why it went."""
    records = [_record(i, t=0.1 * i) for i in range(4)] + [_record(4, error="connect", t=0.5)]
    down = {"k2": "server exited at t=6.2 s: engine crashed (exited with code 1): EngineCore encountered a fatal error"}
    code, reason = judge(_session(records, servers_exited=down), _final(records, 1.0), interrupted=False)
    assert code == ExitCode.SERVER_NOT_READY
    assert reason == "k2: server exited at t=6.2 s: engine crashed (exited with code 1): EngineCore encountered a fatal error"
    assert judge(_session(records, servers_exited=down), _final(records, 1.0), interrupted=True)[0] == ExitCode.INTERRUPTED


def test_a_dead_worker_or_a_lost_request_is_exit_6_before_every_request_failing() -> None:
    records = [_record(i, error="http_5xx", t=0.1 * i) for i in range(5)]
    code, reason = judge(_session(records, ("traffic worker 1 ended without a summary (exit code -9)",)),
                         _final(records, 1.0), interrupted=False)
    assert code == ExitCode.MEASUREMENT_INCOMPLETE and "traffic worker 1" in reason
    ok = [_record(i, t=float(i)) for i in range(3)]
    agg = Aggregator(["k2"], ["qa"])
    agg.add_records(ok)
    agg.set_planned({("k2", 1): 5})
    final = agg.snapshot(3.0, finished=True)
    (epoch,) = final.epochs["k2"]
    assert epoch.accounting.as_dict() == {"planned": 5, "completed": 3, "errored": 0, "warmup": 0,
                                          "in_transition": 0, "lost": 2}
    code, reason = judge(_session(ok), final, interrupted=False)
    assert code == ExitCode.MEASUREMENT_INCOMPLETE and reason == "requests begun but never recorded: k2 2"


def test_all_failed_is_exit_4_with_the_first_message() -> None:
    records = [_record(i, error="http_5xx", t=0.1 * i) for i in range(5)]
    code, reason = judge(_session(records), _final(records, 1.0), interrupted=False)
    assert code == ExitCode.ALL_REQUESTS_FAILED and "http_5xx" in reason and "HTTP 500: boom" in reason


def test_a_saturated_client_for_most_of_a_long_run_is_exit_5_but_a_short_run_only_flags() -> None:
    records = [_record(i, t=float(i)) for i in range(10)]
    code, _ = judge(_session(records), _final(records, 10.0, saturated=tuple(range(8))), interrupted=False)
    assert code == ExitCode.MEASUREMENT_INVALID
    short = records[:3]
    code, _ = judge(_session(short), _final(short, 3.0, saturated=(0, 1, 2)), interrupted=False)
    assert code == ExitCode.OK


def test_the_report_keeps_the_client_s_own_saturated_intervals_apart_from_those_its_requests_touched() -> None:
    records = [_record(i, t=float(i) + 0.1) for i in range(10)]
    slow = _record(20, t=2.5)
    slow.done = slow.last_token = 3.5  # sent while the client was saturated, finished an interval later
    final = _final([*records, slow], 10.0, saturated=(2,))
    assert final.saturated_sends == (2,) and final.saturated_intervals == (2, 3)
    info = SessionInfo(lab="lab", scenario="sc", variants=("k2",), classes=("qa",), simulated=True)
    report = build_report(info, final, servers={})
    assert report["measurement"]["saturated_intervals"] == [2, 3]
    assert report["measurement"]["client_saturated_intervals"] == [2]
    md = render_markdown(report)
    assert "Client could not keep up in 1 interval(s)** (2; its requests from then finished in 2 interval(s))" in md
    assert "numbers from 2, 3 describe the client" in md


def test_some_failed_requests_are_exit_0_and_said() -> None:
    records = [_record(i, t=0.1 * i) for i in range(8)] + [_record(8, error="http_5xx", t=0.9)]
    records[-1].error_message = "HTTP 500: Internal boom"
    code, reason = judge(_session(records), _final(records, 1.0), interrupted=False)
    assert code == ExitCode.OK and reason == "ok, but 1 of 9 requests failed (http_5xx): HTTP 500: Internal boom"


def test_interrupted_wins_and_ok_otherwise() -> None:
    records = [_record(i, t=float(i)) for i in range(3)]
    assert judge(_session(records), _final(records, 3.0), interrupted=True)[0] == ExitCode.INTERRUPTED
    assert judge(_session(records), _final(records, 3.0), interrupted=False)[0] == ExitCode.OK


def test_progress_line_and_markdown_carry_the_headline_metrics() -> None:
    records = [_record(i, t=0.1 * i) for i in range(8)]
    final = _final(records, 2.0)
    line = progress_line(final)
    assert line.startswith("t=") and "k2" in line and "AL 2.50" in line and "rej 25%" in line
    run_rate = final.cumulative["k2"].total.requests_per_s  # a summary quotes the run's rate, not its last interval's
    assert run_rate > 0 and f"k2 {run_rate:.1f} req/s done 8" in progress_line(final, whole_run=True)
    saturated = Snapshot(t=1.0, interval=0, health=ClientHealth(saturated=True, reason="schedule lag p99 9 ms"))
    assert "CLIENT SATURATED (schedule lag p99 9 ms)" in progress_line(saturated)
    # A run's summary quotes its worst interval, not the last (an interval cut short can hold nothing).
    ended = Snapshot(t=9.4, interval=9, health=ClientHealth(), run_health=ClientHealth(schedule_lag_p99_ms=4.3))
    assert "client lag p99 0.0ms" in progress_line(ended)
    assert "client worst interval: lag p99 4.3ms" in progress_line(ended, whole_run=True)
    # ... and when that interval was saturated, how many of the run's were (one cut short by q is one).
    once = Snapshot(t=22.5, interval=22, saturated_intervals=(22,),
                    run_health=ClientHealth(saturated=True, reason="send delay p99 5.7 ms > 5 ms"))
    assert progress_line(once, whole_run=True).endswith(
        "| client saturated in 1 of 23 intervals (worst: send delay p99 5.7 ms > 5 ms)")
    info = SessionInfo(lab="lab", scenario="sc", variants=("k2",), classes=("qa",), simulated=True)
    view = ServerView(variant="k2", status="ready", command="vllm serve x", base_url="http://h", engine="sim")
    report = build_report(info, final, servers={"k2": view})
    assert [e["epoch"] for e in report["variants"]["k2"]["epochs"]] == [1] and report["transitions"] == []
    qa = report["variants"]["k2"]["epochs"][0]["classes"]["qa"]
    assert qa["requests"] == 8 and qa["acceptance"]["acceptance_length_mean"] == 2.5
    assert qa["acceptance"]["rejection_rate"] == 0.25 and qa["acceptance"]["acceptance_length_distribution"] == [0, 16, 16]
    md = render_markdown(report)
    assert "SIMULATED" in md and "| k2 | qa | 8 | 0 | 2.50 | 25.0% | 4.0 |" in md


def test_the_timeline_names_the_worst_interval_per_variant() -> None:
    from speclab.headless.progress import interval_row

    records = [_record(i, t=0.2 + i) for i in range(3)]
    slow = _record(9, t=1.3)
    slow.done = slow.last_token = 1.3 + 0.9  # finishes in interval 2 with a 900 ms e2e
    agg = Aggregator(["k2"], ["qa"])
    agg.add_records([*records, slow])
    final = agg.snapshot(4.0, finished=True)
    timeline = [interval_row(i, agg.window(i, i), False) for i in range(final.interval + 1)]
    assert [row["t"] for row in timeline] == [float(i + 1) for i in range(final.interval + 1)]
    info = SessionInfo(lab="lab", scenario="sc", variants=("k2",), classes=("qa",), simulated=True)
    report = build_report(info, final, servers={}, extra={"timeline": timeline})
    md = render_markdown(report)
    assert f"| k2 | {final.interval + 1} | 900" in md and "(t=3s)" in md
