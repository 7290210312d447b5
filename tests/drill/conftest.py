"""`speclab drill` as a user runs it: a process over real HAProxy and simulator processes.

``run_drill`` starts the command, collects the processes it started once traffic begins (an
event in its output, not a sleep), can interrupt it on a line, and after it exits says which of
those processes are still alive (they must all be gone).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from tests.gateway.conftest import haproxy_or_skip, wait_gone
from tests.labs import BASELINE, K4, lab_toml

GATEWAY = '[gateway]\ntenants = { A = "baseline", B = "k4" }\n'

SCENARIO = """
name = "drillmix"
seed = 5
duration_s = 8
endpoint = "chat"
stall_timeout_s = 5
[arrival]
process = "poisson"
rate = 10
[classes.story]
weight = 2
prompts = ["Tell me a long story about the sea and its ships.", "Describe a long journey over the mountains."]
temperature = 0
max_tokens = 160
[classes.tool_call]
weight = 2
prompts = ["Call the weather tool for Paris.", "Look up the time in Tokyo with the clock tool."]
temperature = 0
max_tokens = 64
[classes.tool_call.schema]
type = "object"
required = ["name", "arguments"]
properties = {{ name = {{ type = "string" }}, arguments = {{ type = "object" }} }}
"""


def write_inputs(directory: Path, *, faults: str = "", server_extra: str = "") -> tuple[Path, Path]:
    """The test lab (``faults``: a simulator fault list for k4) and a short scenario."""
    lab = directory / "drilllab.toml"
    k4 = K4 + (f"sim_faults = [{faults}]\n" if faults else "")
    lab.write_text(lab_toml("drilllab", server_extra=server_extra, variants=BASELINE + k4, rest=GATEWAY))
    scenario = directory / "drillmix.toml"
    scenario.write_text(SCENARIO.format())
    return lab, scenario


@dataclass
class DrillRun:
    code: int
    output: str
    alive: list[int]
    started: list[int]
    report_dir: Path

    @property
    def report(self) -> dict[str, Any]:
        return dict(json.loads((self.report_dir / "report.json").read_text()))

    @property
    def drill(self) -> dict[str, Any]:
        return dict(self.report["drill"])


def interrupt(proc: subprocess.Popen[str], report_dir: Path) -> None:
    proc.send_signal(signal.SIGINT)


def run_drill(*args: str, report_dir: Path, interrupt_on: str | None = None,
              action: Callable[[subprocess.Popen[str], Path], None] = interrupt, timeout: float = 100.0) -> DrillRun:
    """Run the command; when a line contains ``interrupt_on``, do ``action`` (Ctrl-C by default)."""
    haproxy_or_skip()
    cmd = [sys.executable, "-m", "speclab.cli.main", "drill", *args, "--report", str(report_dir), "--engine", "sim"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(os.environ))
    lines: list[str] = []
    started: list[int] = []
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("drill: traffic to"):
                started = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
            if interrupt_on is not None and interrupt_on in line:
                action(proc, report_dir)
                interrupt_on = None
            if time.monotonic() > deadline:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return DrillRun(code=code, output="".join(lines), alive=wait_gone(started), started=started,
                    report_dir=report_dir)
