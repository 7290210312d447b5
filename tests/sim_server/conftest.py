"""Simulator processes for the server tests: started once per session on free loopback ports."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from speclab.servers.process import free_port as free_port  # the tests' port picker is speclab's

ROOT = Path(__file__).resolve().parents[2]
# SPECLAB_SIM_TEST_MODULE=tests.sim_server.fake_main runs the same server over fake_engine.py.
SIM_MODULE = os.environ.get("SPECLAB_SIM_TEST_MODULE", "speclab.sim")
# Generous: on a loaded 2-core host a cold start can take many times its usual ~2 s.
READY_TIMEOUT_S = 90.0
SPEC_ARGS = ["--speculative-config", '{"method": "draft_model", "model": "sim-1b", "num_speculative_tokens": 3}',
             "--enable-per-request-metrics", "--per-request-spec-decode-metrics", "detailed"]


class SimProcess:
    def __init__(self, args: list[str], log_path: Path, env: dict[str, str] | None = None,
                 module: str = SIM_MODULE) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._log = log_path.open("w")
        self.argv = [sys.executable, "-m", module, *args, "--host", "127.0.0.1", "--port", str(self.port)]
        self.proc = subprocess.Popen(self.argv, cwd=ROOT, stdout=self._log, stderr=subprocess.STDOUT,
                                     env={**os.environ, **(env or {})})

    def wait_ready(self, timeout: float = READY_TIMEOUT_S) -> SimProcess:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"simulator exited {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=1) as r:
                    if r.status == 200:
                        return self
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"simulator not ready in {timeout}s:\n{self.log()}")

    def log(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._log.close()
        return self.proc.returncode


def start_sim(args: list[str], tmp: Path, name: str, env: dict[str, str] | None = None,
              ready_timeout: float = READY_TIMEOUT_S, module: str = SIM_MODULE) -> SimProcess:
    """A ready simulator; one that does not become ready is stopped before the error propagates."""
    proc = SimProcess(args, tmp / f"{name}.log", env, module)
    try:
        return proc.wait_ready(ready_timeout)
    except BaseException:
        proc.stop()
        raise


@pytest.fixture(scope="session")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """sim-8b with a sim-1b draft (k=3) and every per-request metric switched on."""
    proc = start_sim(["sim-8b", *SPEC_ARGS], tmp_path_factory.mktemp("sim"), "spec")
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="session")
def sim_plain(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimProcess]:
    """sim-8b without speculation and without per-request metrics (vLLM's defaults)."""
    proc = start_sim(["sim-8b", "--served-model-name", "plain-8b", "alias"], tmp_path_factory.mktemp("sim"), "plain")
    try:
        yield proc
    finally:
        proc.stop()
