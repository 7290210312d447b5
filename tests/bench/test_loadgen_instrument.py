"""bench_loadgen's instrument: the ground-truth server, its matching and the per-interval truth.

The server is driven for real (its own process, real sockets) by the plain client and by
``speclab run --attach``, at a rate small enough for a loaded host; the checks are on what must
hold whatever the host's speed: every planned request reaches the server and is matched by id,
the server's kernel receive time precedes its own read, and no client reads a token before the
server wrote it (error ≥ 0, up to the microseconds two clocks can disagree by).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from loadgen_plan import Workload  # noqa: E402
from loadgen_runs import RunResult, ServerConfig, run_client  # noqa: E402
from loadgen_truth import ClientRecord, Pair, interval_truth, match, percentile, score_flag  # noqa: E402

SMALL = ServerConfig(ttft_ms=20.0, itl_ms=2.0, tokens=8)
CLOCK_SLACK_S = 0.0005  # wall and monotonic clocks may disagree by this much over a 20 ms span


def _check(run: RunResult) -> None:
    server = run.server.records
    assert run.planned > 0
    assert len(server) == run.planned, "every planned request reached the server"
    assert all(r.rx_kernel <= r.rx_read for r in server.values())
    assert all(r.tokens == SMALL.tokens and r.first_write is not None and not r.aborted for r in server.values())
    assert len(run.records) == run.planned and all(r.ok for r in run.records)
    pairs = match(run.records, server)
    assert len(pairs) == run.planned, "every request matched by its X-Request-Id"
    assert min(p.error for p in pairs) >= -CLOCK_SLACK_S
    assert run.measured.samples.peak_rss > 0 and run.measured.cpu_total_s > 0


@pytest.mark.timeout(90)
def test_plain_client_against_the_truth_server(tmp_path: Path) -> None:
    run = run_client("uvloop", Workload(rate=20, duration_s=1.0, max_tokens=8), SMALL, tmp_path)
    assert run.measured.returncode == 0
    _check(run)


@pytest.mark.timeout(110)
def test_speclab_run_attached_to_the_truth_server(tmp_path: Path) -> None:
    run = run_client("speclab1", Workload(rate=20, duration_s=1.0, max_tokens=8), SMALL, tmp_path)
    assert run.measured.returncode in (0, 5), (run.log.read_text() if run.log else "")  # 5: a saturated host
    _check(run)
    assert run.schedule_gap_s < 1e-6, "speclab fired the plan the bench gave the plain clients"
    assert run.measured.samples.processes >= 2, "the worker was measured with the parent"


def _pair(t: float, error_ms: float) -> Pair:
    return Pair("r", error_ms / 1000.0, 0.0, t, t + 0.5)


def test_interval_truth_groups_by_the_first_token_read() -> None:
    pairs = [_pair(i / 200, 1.0) for i in range(99)] + [_pair(0.95, 30.0)]
    pairs += [_pair(1.2, 2.0), _pair(1.3, 4.0), _pair(3.5, 9.0)]
    rows = interval_truth(pairs)
    assert [r.index for r in rows] == [0, 1, 3]
    assert rows[0].requests == 100 and rows[0].error_p99_ms == pytest.approx(1.0)
    assert rows[0].error_max_ms == pytest.approx(30.0)
    assert rows[1].error_p50_ms == pytest.approx(2.0) and rows[1].error_p99_ms == pytest.approx(4.0)
    by_done = interval_truth(pairs, at="done")
    assert [r.index for r in by_done] == [0, 1, 4]
    with pytest.raises(ValueError, match="first_token"):
        interval_truth(pairs, at="sent")


def test_score_flag_counts_hits_and_false_alarms() -> None:
    pairs = [_pair(i + 0.5, err) for i, err in enumerate([1.0, 8.0, 12.0, 2.0, 7.0])]
    score = score_flag(interval_truth(pairs), flagged={1, 3}, threshold_ms=5.0)
    assert (score.bad, score.caught, score.good, score.false_alarms) == (3, 1, 2, 1)
    assert score.hit_rate == pytest.approx(1 / 3) and score.false_alarm_rate == pytest.approx(0.5)
    assert math.isnan(score_flag([], [], 5.0).hit_rate)


def test_match_skips_requests_one_side_did_not_finish() -> None:
    from loadgen_truth import ServerRecord

    server = {"a": ServerRecord("a", 10.0, 10.0, 10.05, 10.1, 8, False),
              "b": ServerRecord("b", 10.0, 10.0, None, None, 0, True)}
    client = [ClientRecord("a", 0.0, 0.001, 0.053, 0.1, True), ClientRecord("b", 0.0, 0.001, None, None, False),
              ClientRecord("c", 0.0, 0.001, 0.05, 0.1, True)]
    pairs = match(client, server)
    assert [p.request_id for p in pairs] == ["a"]
    assert pairs[0].error == pytest.approx(0.002) and pairs[0].lag == pytest.approx(0.001)
    assert percentile([], 99) != percentile([], 99)  # NaN
