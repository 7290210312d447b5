"""A real two-node Ray cluster on 127.0.0.1 for the tests: a head and a second node.

Each node is ``ray start --block`` in a session of its own, so everything it starts (GCS, raylet,
workers) is found again by that session id and ended by process id, never by name: ``ray stop``
would stop every Ray on the machine. The temp dir is unique and short (Ray's socket paths must
fit in 107 bytes). Readiness is the node's own "Ray runtime started" line, not a sleep.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

START_TIMEOUT_S = 90.0
READY_LINE = "Ray runtime started"
# What every node needs and no more: one CPU (one traffic worker), a small object store, no usage
# report, no log monitor (the drivers here do not take workers' logs); the head adds no autoscaler
# monitor (a fixed cluster; KubeRay starts heads this way when an autoscaler sidecar runs it) and
# no dashboard UI.
NODE_OPTIONS = ("--node-ip-address=127.0.0.1", "--num-cpus=1", "--object-store-memory=80000000",
                "--disable-usage-stats", "--include-log-monitor=false")
HEAD_OPTIONS = ("--include-dashboard=false", "--no-monitor")
# A node launched beside the head retries its GCS once a second, 20 times by default; a loaded
# host may take longer to bring the head's GCS up, so it waits up to a minute.
NODE_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_enable_metrics_collection": "0", "RAY_NUM_REDIS_GET_RETRIES": "60"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class RayNode:
    proc: subprocess.Popen[str]
    what: str = "node"
    lines: list[str] = field(default_factory=list)
    ready: threading.Event = field(default_factory=threading.Event)
    reader: threading.Thread | None = None

    def read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip())
            if READY_LINE in line:
                self.ready.set()
        self.ready.set()  # ended: wait() sees it and reports the exit

    def wait(self) -> None:
        if not self.ready.wait(START_TIMEOUT_S) or self.proc.poll() is not None:
            tail = "\n".join(self.lines[-15:])
            raise RuntimeError(f"the Ray {self.what} did not start:\n{tail}")


@dataclass
class RayCluster:
    address: str  # ray://127.0.0.1:PORT (Ray Client)
    gcs: str
    temp_dir: Path
    nodes: list[RayNode] = field(default_factory=list)

    def launch_node(self, *args: str, what: str) -> RayNode:
        """Start one node's ``ray start --block``; ``RayNode.wait`` waits for it."""
        ray = str(Path(sys.executable).parent / "ray")
        proc = subprocess.Popen(
            [ray, "start", "--block", *NODE_OPTIONS, *args],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
            env={**os.environ, **NODE_ENV},
        )
        node = RayNode(proc, what=what)
        self.nodes.append(node)
        node.reader = threading.Thread(target=node.read, daemon=True)
        node.reader.start()
        return node

    def add_node(self) -> None:
        self.launch_node(f"--address={self.gcs}", what=f"node {len(self.nodes) + 1}").wait()

    def stop(self) -> None:
        """End every process each node's session started: SIGTERM (``--block`` stops its own),
        then SIGKILL for whatever is left, all by process id."""
        sessions = {n.proc.pid for n in self.nodes}
        for node in reversed(self.nodes):
            with contextlib.suppress(ProcessLookupError):
                node.proc.send_signal(signal.SIGTERM)
        for node in reversed(self.nodes):
            try:
                node.proc.wait(30)
            except subprocess.TimeoutExpired:
                node.proc.kill()
                node.proc.wait(10)
        leftovers = [p for p in psutil.process_iter(["pid"]) if _in_sessions(p, sessions, self.temp_dir)]
        for proc in leftovers:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(leftovers, timeout=10)
        for node in self.nodes:  # every writer of its output is gone: the reader sees the end
            if node.reader is not None:
                node.reader.join(10)
            if node.proc.stdout is not None and (node.reader is None or not node.reader.is_alive()):
                node.proc.stdout.close()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def free_cpus(want: float, timeout: float = 30.0) -> float:
    """The cluster's free CPUs, once ``want`` are free or ``timeout`` has passed (the GCS learns of
    a release from the raylets' next resource report, so the view lags the release a little)."""
    import ray

    deadline = time.monotonic() + timeout
    while True:
        free = float(ray.available_resources().get("CPU", 0.0))
        if free >= want or time.monotonic() > deadline:
            return free
        time.sleep(0.1)


def _in_sessions(proc: psutil.Process, sessions: set[int], temp_dir: Path) -> bool:
    with contextlib.suppress(psutil.Error):
        if os.getsid(proc.pid) in sessions:
            return True
        return any(str(temp_dir) in part for part in proc.cmdline())
    return False


def start_cluster(nodes: int = 2) -> RayCluster:
    """A head and ``nodes - 1`` more nodes, one CPU each (the bench adds its second node later)."""
    gcs_port, client_port = free_port(), free_port()
    temp_dir = Path(tempfile.mkdtemp(prefix="sr-", dir="/tmp"))
    cluster = RayCluster(address=f"ray://127.0.0.1:{client_port}", gcs=f"127.0.0.1:{gcs_port}", temp_dir=temp_dir)
    try:
        # The second node starts beside the head, not after it: its `ray start` retries the head's
        # GCS until it answers, so the two start-ups overlap.
        launched = [cluster.launch_node("--head", f"--port={gcs_port}", f"--ray-client-server-port={client_port}",
                                        f"--temp-dir={temp_dir}", *HEAD_OPTIONS, what="head")]
        launched += [cluster.launch_node(f"--address={cluster.gcs}", what=f"node {n + 2}") for n in range(nodes - 1)]
        for node in launched:
            node.wait()
    except BaseException:
        cluster.stop()
        raise
    return cluster
