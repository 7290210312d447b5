"""The CPU time and memory of a client's whole process tree, as an outside observer sees them.

A client under test runs as a child of the bench. A sampler thread walks its tree every
``period`` seconds through ``/proc`` (``task/*/children``, so children started from any thread are
found) and keeps, per process, its own user+system time and resident memory; a process that exits
keeps its last sample, so nothing it spent before its last sample is lost, and reaped children
are never counted twice (only each process's own time is summed, not its children's fields). At
exit ``os.wait4`` gives the kernel's figure for the child and every descendant it waited for,
start-up and shutdown included. Linux only, like the rest of bench_loadgen.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

_TICK = float(os.sysconf("SC_CLK_TCK"))
_PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int) -> tuple[float, int] | None:
    """(user+system seconds, resident bytes) of one process from ``/proc/PID/stat``."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = raw[raw.rfind(b")") + 2:].split()  # after "pid (comm) ": field 3 onward
    if fields[0] == b"Z":
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK, int(fields[21]) * _PAGE


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants, now."""
    out, todo = [], [pid]
    while todo:
        current = todo.pop()
        out.append(current)
        try:
            tids = os.listdir(f"/proc/{current}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                todo.extend(int(c) for c in Path(f"/proc/{current}/task/{tid}/children").read_text().split())
            except OSError:
                continue
    return out


@dataclass
class TreeSamples:
    times: list[float] = field(default_factory=list)  # wall clock of each sample
    cpu: list[float] = field(default_factory=list)  # cumulative CPU seconds of the tree (exited processes kept)
    rss: list[int] = field(default_factory=list)  # resident bytes summed over the live tree
    processes: int = 0  # distinct processes seen

    def cpu_at(self, t: float) -> float:
        """Cumulative tree CPU at wall time ``t``, interpolated between samples."""
        if not self.times:
            return 0.0
        i = bisect_left(self.times, t)
        if i == 0:
            return self.cpu[0]
        if i >= len(self.times):
            return self.cpu[-1]
        t0, t1 = self.times[i - 1], self.times[i]
        c0, c1 = self.cpu[i - 1], self.cpu[i]
        return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1

    def cpu_between(self, start: float, end: float) -> float:
        return self.cpu_at(end) - self.cpu_at(start)

    @property
    def peak_rss(self) -> int:
        return max(self.rss, default=0)


class TreeSampler:
    """Samples the tree under ``pid`` in a thread until ``stop``."""

    def __init__(self, pid: int, period: float = 0.05) -> None:
        self.pid = pid
        self.period = period
        self.samples = TreeSamples()
        self._last: dict[int, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tree-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> TreeSamples:
        self._stop.set()
        self._thread.join()
        self.samples.processes = len(self._last)
        return self.samples

    def sample(self) -> None:
        rss = 0
        for pid in tree(self.pid):
            stat = _stat(pid)
            if stat is None:
                continue
            self._last[pid] = max(stat[0], self._last.get(pid, 0.0))
            rss += stat[1]
        samples = self.samples
        samples.times.append(time.time())
        samples.cpu.append(sum(self._last.values()))
        samples.rss.append(rss)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.period)


@dataclass
class Measured:
    returncode: int
    samples: TreeSamples
    cpu_total_s: float  # os.wait4: the child and every descendant it reaped, whole lifetime
    max_rss_one_process: int  # bytes: the largest single process (ru_maxrss)


def run_measured(argv: Sequence[str], *, log: IO[str], env: dict[str, str] | None = None,
                 timeout_s: float = 900.0, period: float = 0.05) -> Measured:
    """Run ``argv`` to the end (its output to ``log``), sampling its tree; kill it past ``timeout_s``."""
    proc = subprocess.Popen(list(argv), stdout=log, stderr=subprocess.STDOUT, env=env)
    sampler = TreeSampler(proc.pid, period)
    sampler.start()
    killer = threading.Timer(timeout_s, proc.kill)
    killer.start()
    try:
        _, status, usage = os.wait4(proc.pid, 0)
    finally:
        killer.cancel()
        samples = sampler.stop()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Measured(proc.returncode, samples, usage.ru_utime + usage.ru_stime, usage.ru_maxrss * 1024)
