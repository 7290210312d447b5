"""HAProxy stops with everything else on every exit path; a missing HAProxy or a socket that is not
HAProxy's is bad input in one line."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from speclab.gateway import config
from speclab.gateway.runtime import RuntimeAPI
from speclab.model.errors import InputError

from .conftest import haproxy_or_skip, start_gateway_cli, stop_gateway, wait_gone, write_lab


def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speclab.cli.main", *args], capture_output=True, text=True,
                          timeout=90, env=env, cwd=cwd)


def _reapers_of(pid: int) -> list[int]:
    """Reapers speclab started (they name their parent), whatever became of that parent."""
    out = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "speclab.servers.reaper" in cmd and "--parent" in cmd and cmd[cmd.index("--parent") + 1] == str(pid):
            out.append(proc.info["pid"])
    return out


def test_sigkill_of_speclab_takes_haproxy_and_the_servers_with_it(tmp_path: Path) -> None:
    haproxy_or_skip()
    gw = start_gateway_cli(write_lab(tmp_path, baseline_only=True), tmp_path / "report")
    pids = gw.pids
    assert int(gw.state.haproxy_pid or 0) in pids and len(pids) >= 3  # a reaper each for the server and HAProxy
    gw.proc.kill()
    gw.proc.communicate(timeout=30)
    assert wait_gone(pids) == []


def test_ctrl_c_stops_haproxy_and_the_servers_and_exits_130(tmp_path: Path) -> None:
    haproxy_or_skip()
    gw = start_gateway_cli(write_lab(tmp_path, baseline_only=True), tmp_path / "report")
    code, output, alive = stop_gateway(gw, signal.SIGINT)
    assert code == 130 and alive == [] and "stopped HAProxy and the servers" in output


def test_haproxy_that_cannot_bind_exits_3_and_stops_the_servers(tmp_path: Path) -> None:
    haproxy_or_skip()
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.Popen([sys.executable, "-m", "speclab.cli.main", "gateway",
                                 str(write_lab(tmp_path, baseline_only=True)),
                                 "--report", str(tmp_path / "r"), "--engine", "sim", "--port", str(port)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=90)
    assert proc.returncode == 3, out + err
    assert err.count("\n") == 1 and "haproxy exited with status" in err and "cannot bind" in err, err
    assert wait_gone(_reapers_of(proc.pid)) == []


def test_missing_haproxy_is_one_line_saying_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(config, "SBIN_DIRS", ())
    with pytest.raises(InputError) as info:
        config.find_haproxy()
    assert "haproxy is not installed" in str(info.value) and "apt-get install -y haproxy" in str(info.value)
    assert "\n" not in str(info.value)
    named = _cli("gateway", str(write_lab(tmp_path)), "--engine", "sim", "--report", str(tmp_path / "r"),
                 "--haproxy", str(tmp_path / "haproxy"))
    assert named.returncode == 2 and named.stderr.count("\n") == 1
    assert "no such executable; install it (Debian/Ubuntu: apt-get install -y haproxy" in named.stderr
    assert not (tmp_path / "r").exists()  # refused before anything started


@pytest.fixture
def impostor(tmp_path: Path) -> Iterator[Path]:
    """A Unix socket that answers, but not as HAProxy."""
    path = tmp_path / "impostor.sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.listen()
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                continue
            with conn:
                conn.recv(1024)
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield path
    stop.set()
    thread.join(5)
    server.close()


def test_a_socket_that_is_not_haproxys_is_bad_input(impostor: Path, tmp_path: Path) -> None:
    done = _cli("gateway", "rollback", "--socket", str(impostor))
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "is not HAProxy's stats socket" in done.stderr
    nothing = _cli("gateway", "set", "A", "k4", "--socket", str(tmp_path / "none.sock"))
    assert nothing.returncode == 2 and "no such socket" in nothing.stderr


async def test_the_runtime_client_checks_who_answers(impostor: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not HAProxy's stats socket"):
        await RuntimeAPI(impostor, timeout=2.0).connect()
    regular = tmp_path / "file"
    regular.write_text("")
    with pytest.raises(InputError, match="is not a socket"):
        await RuntimeAPI(regular).connect()
