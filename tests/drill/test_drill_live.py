"""The rollback drill over real HAProxy and simulator processes: what it measures, what it writes,
the trigger that rolls back on its own, exit 17, Ctrl-C, and nothing left running afterwards."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import yaml

from .conftest import run_drill, write_inputs

PINNED = {"rollback_s", "drain_s", "in_flight_at_flip", "failed_during_flip", "converged", "tenants"}
SHORT = ("--duration", "8", "--switch-at", "2", "--rollback-at", "5")


def test_a_scheduled_drill_measures_the_flip_from_both_sides_and_writes_the_production_files(tmp_path: Path) -> None:
    lab, scenario = write_inputs(tmp_path)
    run = run_drill(str(lab), str(scenario), *SHORT, report_dir=tmp_path / "report")
    assert run.code == 0, run.output
    assert run.started and run.alive == [], run.alive
    drill = run.drill
    assert set(drill) >= PINNED
    assert drill["converged"] is True and drill["failed_during_flip"] == 0 and drill["failures"] == []
    assert drill["rollback_by"] == "schedule"
    # The scheduled flip waits for a speculative response in flight, and both observers saw it.
    assert drill["in_flight_at_flip"] >= 1
    client, haproxy = drill["observers"]["client"], drill["observers"]["haproxy"]
    assert client["in_flight_at_flip"] >= 1 and haproxy["in_flight_at_flip"] >= 1 and haproxy["polls"] >= 1
    assert client["speculative_sent_after_confirmed"] == 0
    assert 0.0 <= drill["rollback_s"] <= drill["confirmed_s"] + haproxy["poll_period_s"] * 2 + 0.05
    assert drill["drain_s"] >= client["last_speculative_finished_s"] > 0.0  # the in-flight response finished later
    tenants = drill["tenants"]
    assert tenants["A"]["role"] == "control" and tenants["B"]["role"] == "canary"
    assert {p: set(v["backends"]) for p, v in tenants["A"]["phases"].items()} == {
        "plain": {"baseline"}, "canary": {"baseline"}, "rolled_back": {"baseline"}}
    b = tenants["B"]["phases"]
    assert set(b["plain"]["backends"]) == {"baseline"} and set(b["canary"]["backends"]) == {"k4"}
    assert b["canary"]["acceptance_rate"] is not None and b["plain"]["acceptance_rate"] is None
    assert b["canary"]["acceptance_source"] == "exact" and b["rolled_back"]["backends"].get("baseline", 0) >= 1
    for phase in ("plain", "canary", "rolled_back"):
        assert b[phase]["errors"] == 0 and b[phase]["e2e_p99_ms"] is not None
    # The variant tables are per backend; every request is accounted for in them.
    report = run.report
    assert report["command"] == "drill" and set(report["variants"]) == {"baseline", "k4"}
    assert report["exit"]["code"] == 0
    kinds = [e["kind"] for e in report["events"]]
    assert kinds.count("route_change") == 1 and kinds.count("rollback") == 1
    # Production equivalents beside the report, maps by absolute path, accepted by haproxy -c on their own.
    directory = run.report_dir.resolve()
    config = (directory / "haproxy.cfg").read_text()
    assert f"map({directory}/tenants.map)" in config and (directory / "tenants.map").exists()
    check = subprocess.run([drill["gateway"]["haproxy"], "-c", "-f", str(directory / "haproxy.cfg")],
                           capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    docs = list(yaml.safe_load_all((directory / "gateway-api.yaml").read_text()))
    assert {d["kind"] for d in docs} >= {"Gateway", "HTTPRoute"}
    assert not (directory / "haproxy.sock").exists()
    md = (directory / "report.md").read_text()
    assert "## Rollback drill" in md and re.search(r"rollback_s \d+\.\d{3} s", md)


def test_a_drill_under_a_time_scale_runs_its_simulators_and_its_schedule_in_modelled_time(tmp_path: Path) -> None:
    lab, scenario = write_inputs(tmp_path)
    began = time.monotonic()
    run = run_drill(str(lab), str(scenario), *SHORT, "--time-scale", "2", report_dir=tmp_path / "report")
    wall = time.monotonic() - began
    assert run.code == 0, run.output
    assert run.started and run.alive == [], run.alive
    report = run.report
    assert report["time_scale"] == 2.0
    assert "time scale 2 (given with --time-scale): figures in modelled time" in run.output
    for name in ("baseline", "k4"):
        server = report["variants"][name]["server"]
        assert "--sim-time-scale 2" in server["command"], server
    assert report["drill"]["rollback_by"] == "schedule" and report["drill"]["converged"] is True
    # The switch at 2 s of modelled time (4 s of wall), and the 8 modelled seconds of traffic took 16 of wall.
    switch = re.search(r"event t=(\d+\.\d+)s route_change", run.output)
    assert switch is not None and 1.9 <= float(switch.group(1)) <= 2.5, run.output
    assert wall >= 16.0, wall


def test_a_trigger_rolls_back_on_its_own_and_the_report_links_it_to_the_switch(tmp_path: Path) -> None:
    lab, scenario = write_inputs(tmp_path, faults='"json_corruption=1.0"')
    run = run_drill(str(lab), str(scenario), "--duration", "10", "--switch-at", "2", "--rollback-at", "8",
                    "--trigger", "structured>20", "--trigger-intervals", "2", report_dir=tmp_path / "report")
    assert run.code == 0, run.output
    assert run.alive == []
    drill = run.drill
    trigger = drill["trigger"]
    assert trigger["fired"] is True and drill["rollback_by"] == "structured>20%"
    assert len(trigger["streak"]) == 2 and all(s["value"] > 20 for s in trigger["streak"])
    assert drill["command_s"] < drill["traffic_start_s"] + 8  # before the scheduled time
    spike = trigger["spike"]
    assert spike["after_change"]["kind"] == "route_change" and spike["after_s"] >= 0
    assert "after tenant B moved from baseline to k4" in spike["text"]
    canary = drill["tenants"]["B"]["phases"]["canary"]
    assert canary["structured_failed"] >= 1 and drill["tenants"]["A"]["phases"]["canary"]["structured_failed"] == 0


def test_a_request_that_fails_across_the_flip_makes_the_drill_exit_17(tmp_path: Path) -> None:
    lab, scenario = write_inputs(tmp_path, faults='"malformed_sse=1.0"')
    run = run_drill(str(lab), str(scenario), *SHORT, report_dir=tmp_path / "report")
    assert run.code == 17, run.output
    assert run.alive == []
    drill = run.drill
    assert drill["failed_during_flip"] >= 1 and drill["failed_samples"][0]["backend"] == "k4"
    assert any("failed" in f for f in drill["failures"])
    assert run.report["exit"]["code"] == 17


def test_ctrl_c_during_the_drill_writes_a_partial_report_and_exits_130(tmp_path: Path) -> None:
    lab, scenario = write_inputs(tmp_path)
    run = run_drill(str(lab), str(scenario), "--duration", "30", "--switch-at", "2", "--rollback-at", "20",
                    report_dir=tmp_path / "report", interrupt_on="route_change")
    assert run.code == 130, run.output
    assert run.started and run.alive == []
    report = run.report
    assert report["exit"]["code"] == 130 and report["drill"]["rollback_s"] is None
    assert report["drill"]["tenants"]["B"]["phases"]["plain"]["requests"] >= 1


def _kill_haproxy(proc: subprocess.Popen[str], report_dir: Path) -> None:
    state = json.loads((report_dir / "gateway.json").read_text())
    os.kill(int(state["haproxy_pid"]), signal.SIGKILL)


def test_haproxy_dying_mid_drill_stops_everything_and_exits_1_with_a_report(tmp_path: Path) -> None:
    lab, scenario = write_inputs(tmp_path)
    run = run_drill(str(lab), str(scenario), "--duration", "30", "--switch-at", "2", "--rollback-at", "20",
                    report_dir=tmp_path / "report", interrupt_on="route_change", action=_kill_haproxy)
    assert run.code == 1, run.output
    assert run.started and run.alive == []
    assert "haproxy exited" in run.report["exit"]["reason"]


def test_a_server_that_never_starts_exits_3_with_a_report_and_nothing_left(tmp_path: Path) -> None:
    lab, scenario = write_inputs(tmp_path, server_extra='extra_args = ["--no-such-flag"]')
    before = {p.pid for p in psutil.process_iter()}
    run = run_drill(str(lab), str(scenario), *SHORT, report_dir=tmp_path / "report")
    assert run.code == 3, run.output
    assert "unrecognized arguments" in run.output
    assert run.report["exit"]["code"] == 3 and run.drill["rollback_s"] is None
    left = [p for p in psutil.process_iter(["pid", "cmdline"]) if p.pid not in before
            and any(str(tmp_path) in part for part in (p.info["cmdline"] or []))]
    assert left == []
