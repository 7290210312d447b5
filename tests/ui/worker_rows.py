"""Frozen traffic-worker rows for the workers panel: two local workers, or three on two cluster nodes
with one worker flagged (a wide clock bound) and one behind its schedule."""

from __future__ import annotations

import dataclasses

from speclab.model.snapshot import Snapshot
from speclab.model.workers import WorkerRow


def local_rows(interval: int) -> tuple[WorkerRow, ...]:
    return tuple(WorkerRow(worker=w, node="local", intervals=interval + 1, sent=4 * (interval + 1) + w,
                           finished=4 * (interval + 1) + w - 1, schedule_lag_p99_ms=0.42 + w / 10,
                           schedule_lag_max_ms=0.9, loop_lag_p99_ms=0.31, loop_lag_max_ms=0.8, read_lateness_ms=0.44, send_delay_p99_ms=0.61, cpu_percent_max=24.0 + w,
                           last_interval=interval, last_schedule_lag_p99_ms=0.35, last_loop_lag_p99_ms=0.2,
                           last_read_lateness_ms=0.27, last_send_delay_p99_ms=0.38,
                           last_cpu_percent=18.0 + w, in_flight=3 + w) for w in range(2))


def cluster_rows(interval: int) -> tuple[WorkerRow, ...]:
    a, b = "10.0.0.11/4f1c9a2e", "10.0.0.12/b83d07c1"
    return (
        WorkerRow(worker=0, node=a, intervals=interval + 1, sent=210 * (interval + 1), finished=208 * (interval + 1),
                  schedule_lag_p99_ms=1.84, schedule_lag_max_ms=3.1, loop_lag_p99_ms=0.62, loop_lag_max_ms=1.9, read_lateness_ms=0.95, send_delay_p99_ms=1.2,
                  cpu_percent_max=61.0, clock_offset_ms=0.412, clock_bound_ms=0.183, last_interval=interval,
                  last_schedule_lag_p99_ms=1.02, last_loop_lag_p99_ms=0.41, last_read_lateness_ms=0.58, last_send_delay_p99_ms=0.7, last_cpu_percent=55.0, in_flight=31),
        WorkerRow(worker=1, node=b, intervals=interval + 1, saturated_intervals=2, sent=205 * (interval + 1),
                  finished=203 * (interval + 1), schedule_lag_p99_ms=11.7, schedule_lag_max_ms=19.4,
                  loop_lag_p99_ms=3.8, loop_lag_max_ms=7.2, read_lateness_ms=4.6, send_delay_p99_ms=6.3, cpu_percent_max=96.0, clock_offset_ms=-2.716,
                  clock_bound_ms=0.241, last_interval=interval, last_schedule_lag_p99_ms=2.2,
                  last_loop_lag_p99_ms=0.9, last_read_lateness_ms=1.3, last_send_delay_p99_ms=1.9, last_cpu_percent=71.0, in_flight=28, last_flagged=5,
                  flag_reason="schedule lag p99 11.7 ms > 8 ms; send delay p99 6.3 ms > 5 ms; client CPU 96% of a core"),
        WorkerRow(worker=2, node=b, intervals=interval + 1, saturated_intervals=1, sent=207 * (interval + 1),
                  finished=205 * (interval + 1), schedule_lag_p99_ms=2.05, schedule_lag_max_ms=4.0,
                  loop_lag_p99_ms=0.7, loop_lag_max_ms=2.0, read_lateness_ms=1.1, send_delay_p99_ms=1.4, cpu_percent_max=64.0, clock_offset_ms=-2.716,
                  clock_bound_ms=9.6, last_interval=interval, last_schedule_lag_p99_ms=1.5,
                  last_loop_lag_p99_ms=0.5, last_read_lateness_ms=0.8, last_send_delay_p99_ms=0.9, last_cpu_percent=58.0, in_flight=30, last_flagged=3,
                  flag_reason="clock offset bound ±9.6 ms > 8 ms"),
    )


def with_workers(snapshots: list[Snapshot], *, cluster: bool) -> list[Snapshot]:
    rows = cluster_rows if cluster else local_rows
    return [dataclasses.replace(s, workers=rows(s.interval)) for s in snapshots]
