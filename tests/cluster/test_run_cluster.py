"""`speclab run --cluster` end to end: a two-node Ray cluster on 127.0.0.1 sends the smoke plan to
two simulator processes; every planned request is accounted for, both nodes report worker health,
and counts and acceptance equal a single-host run of the same plan. A killed actor exits 6."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest

from speclab.model.exit_codes import ExitCode

from ..outcome import SATURATED
from ..session.conftest import read_report
from .ray_nodes import RayCluster

# The first test to use the cluster also pays for starting it (about a minute on a loaded 2-core host).
pytestmark = pytest.mark.timeout(300)

RUN = ["run", "smoke", "--variants", "baseline,k2"]


def _by_class(report: dict[str, Any]) -> dict[tuple[str, str], tuple[Any, ...]]:
    out = {}
    for variant, block in report["variants"].items():
        epoch = block["epochs"][0]
        for cls, stats in epoch["classes"].items():
            acc = stats.get("acceptance") or {}
            out[(variant, cls)] = (stats["requests"], acc.get("accepted"), acc.get("drafted"), acc.get("steps"))
    return out


def _requests(recording: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (recording / "requests.jsonl").read_text().splitlines() if line.strip()]


def _assert_accounted(out: subprocess.CompletedProcess[str]) -> None:
    """Exit 0, or exit 5 when the host's timing failed the run (the client or a simulator behind its
    clock on a loaded host, both runs sharing it): counts and acceptance do not depend on timing."""
    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else ""
    assert out.returncode == ExitCode.OK or (
        out.returncode == ExitCode.MEASUREMENT_INVALID and ("fell behind" in last or SATURATED in last)
    ), out.stdout + out.stderr


def _run_together(*commands: list[str], cwd: Path, timeout: float = 120) -> list[subprocess.CompletedProcess[str]]:
    procs = [subprocess.Popen([sys.executable, "-m", "speclab.cli.main", *args], cwd=cwd, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for args in commands]
    results = []
    try:
        for args, proc in zip(commands, procs, strict=True):
            out, err = proc.communicate(timeout=timeout)
            results.append(subprocess.CompletedProcess(args, proc.returncode, out, err))
    finally:
        for proc in procs:
            with proc:  # closes its pipes, whichever path got here
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
    return results


def test_two_node_run_equals_a_single_host_run(ray_cluster: RayCluster, tmp_path: Path) -> None:
    # Both at once: the plan and the simulators' modelled times make their counts and acceptance
    # independent of what else runs on the host, and the suite's time is shorter.
    local, cluster = _run_together(
        [*RUN, "--workers", "2", "--report", str(tmp_path / "local"), "--record", str(tmp_path / "lrec")],
        [*RUN, "--cluster", ray_cluster.address, "--report", str(tmp_path / "ray"), "--record", str(tmp_path / "rrec")],
        cwd=tmp_path)
    for out in (local, cluster):
        _assert_accounted(out)
    one, two = read_report(tmp_path / "local"), read_report(tmp_path / "ray")

    for report in (one, two):
        for block in report["variants"].values():
            accounting = block["epochs"][0]["accounting"]
            assert accounting["lost"] == 0 and accounting["planned"] == 20, accounting
        assert report["measurement"]["incomplete"] == []
    planned = {r["request_id"] for r in _requests(tmp_path / "lrec")}
    assert len(planned) == 20
    assert sorted((r["variant"], r["request_id"]) for r in _requests(tmp_path / "rrec")) == sorted(
        (v, i) for v in ("baseline", "k2") for i in planned)
    assert _by_class(two) == _by_class(one)
    assert any(v[1] for v in _by_class(two).values())  # k2 accepted drafts: acceptance is compared, not absent

    workers = two["measurement"]["workers"]
    assert len(workers) == 2 and len({w["node"] for w in workers}) == 2 and "local" not in {w["node"] for w in workers}
    assert all(w["intervals"] > 0 and w["sent"] > 0 and w["clock_bound_ms"] > 0 for w in workers)
    assert "## Traffic workers (2 on 2 nodes)" in (tmp_path / "ray" / "report.md").read_text()
    assert {w["node"] for w in one["measurement"]["workers"]} == {"local"}


def _actor_processes(cluster: RayCluster) -> list[psutil.Process]:
    sessions = {n.proc.pid for n in cluster.nodes}
    found = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if os.getsid(proc.pid) in sessions and "TrafficActor" in " ".join(proc.info["cmdline"] or ()):
                found.append(proc)
        except (psutil.Error, ProcessLookupError):
            continue
    return found


def test_a_killed_actor_exits_6_naming_its_node(ray_cluster: RayCluster, tmp_path: Path) -> None:
    # The kill lands at the first progress line (about 1 s into traffic); the run then ends when the
    # worker left alive has sent its share, so the duration only has to outlast the kill.
    args = [sys.executable, "-m", "speclab.cli.main", "run", "smoke", "--variants", "baseline", "--duration", "8",
            "--rate", "5", "--cluster", ray_cluster.address, "--report", str(tmp_path / "r")]
    # ``with`` closes the pipes on every path (a failed assertion here would otherwise leave them
    # to the garbage collector, whose ResourceWarning then fails whichever test runs at that moment).
    with subprocess.Popen(args, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None
            lines = []
            for line in proc.stdout:  # the first progress line: traffic is flowing on both workers
                lines.append(line)
                if line.startswith("t="):
                    break
            victims = _actor_processes(ray_cluster)
            assert victims, "".join(lines)
            victims[0].send_signal(signal.SIGKILL)
            out, err = proc.communicate(timeout=90)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert proc.returncode == ExitCode.MEASUREMENT_INCOMPLETE, "".join(lines) + out + err
    report = read_report(tmp_path / "r")
    incomplete = " ".join(report["measurement"]["incomplete"])
    assert "the Ray actor on node" in incomplete and "died" in incomplete, incomplete
