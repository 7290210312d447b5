"""A real gateway for the tests: `speclab gateway LAB` as a process (simulators and HAProxy under it).

The module-scoped ``gateway`` runs the command exactly as a user would, waits for its ready line
(an event, not a sleep), and on teardown sends SIGTERM and checks that HAProxy and every server
it started are gone. ``fresh`` puts the routing back as it started before each test that changes it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from speclab.gateway.controller import GatewayController
from speclab.gateway.routing import RoutingTable
from speclab.gateway.state import GatewayState
from tests.labs import BASELINE, K4, lab_toml

ROOT = Path(__file__).resolve().parents[2]
MODEL = "sim-8b"
GATEWAY = f'[gateway]\ntenants = {{ A = "baseline", B = "k4", C = "canary" }}\n' \
          f'routes = {{ "/v1/completions" = "k4", "{MODEL}" = "canary" }}\n'


def haproxy_or_skip() -> str:
    path = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/local/sbin:/usr/sbin")
    if path is None:
        if os.environ.get("SPECLAB_REQUIRE_HAPROXY") == "1":
            pytest.fail("haproxy is not installed and SPECLAB_REQUIRE_HAPROXY=1 (apt-get install -y haproxy)")
        pytest.skip("haproxy is not installed (apt-get install -y haproxy)")
    return path


def write_lab(directory: Path, *, baseline_only: bool = False) -> Path:
    """The test lab; ``baseline_only`` serves one variant (a quicker start for the exit-path tests)."""
    path = directory / "gw.toml"
    if baseline_only:
        text = lab_toml("gw", target_sim=MODEL, rest='[gateway]\ntenants = { A = "baseline" }\n')
    else:
        text = lab_toml("gw", target_sim=MODEL, variants=BASELINE + K4, rest=GATEWAY)
    path.write_text(text)
    return path


@dataclass
class Gateway:
    proc: subprocess.Popen[str]
    directory: Path
    state: GatewayState
    lines: list[str]

    @property
    def url(self) -> str:
        return self.state.url

    @property
    def pids(self) -> list[int]:
        """HAProxy's and every server's pid (all under reapers)."""
        pids = [int(self.state.haproxy_pid or 0)]
        children = psutil.Process(self.proc.pid).children(recursive=True)
        return sorted({*pids, *(c.pid for c in children)} - {0})

    async def controller(self) -> GatewayController:
        return await GatewayController.open(report_dir=self.directory)


def start_gateway_cli(lab: Path, directory: Path, *extra: str, env: dict[str, str] | None = None,
                      timeout: float = 90.0) -> Gateway:
    cmd = [sys.executable, "-m", "speclab.cli.main", "gateway", str(lab), "--report", str(directory),
           "--engine", "sim", *extra]
    proc = subprocess.Popen(cmd, cwd=directory.parent, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            with proc:  # closes its pipes: a leaked one would fail a later test with a ResourceWarning
                err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"speclab gateway exited {proc.wait()} before ready:\n{''.join(lines)}{err}")
        lines.append(line)
        if line.startswith("gateway: ready"):
            state = GatewayState.read(directory / "gateway.json")
            return Gateway(proc=proc, directory=directory, state=state, lines=lines)
    with proc:
        proc.kill()
    raise AssertionError(f"speclab gateway not ready in {timeout:g} s:\n{''.join(lines)}")


def wait_gone(pids: list[int], timeout: float = 30.0) -> list[int]:
    """The pids still alive (not zombies) after waiting up to ``timeout`` for them to go."""
    deadline = time.monotonic() + timeout
    alive = pids
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return alive


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def stop_gateway(gw: Gateway, sig: int = signal.SIGTERM) -> tuple[int, str, list[int]]:
    pids = gw.pids
    gw.proc.send_signal(sig)
    try:
        out, err = gw.proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        gw.proc.kill()
        out, err = gw.proc.communicate()
    return gw.proc.returncode, out + err, wait_gone(pids)


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    haproxy_or_skip()
    base = tmp_path_factory.mktemp("gw")
    gw = start_gateway_cli(write_lab(base), base / "report")
    try:
        yield gw
    finally:
        code, output, alive = stop_gateway(gw)
        assert code == 0, output
        assert not alive, f"still running after the gateway stopped: {alive}"
        assert "stopped HAProxy and the servers" in output


@pytest.fixture
async def fresh(gateway: Gateway) -> AsyncIterator[GatewayController]:
    """A controller on the module's gateway, its routing as it started, restored again afterwards."""
    start = RoutingTable.from_dict(gateway.state.routing)
    controller = await gateway.controller()
    await controller.restore(start, who="test setup")
    try:
        yield controller
    finally:
        await controller.restore(start, who="test teardown")
        await controller.close()


def read_events(directory: Path) -> list[dict[str, Any]]:
    path = directory / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
