"""The status line names a variant whose server is not serving, not only the Servers tab.

From the session's server views (``source.servers()``: ``exited``, or ``stopped`` while the run
is live) and, without them, from the snapshot's latest /metrics scrape of each server.
"""

from __future__ import annotations

from dataclasses import replace

from speclab.model.records import ServerSample
from speclab.model.snapshot import Snapshot
from speclab.session.api import ServerView
from speclab.ui import create_app
from speclab.ui.widgets.status import StatusLine, render_status, servers_down
from tests.ui.fakes import FakeSource, build_snapshots, server_views, settle


def final() -> Snapshot:
    return build_snapshots()[-1]


def views(**status: str) -> dict[str, ServerView]:
    return {v: replace(view, status=status.get(v, view.status)) for v, view in server_views().items()}


def down_sample(snap: Snapshot, variant: str) -> Snapshot:
    sample = ServerSample(t=snap.t, variant=variant, up=False, error="http://127.0.0.1:8102/metrics: connection refused")
    return replace(snap, servers={**snap.servers, variant: sample})


def line(snap: Snapshot, servers: dict[str, ServerView], *, width: int = 0, ended: bool = False,
         replay: bool = False) -> str:
    info = FakeSource(replay=replay).info
    status = StatusLine(info, snap, "k2", "all", servers=servers, ended=ended)
    return render_status(status, width).plain.split("\n")[1]


def test_a_crashed_server_is_named_on_the_status_line() -> None:
    text = line(final(), views(k4="exited"))
    assert "k4 server exited" in text
    assert "baseline server" not in text and "k2 server" not in text
    assert text.index("k4 server exited") < text.index("client ok"), "before the client's health"
    assert "k4 server exited" in line(final(), views(k4="exited"), width=80), "still there at 80 columns"


def test_healthy_servers_add_nothing() -> None:
    assert servers_down(StatusLine(FakeSource().info, final(), servers=views())) == []
    assert "server" not in line(final(), views())


def test_a_stopped_server_counts_only_while_the_run_is_live() -> None:
    assert "k2 server stopped" in line(final(), views(k2="stopped"))
    assert "server" not in line(replace(final(), finished=True), views(k2="stopped", k4="stopped"))
    assert "server" not in line(final(), views(k2="stopped"), ended=True)
    assert "server" not in line(final(), views(k2="stopped"), replay=True), "a replay's servers are all stopped"
    assert "k4 server exited" in line(replace(final(), finished=True), views(k4="exited")), "a crash stays news"


def test_a_server_down_at_its_last_scrape_is_named_without_views() -> None:
    snap = down_sample(final(), "k4")
    assert "k4 server down" in line(snap, {})
    assert "k4 server down" in line(snap, views())
    assert "server" not in line(snap, views(k4="relaunching")), "a relaunch is planned downtime"
    assert line(snap, views(k4="exited")).count("k4 server") == 1


async def test_the_lab_screen_status_line_shows_a_server_down() -> None:
    snaps = build_snapshots()
    snaps[-1] = down_sample(snaps[-1], "k4")
    source = FakeSource(snaps)
    app = create_app(source, source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot, app, source)
        assert "k4 server down" in render_status(app.lab.status, 120).plain
