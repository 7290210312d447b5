"""Real processes for the monitoring-kit tests: Prometheus's own binaries and simulators on fixed ports.

``prometheus`` and ``promtool`` come from the Debian package ``prometheus`` (``.ci/run`` installs
it); tests that need them skip, saying so, where they are absent. Every helper stops what it
started, whatever happens.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from speclab.servers.process import free_port as free_port  # the tests' port picker is speclab's

ROOT = Path(__file__).resolve().parents[2]
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")
needs_promtool = pytest.mark.skipif(PROMTOOL is None, reason="promtool not on PATH (Debian package prometheus)")
needs_prometheus = pytest.mark.skipif(PROMETHEUS is None, reason="prometheus not on PATH (Debian package prometheus)")

T = TypeVar("T")


def http_get(url: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def wait_for(what: str, probe: Callable[[], T | None], timeout: float, proc: subprocess.Popen[bytes] | None = None,
             log: Callable[[], str] = lambda: "") -> T:
    """Poll ``probe`` until it returns something; fail naming ``what`` (and the log) at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: process exited {proc.returncode}\n{log()}")
        try:
            result = probe()
        except OSError:
            result = None
        if result is not None:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s\n{log()}")
        time.sleep(0.1)


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class Sim:
    """``python -m speclab.sim`` on a port chosen by the caller, so a relaunch keeps its scrape target."""

    def __init__(self, args: list[str], port: int, log_path: Path) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        with log_path.open("w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "speclab.sim", *args, "--host", "127.0.0.1",
                                          "--port", str(port)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for("simulator /health", lambda: http_get(self.url + "/health", 1)[0] == 200 or None, 30,
                     self.proc, self.log_path.read_text)
        except BaseException:
            stop(self.proc)
            raise

    def traffic(self, model: str, requests: int = 6, max_tokens: int = 24) -> None:
        body = json.dumps({"model": model, "prompt": "The history of", "max_tokens": max_tokens,
                           "ignore_eos": True}).encode()

        def one(_: int) -> int:
            req = urllib.request.Request(self.url + "/v1/completions", data=body,
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as r:
                return int(r.status)

        with ThreadPoolExecutor(max_workers=3) as pool:
            assert list(pool.map(one, range(requests))) == [200] * requests

    def stop(self) -> None:
        stop(self.proc)


class SpeclabRun:
    """A real ``speclab run`` (its simulators included) serving ``--metrics-port`` in the background."""

    def __init__(self, args: list[str], metrics_port: int, report: Path, log_path: Path) -> None:
        self.metrics_url = f"http://127.0.0.1:{metrics_port}/metrics"
        self.report = report
        self.log_path = log_path
        with log_path.open("w") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "speclab.cli.main", "run", *args, "--metrics-port",
                                          str(metrics_port), "--report", str(report)], cwd=ROOT, stdout=log,
                                         stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        stop(self.proc)


class Prometheus:
    """The real server: 1 s scrapes and rule evaluation, storage under a temporary directory."""

    def __init__(self, tmp: Path, targets: list[str], rule_files: list[Path],
                 other_jobs: dict[str, list[str]] | None = None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        jobs = {"vllm": targets, **(other_jobs or {})}
        config = {"global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                  "rule_files": [str(p) for p in rule_files],
                  "scrape_configs": [{"job_name": job, "static_configs": [{"targets": t}]} for job, t in jobs.items()]}
        (tmp / "prometheus.yml").write_text(yaml.safe_dump(config))
        self.log_path = tmp / "prometheus.log"
        assert PROMETHEUS is not None
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [PROMETHEUS, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                 f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=warn"],
                stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_for("prometheus /-/ready", lambda: http_get(self.url + "/-/ready", 1)[0] == 200 or None, 30,
                     self.proc, self.log_path.read_text)
        except BaseException:
            stop(self.proc)
            raise

    def api(self, path: str, **params: str) -> Any:
        status, text = http_get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}")
        body = json.loads(text)
        assert status == 200 and body["status"] == "success", (path, params, body)
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        return list(self.api("query", query=expr)["result"])

    def query_range(self, expr: str, start: float, end: float) -> list[dict[str, Any]]:
        return list(self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step="1")["result"])

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> None:
        stop(self.proc)


def has_data(result: list[dict[str, Any]]) -> bool:
    """Some series with a finite value (instant ``value`` or range ``values``)."""
    for series in result:
        points = series.get("values") or [series["value"]]
        if any(p[1] not in ("NaN", "+Inf", "-Inf") for p in points):
            return True
    return False


# The dashboard's variables as Grafana fills them with every option at "All".
GRAFANA_VARIABLES = {"$__rate_interval": "1m", "$job": ".*", "$instance": ".*", "$model_name": ".*",
                     "$variant": ".*"}


def as_grafana_sends(expr: str) -> str:
    """A dashboard query with its variables filled in, as Grafana sends it to Prometheus."""
    for name, value in GRAFANA_VARIABLES.items():
        expr = expr.replace(name, value)
    assert "$" not in expr, expr
    return expr
