"""`speclab lab` as a user meets it: it records by default, `q` leaves a finished recording and a
summary, nothing is left in /tmp, and an attached simulator is measured (and labelled) as such."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from speclab.cli.commands import lab_positionals, open_lab
from speclab.model.errors import InputError
from speclab.recording.reader import Recording
from speclab.servers.process import free_port
from speclab.ui.app import SpeclabApp

from ..outcome import assert_measured
from .conftest import run_cli

SCENARIO = """
name = "steady"
seed = 5
duration_s = 120
endpoint = "chat"
[arrival]
process = "constant"
rate = 4
[classes.factual_qa]
temperature = 0
max_tokens = 16
prompts = ["What is the capital of France?", "Which planet is closest to the sun?"]
"""


def _quit_after_first_records(monkeypatch: pytest.MonkeyPatch) -> None:
    """Drive the real app headless (Pilot) instead of a terminal: wait for numbers, then press q."""

    def run(self: SpeclabApp, *args: Any, **kwargs: Any) -> None:
        async def drive() -> None:
            async with self.run_test(size=(120, 40)) as pilot:
                deadline = time.monotonic() + 90
                while not (self.state.latest is not None and
                           any(v.total.requests for v in self.state.latest.cumulative.values())):
                    assert time.monotonic() < deadline, "no numbers arrived"
                    await asyncio.sleep(0.1)
                await pilot.press("q")
                while self.is_running:
                    await asyncio.sleep(0.05)

        asyncio.run(drive())

    monkeypatch.setattr(SpeclabApp, "run", run)
    monkeypatch.setattr("speclab.cli.commands.require_terminal", lambda *_: None)  # Pilot needs no terminal


def _opts(**kw: Any) -> dict[str, Any]:
    return {"engine": "sim", "workers": 1, **kw}


def test_lab_records_by_default_and_q_leaves_a_finished_recording(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "steady.toml").write_text(SCENARIO)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    _quit_after_first_records(monkeypatch)
    code = open_lab("default", "steady.toml", _opts(variants="baseline", report_dir=tmp_path / "report"))
    assert code == 0
    made = list((tmp_path / "recordings").iterdir())
    assert len(made) == 1 and made[0].name[:8].isdigit()
    rec = Recording.open(made[0])
    assert rec.complete and rec.warnings == []  # replay does not call a normal q unfinished
    assert rec.records
    out = capsys.readouterr().out
    assert f"recording: recordings/{made[0].name} (replay: speclab replay recordings/{made[0].name})" in out
    assert "speclab lab: steady on default: t=" in out and "baseline" in out
    assert [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("speclab-")] == []
    # --report: the recording's report, written as the lab closes
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    assert report["command"] == "lab" and f"report: {tmp_path / 'report' / 'report.json'}" in out
    (epoch,) = report["variants"]["baseline"]["epochs"]
    assert epoch["accounting"]["completed"] + epoch["accounting"]["errored"] == len(rec.records)


def test_q_before_traffic_leaves_no_empty_recording_and_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """q while the servers still start: nothing was recorded, so no directory and no replay hint."""
    (tmp_path / "steady.toml").write_text(SCENARIO)
    monkeypatch.chdir(tmp_path)

    def run(self: SpeclabApp, *args: Any, **kwargs: Any) -> None:
        async def drive() -> None:
            async with self.run_test(size=(120, 40)) as pilot:
                await pilot.press("q")
                while self.is_running:
                    await asyncio.sleep(0.05)

        asyncio.run(drive())

    monkeypatch.setattr(SpeclabApp, "run", run)
    monkeypatch.setattr("speclab.cli.commands.require_terminal", lambda *_: None)
    code = open_lab("default", "steady.toml", _opts(variants="baseline", report_dir=tmp_path / "report"))
    assert code == 0
    assert not (tmp_path / "recordings").exists() and not (tmp_path / "report").exists()
    out = capsys.readouterr().out
    assert "recording: none; the lab closed before its traffic started" in out
    assert "replay" not in out and "report: none" in out


def test_a_lab_report_without_its_recording_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="--report is built from the lab's recording"):
        open_lab("default", None, _opts(no_record=True, report_dir=tmp_path / "report"))
    assert not (tmp_path / "report").exists()


def test_lab_positionals_with_attach_take_the_scenario() -> None:
    assert lab_positionals(None, None, attach=False) == ("default", "mixed")
    assert lab_positionals("ngram", None, attach=False) == ("ngram", "mixed")
    assert lab_positionals("smoke", None, attach=True) == (None, "smoke")
    assert lab_positionals(None, None, attach=True) == (None, "mixed")
    assert lab_positionals("", "smoke", attach=True) == (None, "smoke")  # the old dummy still works
    with pytest.raises(InputError, match="give only"):
        lab_positionals("default", "smoke", attach=True)


@pytest.fixture
def sim_server(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    log = (tmp_path / "sim.log").open("w")
    server = subprocess.Popen([sys.executable, "-m", "speclab.sim", "sim-8b", "--host", "127.0.0.1", "--port",
                               str(port), "--enable-per-request-metrics"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(f"{url}/health", timeout=2).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, (tmp_path / "sim.log").read_text()
                time.sleep(0.1)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=15)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


def test_attach_takes_the_scenario_positional_and_labels_a_simulator_simulated(
        sim_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _quit_after_first_records(monkeypatch)
    assert open_lab("smoke", None, _opts(attach=(f"mine={sim_server}",), record_path=tmp_path / "rec")) == 0
    rec = Recording.open(tmp_path / "rec")
    assert rec.manifest["lab"] == "attached" and rec.manifest["scenario"] == "smoke"
    assert rec.simulated and "speclab_sim_" in rec.manifest["engine"]
    report = tmp_path / "r"
    out = run_cli(["run", "smoke", "--attach", f"mine={sim_server}", "--requests", "4", "--report", str(report)],
                  cwd=tmp_path)
    assert_measured(out)
    assert "SIMULATED" in (report / "report.md").read_text()


def test_run_leaves_no_log_folder_behind(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    out = run_cli(["run", "smoke", "--engine", "sim", "--variants", "baseline", "--requests", "4"], cwd=tmp_path,
                  env={"TMPDIR": str(scratch)})
    assert_measured(out)
    assert os.listdir(scratch) == []
