"""Fit the load generator's health limits on some calibration runs and score them on others.

``bench/calibrate_health.py --json FILE`` writes, per judged interval, what the worker saw of itself
(send delay p99, read lateness p99.5, schedule lag p99, CPU share) beside the truth from the server
that timestamps its own side of every request. An interval is truly bad when the client's error
there is above what a measurement can bear, on either of the two things speclab reports:

- its TTFT (first chunk read − sent) is off by more than ``--bad-ms`` at p99 against the server's
  own TTFT: the way out, the way back and late reads;
- its load left late: the requests reached the server more than ``--schedule-bad-ms`` after their
  planned time at p99 (kernel receive − intended). Open-loop latency from the intended time, and
  the offered rate itself, carry that lateness.

The flag is ``schedule lag p99 > A or send delay p99 > B or read lateness p99.5 > C or CPU >= D``.
This grid-searches A-D on the ``--fit`` files (the limits that meet the targets, ≥ 95% of bad
intervals flagged and ≤ 5% of accurate ones, with the widest margin; else the best margin), then
scores those limits and the ones speclab ships with on the ``--score`` files, which the fit never
saw. It also scores the TTFT truth alone against the flag without its schedule part, the question
the TTFT limits answer.

    .venv/bin/python bench/fit_health.py --fit a.json b.json --score c.json d.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from speclab.traffic import health

TARGET_HIT = 0.95
TARGET_FALSE = 0.05
INF = float("inf")


@dataclass(frozen=True)
class Row:
    """One judged interval of a calibration run (the fields ``calibrate_health.Interval`` writes)."""

    rate: float
    index: int
    requests: int
    true_p99_ms: float
    schedule_p99_ms: float
    read_lateness_ms: float
    cpu_percent: float
    send_delay_p99_ms: float
    true_schedule_p99_ms: float
    source: str  # the file it came from


def load(path: Path) -> list[Row]:
    try:
        items = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise SystemExit(f"{path}: cannot read calibration rows: {error}") from None
    names = {f.name for f in fields(Row)} - {"source"}
    rows = []
    for number, item in enumerate(items):
        missing = names - set(item)
        if missing:
            raise SystemExit(f"{path}: row {number} lacks {', '.join(sorted(missing))} "
                             "(written by an older calibrate_health.py? rerun it)")
        rows.append(Row(**{name: item[name] for name in names}, source=path.name))
    return rows


@dataclass(frozen=True)
class Limits:
    schedule_ms: float
    send_ms: float
    read_ms: float
    cpu_percent: float

    def flags(self, row: Row, *, schedule: bool = True) -> bool:
        return ((schedule and row.schedule_p99_ms > self.schedule_ms) or row.send_delay_p99_ms > self.send_ms
                or row.read_lateness_ms > self.read_ms or row.cpu_percent >= self.cpu_percent)

    def describe(self) -> str:
        def one(name: str, value: float, unit: str, op: str = ">") -> str:
            return f"{name} {op} {value:g}{unit}" if value < INF else f"no {name} limit"
        return ", ".join((one("schedule lag p99", self.schedule_ms, " ms"), one("send delay p99", self.send_ms, " ms"),
                          one("read lateness p99.5", self.read_ms, " ms"),
                          one("CPU", self.cpu_percent, "%", ">=")))


SHIPPED = Limits(health.SCHEDULE_LAG_LIMIT_MS, health.SEND_DELAY_LIMIT_MS, health.READ_LATENESS_LIMIT_MS,
                 health.CPU_LIMIT_PERCENT)


@dataclass(frozen=True)
class Score:
    bad: int
    caught: int
    good: int
    false_alarms: int

    @property
    def meets(self) -> bool:
        return (self.bad > 0 and self.good > 0 and self.caught >= TARGET_HIT * self.bad
                and self.false_alarms <= TARGET_FALSE * self.good)

    @property
    def margin(self) -> float:
        return (self.caught / self.bad if self.bad else 0.0) - (self.false_alarms / self.good if self.good else 0.0)

    def __str__(self) -> str:
        return f"bad flagged {pct(self.caught, self.bad)}, accurate flagged {pct(self.false_alarms, self.good)}"


def pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100.0 * n / d:.0f}%)" if d else f"{n}/0"


def score(rows: Iterable[Row], is_bad: Callable[[Row], bool], flag: Callable[[Row], bool]) -> Score:
    bad = caught = good = false_alarms = 0
    for row in rows:
        if is_bad(row):
            bad += 1
            caught += flag(row)
        else:
            good += 1
            false_alarms += flag(row)
    return Score(bad, caught, good, false_alarms)


def truths(bad_ms: float, schedule_bad_ms: float) -> dict[str, Callable[[Row], bool]]:
    return {
        "either": lambda r: r.true_p99_ms > bad_ms or r.true_schedule_p99_ms > schedule_bad_ms,
        "ttft": lambda r: r.true_p99_ms > bad_ms,
    }


GRID = {
    "schedule_ms": (4.0, 5.0, 6.0, 7.0, 8.0, 10.0, INF),
    "send_ms": (3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, INF),
    "read_ms": (3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0, INF),
    "cpu_percent": (70.0, 75.0, 80.0, 85.0, 90.0, INF),
}


def fit(rows: list[Row], is_bad: Callable[[Row], bool]) -> list[tuple[Score, Limits]]:
    """Every limit set on the grid, best first: those meeting the targets, then by margin; among
    equals the loosest (it flags the least on runs it has not seen)."""
    tried = []
    for values in itertools.product(*GRID.values()):
        limits = Limits(*values)
        tried.append((score(rows, is_bad, limits.flags), limits))
    return sorted(tried, key=lambda t: (not t[0].meets, -t[0].margin, -sum(min(v, 1e3) for v in (
        t[1].schedule_ms, t[1].send_ms, t[1].read_ms, t[1].cpu_percent))))


def report(title: str, rows: list[Row], is_bad: Callable[[Row], bool], limits: Limits, *, schedule: bool = True) -> None:
    print(f"  {title}: {score(rows, is_bad, lambda r: limits.flags(r, schedule=schedule))}")
    for source in sorted({r.source for r in rows}):
        mine = [r for r in rows if r.source == source]
        print(f"      {source}: {score(mine, is_bad, lambda r: limits.flags(r, schedule=schedule))}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--fit", type=Path, nargs="+", required=True, help="calibration rows to fit the limits on")
    parser.add_argument("--score", type=Path, nargs="+", required=True, help="calibration rows to score them on")
    parser.add_argument("--bad-ms", type=float, default=5.0, help="bad above this true TTFT error p99")
    parser.add_argument("--schedule-bad-ms", type=float, default=health.SCHEDULE_LAG_LIMIT_MS,
                        help="bad above this p99 of (server's kernel receive − intended)")
    parser.add_argument("--top", type=int, default=8, help="how many of the best fitted limit sets to print")
    args = parser.parse_args()
    fit_rows = [row for path in args.fit for row in load(path)]
    score_rows = [row for path in args.score for row in load(path)]
    if not fit_rows or not score_rows:
        raise SystemExit("fit_health: no calibration rows to fit on or to score on")
    is_bad = truths(args.bad_ms, args.schedule_bad_ms)
    print(f"bad: true TTFT error p99 > {args.bad_ms:g} ms, or the load's lateness at the server p99 > "
          f"{args.schedule_bad_ms:g} ms; targets >= {TARGET_HIT:.0%} of bad flagged, <= {TARGET_FALSE:.0%} of accurate")
    print(f"fit on {len(fit_rows)} intervals ({', '.join(p.name for p in args.fit)}), "
          f"{sum(map(is_bad['either'], fit_rows))} bad:")
    ranked = fit(fit_rows, is_bad["either"])
    for result, limits in ranked[:args.top]:
        print(f"  {'meets' if result.meets else 'short'}  {result}  <- {limits.describe()}")
    chosen = ranked[0][1]
    print(f"\nscored on {len(score_rows)} intervals ({', '.join(p.name for p in args.score)}), "
          f"{sum(map(is_bad['either'], score_rows))} bad (either truth), {sum(map(is_bad['ttft'], score_rows))} "
          "bad on TTFT alone:")
    for name, limits in (("fitted", chosen), ("shipped", SHIPPED)):
        print(f"{name}: {limits.describe()}")
        report("the whole flag against either truth", score_rows, is_bad["either"], limits)
        report("the flag without its schedule part against the TTFT truth", score_rows, is_bad["ttft"], limits,
               schedule=False)


if __name__ == "__main__":
    main()
