"""`speclab sweep` end to end: real simulator processes per cell over real sockets, short cells.

One sweep with a configuration the simulator refuses at start-up (a failed cell, the sweep goes
on); one interrupted after its first cell (SIGINT: exit 130, the finished cell kept), then resumed
(the finished cell not rerun, the rest and the confirmation pass run), then resumed with another
grid (refused, exit 2).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from speclab.model.exit_codes import ExitCode
from speclab.sweep.result import SCHEMA_FILE

from .conftest import read_records, run_cli, write_lab

SCENARIO = """
name = "tiny"
seed = 5
duration_s = 30
endpoint = "completions"
[arrival]
process = "concurrency"
concurrency = 1
[classes.q]
temperature = 0
max_tokens = 24
prompts = ["The capital of France is", "Water boils at", "The largest planet is"]
"""
SPEC = '[[variants]]\nname = "k2"\nnum_speculative_tokens = 2\n'
CELL = ["--cell-duration", "1.5", "--warmup", "0.5", "--seed", "3"]


def _setup(workdir: Path) -> tuple[Path, Path]:
    lab = write_lab(workdir / "lab.toml", name="swp", max_num_seqs=8, variant_extra=SPEC)
    scenario = workdir / "tiny.toml"
    scenario.write_text(SCENARIO)
    return lab, scenario


def _doc(directory: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((directory / "sweep.json").read_text())
    jsonschema.validate(doc, json.loads(SCHEMA_FILE.read_text()))
    return doc


@pytest.mark.timeout(240)
def test_sweep_writes_cells_and_reductions_and_goes_on_past_a_failed_cell(workdir: Path) -> None:
    lab, scenario = _setup(workdir)
    out_dir = workdir / "sweep"
    out = run_cli(["sweep", str(lab), str(scenario), "--report", str(out_dir), "--k", "0,2", "--concurrency", "2",
                   "--max-num-batched-tokens", "1024,8192", "--chunked-prefill", "off", "--no-confirm",
                   "--slo", "ttft_p99=2s", *CELL], cwd=workdir, timeout=200)
    assert out.returncode == ExitCode.OK, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    cell_lines = [line for line in lines if line.startswith("cell ")]
    assert len(cell_lines) == 4 and sum("FAILED" in line for line in cell_lines) == 2
    assert sum(line.startswith("[sweep] ") and " now " in line for line in lines) == 4
    assert "2 cell(s) failed" in lines[-1]

    doc = _doc(out_dir)
    assert doc["complete"] is True and doc["lab"] == "swp" and doc["scenario"] == "tiny" and doc["simulated"] is True
    assert doc["versions"]["engine"].startswith("vLLM-compatible simulator")
    by_id = {c["id"]: c for c in doc["cells"]}
    assert set(by_id) == {f"k{k}-batched{b}-chunkedoff_c2_r1" for k in (0, 2) for b in (1024, 8192)}
    for k in (0, 2):
        failed = by_id[f"k{k}-batched1024-chunkedoff_c2_r1"]
        assert failed["status"] == "failed" and "max_num_batched_tokens (1024)" in failed["error"]
        cell = by_id[f"k{k}-batched8192-chunkedoff_c2_r1"]
        assert cell["status"] == "ok" and cell["source"]["recording"] == f"cells/{cell['id']}"
        recording = out_dir / cell["source"]["recording"]
        records = [r for r in read_records(recording) if not r.warmup and r.ok]
        assert cell["classes"]["all"]["requests"] == len(records) > 0
        assert {r.variant for r in records} == {f"k{k}-batched8192-chunkedoff"}
        manifest = json.loads((recording / "manifest.json").read_text())
        assert manifest["servers"][f"k{k}-batched8192-chunkedoff"]["settings"]["max_num_batched_tokens"] == 8192
        report = json.loads((recording / "report.json").read_text())
        assert report["command"] == "sweep"
        # ... and the rest of what `run --report` writes: the timeline, the workers, the events.
        assert report["timeline"] and report["measurement"]["workers"]
        recorded = [json.loads(line) for line in (recording / "events.jsonl").read_text().splitlines()]
        # Every event the cell recorded (client saturation is in the timeline and measurement, as in `run`).
        assert report["events"] == [e for e in recorded if e["kind"] != "client_saturated"]
        assert cell["server"]["running_batch"] is not None
        assert cell["classes"]["all"]["goodput"]["source"] == "requests"
        assert (cell["classes"]["all"]["acceptance"]["acceptance_length_mean"] or 0) > (1.0 if k else -1)
    arm = "k2 batched=8192"
    assert [r["load"] for r in doc["speedup"]["all"][arm]["tpot"]] == [2]
    assert set(doc["crossover"]["all"][arm]) == {"tpot", "throughput"}
    assert any("2 cell(s) failed" in note for note in doc["notes"])
    for name in ("sweep.md", "speedup_vs_load.png", "speedup_vs_load.svg", "pareto.png"):
        assert (out_dir / name).stat().st_size > 0


def _popen(args: list[str], cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "speclab.cli.main", *args], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=dict(os.environ))


@pytest.mark.timeout(300)
def test_interrupt_keeps_finished_cells_and_resume_runs_only_the_rest(workdir: Path) -> None:
    lab, scenario = _setup(workdir)
    out_dir = workdir / "sweep"
    grid = ["--k", "0,2", "--concurrency", "2", *CELL]
    proc = _popen(["sweep", str(lab), str(scenario), "--report", str(out_dir), "--no-confirm", *grid], workdir)
    seen: list[str] = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # the first finished cell is the event we wait on
            seen.append(line)
            if line.startswith("cell 1/"):
                proc.send_signal(signal.SIGINT)
                break
        rest, _ = proc.communicate(timeout=60)
    finally:
        with proc:  # closes its pipe on every path
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    output = "".join(seen) + rest
    assert proc.returncode == ExitCode.INTERRUPTED, output
    doc = _doc(out_dir)
    assert doc["complete"] is False
    kept = [c["id"] for c in doc["cells"]]
    assert kept == ["k0_c2_r1"], output
    first_manifest = (out_dir / "cells" / "k0_c2_r1" / "manifest.json").read_text()

    out = run_cli(["sweep", str(lab), str(scenario), "--report", str(out_dir), "--resume", *grid], cwd=workdir,
                  timeout=240)
    assert out.returncode == ExitCode.OK, out.stdout + out.stderr
    assert not [line for line in out.stdout.splitlines() if line.endswith("now k0_c2_r1 (grid)")]
    assert (out_dir / "cells" / "k0_c2_r1" / "manifest.json").read_text() == first_manifest
    doc = _doc(out_dir)
    assert doc["complete"] is True
    grid_ids = sorted(c["id"] for c in doc["cells"] if c["phase"] == "grid")
    assert grid_ids == ["k0_c2_r1", "k2_c2_r1"]
    confirm = [c for c in doc["cells"] if c["phase"] == "confirm"]
    if doc["best_fixed_k"] is not None:
        assert {c["config"]["k"] for c in confirm} >= {0, doc["best_fixed_k"]}
        assert doc["confirmation"] is not None and doc["confirmation"]["levels"]
    for cell in doc["cells"]:
        assert (out_dir / "cells" / cell["id"] / "requests.jsonl").exists()

    again = run_cli(["sweep", str(lab), str(scenario), "--report", str(out_dir), "--resume", "--k", "0,3",
                     "--concurrency", "2", *CELL], cwd=workdir)
    assert again.returncode == ExitCode.BAD_INPUT
    assert "configs" in again.stderr and "differs" in again.stderr


@pytest.mark.timeout(240)
def test_a_schedule_arm_runs_its_per_batch_k_and_reaches_sweep_json(workdir: Path) -> None:
    lab, scenario = _setup(workdir)
    out_dir = workdir / "sweep"
    out = run_cli(["sweep", str(lab), str(scenario), "--report", str(out_dir), "--k", "0", "--schedule",
                   "1-1:3,2-8:1", "--concurrency", "2", "--no-confirm", *CELL], cwd=workdir, timeout=200)
    assert out.returncode == ExitCode.OK, out.stdout + out.stderr
    doc = _doc(out_dir)
    by_id = {c["id"]: c for c in doc["cells"]}
    assert set(by_id) == {"k0_c2_r1", "sched1-1x3_2-8x1_c2_r1"}
    cell = by_id["sched1-1x3_2-8x1_c2_r1"]
    schedule = [[1, 1, 3], [2, 8, 1]]
    assert cell["status"] == "ok" and cell["config"]["k"] == 3 and cell["config"]["schedule"] == schedule
    assert cell["source"]["settings"]["num_speculative_tokens_per_batch_size"] == schedule
    manifest = json.loads((out_dir / cell["source"]["recording"] / "manifest.json").read_text())
    command = manifest["servers"]["sched1-1x3_2-8x1"]["command"]
    assert '"num_speculative_tokens":3,"num_speculative_tokens_per_batch_size":[[1,1,3],[2,8,1]]' in command
    # The server picked k per step from the running batch: k=1 at two in flight, never the fixed k=3 alone.
    per_k = {row["k"]: row["steps"] for row in cell["classes"]["all"]["acceptance"]["per_k"]}
    assert set(per_k) <= {1, 3} and per_k.get(1, 0) > 0, per_k
    assert sum(per_k.values()) == cell["classes"]["all"]["acceptance"]["steps"]
    assert [r["load"] for r in doc["speedup"]["all"]["sched[1-1:3,2-8:1]"]["throughput"]] == [2]
    assert "sched[1-1:3,2-8:1]" in (out_dir / "sweep.md").read_text()
