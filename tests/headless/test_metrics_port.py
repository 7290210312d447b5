"""`--metrics-port` on `run`, `lab`, `sweep` and `drill`: a port in use is bad input, one line, before any server starts."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("command", [["run", "smoke"], ["lab", "default", "smoke"], ["sweep", "default", "smoke", "--quick"],
                                     ["drill", "default", "--quick"]], ids=["run", "lab", "sweep", "drill"])
def test_a_port_in_use_is_exit_2_with_one_line_and_nothing_started(command: list[str], tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "speclab.cli.main", *command, "--metrics-port", str(port),
                               "--report", str(tmp_path / "report")], cwd=ROOT, capture_output=True, text=True,
                              timeout=60, check=False)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stderr.splitlines() == [f"speclab: error: --metrics-port {port}: 127.0.0.1:{port} is already in use"]
    assert "servers ready" not in proc.stdout and proc.stdout == ""
    assert not any((tmp_path / "report" / name).exists() for name in ("report.json", "sweep.json", "haproxy.cfg"))


def test_a_port_out_of_range_is_refused_by_the_option() -> None:
    proc = subprocess.run([sys.executable, "-m", "speclab.cli.main", "run", "smoke", "--metrics-port", "70000"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and "--metrics-port" in proc.stderr and "70000" in proc.stderr
