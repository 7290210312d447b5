"""A tiny supervisor between speclab and each server, so no server outlives speclab.

    python -m speclab.servers.reaper --parent PID [--grace S] -- ARGV...

vLLM spawns engine subprocesses that hold GPU memory; if speclab crashes or is SIGKILLed they
must not linger. The reaper asks the kernel to signal it when its parent dies
(``PR_SET_PDEATHSIG``), becomes a child subreaper (so descendants that leave the server's process
group are re-parented to it, not to init), starts the server in its own session/process group,
and on SIGTERM, on its parent's death or when the server exits, terminates the whole tree: SIGTERM
to the group and every descendant, a grace period, then SIGKILL. It exits with the server's status.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
import time
from types import FrameType

import psutil

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
PID_LINE = "speclab-reaper: server pid "

_stop_requested = False


def _on_signal(signum: int, frame: FrameType | None) -> None:
    global _stop_requested
    _stop_requested = True


def _prctl(option: int, value: int) -> bool:
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    return bool(libc.prctl(option, value, 0, 0, 0) == 0)


def _reap_zombies(child: subprocess.Popen[bytes] | None) -> None:
    """Reap re-parented descendants; the server itself is left to Popen (to keep its status)."""
    if child is not None:
        child.poll()
    try:
        children = psutil.Process(os.getpid()).children()
    except psutil.Error:
        return
    for p in children:
        if child is not None and p.pid == child.pid:
            continue
        try:
            if p.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(p.pid, os.WNOHANG)
        except (psutil.Error, ChildProcessError):
            pass


def _descendants() -> list[psutil.Process]:
    try:
        return psutil.Process(os.getpid()).children(recursive=True)
    except psutil.Error:
        return []


def _live(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.Error:
            pass
    return out


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _signal_all(pgid: int, procs: list[psutil.Process], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
    for p in procs:
        with contextlib.suppress(psutil.Error):
            p.send_signal(sig)


def terminate_tree(pgid: int, grace_s: float, child: subprocess.Popen[bytes] | None = None) -> None:
    """SIGTERM the server's group and all descendants, wait up to ``grace_s``, then SIGKILL."""
    procs = _descendants()
    _signal_all(pgid, procs, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        _reap_zombies(child)
        procs = _live(_descendants())
        if not procs and not _group_alive(pgid):
            return
        time.sleep(0.05)
    _signal_all(pgid, _descendants(), signal.SIGKILL)
    for _ in range(100):
        _reap_zombies(child)
        if not _live(_descendants()) and not _group_alive(pgid):
            return
        time.sleep(0.02)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m speclab.servers.reaper")
    parser.add_argument("--parent", type=int, required=True, help="pid whose death ends the server")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no server command after --")

    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _on_signal)
    _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    _prctl(PR_SET_CHILD_SUBREAPER, 1)
    if os.getppid() != args.parent:  # the parent died before PDEATHSIG was armed
        return 1
    try:
        child = subprocess.Popen(command, start_new_session=True)
    except OSError as error:
        print(f"speclab-reaper: cannot start {command[0]}: {error}", flush=True)
        return 127
    print(f"{PID_LINE}{child.pid}", file=sys.stderr, flush=True)
    while child.poll() is None:
        if _stop_requested or os.getppid() != args.parent:
            break
        time.sleep(0.05)
    terminate_tree(child.pid, args.grace, child)
    code = child.wait()
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main())
