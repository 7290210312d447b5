"""The report of a relaunched variant: its server block names one epoch (live and replayed alike), the
per-interval table keeps epochs apart, and the client's wall-time figures say so under a time scale."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from speclab.headless.progress import timeline_rows
from speclab.metrics.aggregator import Aggregator
from speclab.model.epochs import RELAUNCH_EVENT, TRANSITION_EVENT
from speclab.model.records import Event
from speclab.model.snapshot import ClientHealth
from speclab.recording import Recording
from speclab.recording.replay import replay_final, server_views, session_info
from speclab.reports import build_report, render_markdown
from speclab.session.api import ServerView, SessionInfo

from ..recording import synth
from ..recording.live_run import record_live

RELAUNCH_AT = 5.0  # k2 relaunched with k=4: a transition from 4.9 s, epoch 2 from 5.0 s
BASE_SETTINGS = {"max_num_seqs": 8}
LAUNCHED: dict[str, dict[str, Any]] = {
    "baseline": {"command": "serve base", "settings": BASE_SETTINGS, "memory": {"kv_cache_tokens": 1000.0},
                 "engine": "sim", "baseline": True},
    "k2": {"command": "serve k2 --k 2", "settings": {"method": "draft_model", "num_speculative_tokens": 2,
                                                      "max_num_seqs": 8},
           "memory": {"kv_cache_tokens": 900.0}, "engine": "sim", "baseline": False},
}
SECOND = {"method": "draft_model", "num_speculative_tokens": 4, "max_num_seqs": 8}
LABEL = "k2·2 (k=4)"


def _relaunched_run(path: Path) -> tuple[Any, Aggregator]:
    records = synth.make_records()
    for r in records:
        if r.variant == "k2" and r.intended >= RELAUNCH_AT:
            r.epoch = 2
    events = [Event(t=RELAUNCH_AT - 0.1, kind=TRANSITION_EVENT, variant="k2", message="k2: relaunching",
                    data={"from_epoch": 1, "to_epoch": 2}),
              Event(t=RELAUNCH_AT, kind=RELAUNCH_EVENT, variant="k2", message=f"{LABEL} from t=5.0 s",
                    data={"epoch": 2, "label": LABEL, "settings": SECOND, "command": "serve k2 --k 4"})]
    # The session's closing facts: each server running at the end, command and settings only.
    closing = {"servers": {"baseline": {"command": "serve base", "settings": BASE_SETTINGS},
                           "k2": {"command": "serve k2 --k 4", "settings": SECOND}}}
    kept: list[Aggregator] = []
    final = record_live(path, records, events=events, servers=LAUNCHED, closing=closing, keep=kept)
    return final, kept[0]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """(live report, replay report) of one run whose k2 was relaunched once."""
    path = tmp_path_factory.mktemp("rec") / "run"
    final, agg = _relaunched_run(path)
    info = SessionInfo(lab="synthetic", scenario="synthetic", variants=tuple(synth.VARIANTS),
                       classes=tuple(synth.CLASSES), simulated=True)
    views = {  # the servers running at the end of the live run: k2's relaunched one has its own memory
        "baseline": ServerView(variant="baseline", status="ready", command="serve base", base_url="http://b",
                               engine="sim", settings=dict(BASE_SETTINGS),
                               memory={"kv_cache_tokens": 1000.0}, baseline=True),
        "k2": ServerView(variant="k2", status="ready", command="serve k2 --k 4", base_url="http://k",
                         engine="sim", settings=dict(SECOND), memory={"kv_cache_tokens": 700.0}),
    }
    live = build_report(info, final, servers=views, timeline=timeline_rows(agg, final.saturated_intervals))
    rec = Recording.open(path)
    replayed, ragg = replay_final(rec)
    replay = build_report(session_info(rec), replayed, servers=server_views(rec),
                          timeline=timeline_rows(ragg, replayed.saturated_intervals))
    return live, replay


def test_the_server_block_names_the_last_epoch_and_never_mixes_epochs(
        reports: tuple[dict[str, Any], dict[str, Any]]) -> None:
    live, replay = reports
    for report in (live, replay):
        k2 = report["variants"]["k2"]
        assert [e["epoch"] for e in k2["epochs"]] == [1, 2]
        server = k2["server"]
        assert (server["epoch"], server["label"]) == (2, LABEL) == (k2["epochs"][-1]["epoch"], k2["epochs"][-1]["label"])
        assert server["settings"] == SECOND == k2["epochs"][-1]["settings"]
        assert server["command"] == "serve k2 --k 4"
        base = report["variants"]["baseline"]["server"]
        assert (base["epoch"], base["label"], base["memory"]) == (1, "baseline", {"kv_cache_tokens": 1000.0})
    assert live["variants"]["k2"]["server"]["memory"] == {"kv_cache_tokens": 700.0}  # epoch 2's own server
    # The recording kept only the launched server's memory: epoch 1's, so the replay leaves it out.
    assert replay["variants"]["k2"]["server"]["memory"] == {}
    strip = ("memory",)
    assert ({k: v for k, v in live["variants"]["k2"]["server"].items() if k not in strip}
            == {k: v for k, v in replay["variants"]["k2"]["server"].items() if k not in strip})


def test_a_relaunch_that_never_answered_leaves_the_server_block_without_its_facts() -> None:
    agg = Aggregator(["k2"], ["qa"])
    agg.launch("k2", {"num_speculative_tokens": 2})
    agg.add_event(Event(t=1.0, kind=TRANSITION_EVENT, variant="k2", message="k2: relaunching",
                        data={"from_epoch": 1, "to_epoch": 2}))
    final = agg.snapshot(2.0, finished=True)
    info = SessionInfo(lab="lab", scenario="sc", variants=("k2",), classes=("qa",), simulated=True)
    for settings in ({"num_speculative_tokens": 6}, {"num_speculative_tokens": 2}):  # changed or not, it never ran
        failed = ServerView(variant="k2", status="exited", command="serve k2 --k 6", base_url="http://k",
                            engine="sim", settings=settings, memory={"kv_cache_tokens": 5.0})
        server = build_report(info, final, servers={"k2": failed})["variants"]["k2"]["server"]
        assert (server["epoch"], server["settings"]) == (1, {"num_speculative_tokens": 2})
        assert server["command"] is None and server["memory"] == {}


def test_the_per_interval_table_keeps_each_epoch_apart(reports: tuple[dict[str, Any], dict[str, Any]]) -> None:
    for report in reports:
        table = render_markdown(report).split("## Per interval (1 s)")[1].split("\n## ")[0]
        rows = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines() if line.startswith("| ")}
        assert {"baseline", "k2", LABEL} <= set(rows), table
        per_epoch = {e: sum(1 for r in report["timeline"] if r["variants"].get("k2", {}).get("epoch") == e)
                     for e in (1, 2)}
        assert per_epoch[1] and per_epoch[2]
        assert rows["k2"].split(" | ")[1] == str(per_epoch[1]) and rows[LABEL].split(" | ")[1] == str(per_epoch[2])
        # Each epoch's worst interval lies inside it.
        for label, epoch in (("k2", 1), (LABEL, 2)):
            at = rows[label].split("(t=")[1].split("s)")[0]
            assert report["timeline"][[r["t"] for r in report["timeline"]].index(float(at))]["variants"]["k2"][
                "epoch"] == epoch


def test_the_client_block_is_wall_time_and_report_md_says_so_under_a_time_scale() -> None:
    agg = Aggregator(["k2"], ["qa"])
    agg.set_health(ClientHealth(schedule_lag_p99_ms=3.0, loop_lag_max_ms=1.0, cpu_percent=20.0))
    final = agg.snapshot(2.0, finished=True)
    info = SessionInfo(lab="lab", scenario="sc", variants=("k2",), classes=("qa",), simulated=True)
    scaled = build_report(dataclasses.replace(info, time_scale=4.0), final, servers={})
    assert scaled["time_scale"] == 4.0
    client = scaled["measurement"]["client"]
    assert client["clock"] == "wall" and client["schedule_lag_p99_ms"] == 3.0
    md = render_markdown(scaled)
    assert "**Time scale 4**" in md and "`measurement.client` in report.json), which is wall time" in md
    plain = build_report(info, final, servers={})
    assert plain["measurement"]["client"]["clock"] == "wall"
    assert "wall time" not in render_markdown(plain)
