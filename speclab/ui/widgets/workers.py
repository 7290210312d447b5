"""The traffic workers panel: where each worker runs and whether it keeps the schedule.

The status line folds the workers into the worst of them; this names the one that fell behind,
and its node: its latest interval beside its worst one (schedule lag, send delay, read lateness,
CPU), its clock offset and the bound on it (a cluster worker), and the intervals it flagged. The rows are
the snapshot's ``workers``, the same rows ``measurement.workers`` is written from. A rich table,
not a DataTable: nothing here is selected, and rich fits the columns to 80 or 120 cells.
"""

from __future__ import annotations

from rich import box
from rich.console import Group
from rich.table import Table
from rich.text import Text
from textual.app import RenderResult
from textual.widget import Widget

from speclab.model.workers import WorkerRow
from speclab.traffic.cluster.clock import CLOCK_BOUND_LIMIT_MS
from speclab.traffic.health import (
    CPU_LIMIT_PERCENT,
    READ_LATENESS_LIMIT_MS,
    SCHEDULE_LAG_LIMIT_MS,
    SEND_DELAY_LIMIT_MS,
)
from speclab.ui import fmt

OVER = "bold red"
# (header, justify); the caption under the table says what the pairs are.
COLUMNS = (("#", "right"), ("node", "left"), ("sent", "right"), ("sched p99", "right"), ("send p99", "right"),
           ("late p99.5", "right"),
           ("CPU %", "right"), ("clock", "right"), ("flagged", "right"))
CAPTION = ("sched p99: schedule lag p99, send p99: sent stamp to the request's write, p99, late p99.5: how "
           "late the event loop read what arrived, ms, latest "
           "interval / worst; CPU %: latest / worst; "
           "clock: offset from this host's clock ± its bound, ms (same: a local worker)")


def _value(value: float | None, limit: float, *, digits: int = 2, at_limit: bool = False) -> Text:
    if value is None:
        return Text(fmt.NO_DATA, style="dim")
    over = value >= limit if at_limit else value > limit
    text = f"{value:.0f}" if digits == 0 else f"{value:.{digits}f}" if value < 10 else f"{value:.1f}"
    return Text(text, style=OVER if over else "")


def _pair(now: float | None, worst: float, limit: float, *, digits: int = 2, at_limit: bool = False) -> Text:
    return Text.assemble(_value(now, limit, digits=digits, at_limit=at_limit), ("/", "dim"),
                         _value(worst, limit, digits=digits, at_limit=at_limit))


def _offset(ms: float) -> str:
    """Hosts' monotonic clocks differ by their uptimes: an offset can be days, its bound microseconds."""
    return f"{ms:+.2f}" if abs(ms) < 1000 else f"{ms / 1000:+.1f}s"


def _clock(row: WorkerRow) -> Text:
    if row.local:
        return Text("same", style="dim")  # a local worker reads this host's clock
    return Text.assemble(f"{_offset(row.clock_offset_ms)} ±", _value(row.clock_bound_ms, CLOCK_BOUND_LIMIT_MS, digits=3))


def worker_cells(row: WorkerRow) -> tuple[Text, ...]:
    flagged = Text(f"{row.saturated_intervals} of {row.intervals}", style=OVER if row.saturated_intervals else "")
    return (Text(str(row.worker)), Text(row.node), Text(f"{row.sent:,}"),
            _pair(row.last_schedule_lag_p99_ms, row.schedule_lag_p99_ms, SCHEDULE_LAG_LIMIT_MS),
            _pair(row.last_send_delay_p99_ms, row.send_delay_p99_ms, SEND_DELAY_LIMIT_MS),
            _pair(row.last_read_lateness_ms, row.read_lateness_ms, READ_LATENESS_LIMIT_MS),
            _pair(row.last_cpu_percent, row.cpu_percent_max, CPU_LIMIT_PERCENT, digits=0, at_limit=True),
            _clock(row), flagged)


def workers_title(rows: tuple[WorkerRow, ...]) -> str:
    nodes = sorted({r.node for r in rows})
    where = "this host" if all(r.local for r in rows) else f"{len(nodes)} node{'s' if len(nodes) != 1 else ''}"
    return f"traffic workers · {len(rows)} on {where}"


def worker_notes(rows: tuple[WorkerRow, ...], *, replay: bool) -> Text:
    """Why each flagged worker was flagged (its latest flagged interval), then what flags one."""
    out = Text(CAPTION + "\n", style="dim")
    for row in rows:
        if row.last_flagged is not None and row.flag_reason:
            out.append(f"worker {row.worker} " + ("(this host)" if row.local else f"on {row.node}"), style="bold")
            out.append(f", interval {row.last_flagged}: {row.flag_reason}\n", style="red")
    out.append(f"An interval is flagged when a worker's schedule lag p99 passes {SCHEDULE_LAG_LIMIT_MS:g} ms, its "
               f"send delay p99 {SEND_DELAY_LIMIT_MS:g} ms, its read lateness p99.5 {READ_LATENESS_LIMIT_MS:g} ms, its CPU {CPU_LIMIT_PERCENT:g}% of a core, or its clock "
               f"bound {CLOCK_BOUND_LIMIT_MS:g} ms; that interval's numbers describe the client, not the server.",
               style="dim")
    if any(not r.local for r in rows):
        out.append(" A cluster worker's clock offset is measured by round trips before traffic and every 2 s; "
                   "the bound is half the shortest round trip.", style="dim")
    if replay:
        out.append(" Replay: the recorded run's figures as the run ended (a recording keeps no per-worker "
                   "interval, so there is no 'now').", style="dim")
    return out


def render_workers(rows: tuple[WorkerRow, ...], *, replay: bool = False) -> RenderResult:
    if not rows:
        return Text("no traffic worker has reported an interval yet", style="dim")
    table = Table(box=box.SIMPLE_HEAD, padding=(0, 1), collapse_padding=True, pad_edge=False, header_style="bold")
    for header, justify in COLUMNS:  # the node gives way on a narrow terminal, never a number
        node = header == "node"
        table.add_column(header, justify=justify, no_wrap=not node, overflow="ellipsis" if node else "fold")  # type: ignore[arg-type]
    for row in rows:
        table.add_row(*worker_cells(row))
    return Group(table, worker_notes(rows, replay=replay))


class WorkersPanel(Widget):
    DEFAULT_CSS = """
    WorkersPanel { height: auto; border: round $panel-lighten-2; padding: 0 1; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: tuple[WorkerRow, ...] | None = None
        self._replay = False
        self.border_title = "traffic workers"

    @property
    def rows(self) -> tuple[WorkerRow, ...]:
        return self._rows or ()

    def show(self, rows: tuple[WorkerRow, ...], *, replay: bool = False) -> None:
        """Repaint only when a worker reported since (the session hands the same tuple until then)."""
        if rows is self._rows or (rows == self._rows and replay == self._replay):
            return
        self._rows, self._replay = rows, replay
        self.border_title = workers_title(rows) if rows else "traffic workers"
        self.refresh(layout=True)

    def render(self) -> RenderResult:
        return render_workers(self.rows, replay=self._replay)
