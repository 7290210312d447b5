"""`speclab release-notes`: the note from a real accept report, a sweep directory and a drill report.

The accept report (``data/accept/report.json``) is what ``speclab accept default --report DIR`` wrote
on the simulator; the sweep directory is written by the sweep package's own writer from cells with a
known answer, under the same pair; the drill report follows the shape the file format pins for
``report.json``'s ``drill`` block. Refusals run the real command and read its one line and exit code.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from speclab.headless.release import write_release
from speclab.model.lab import load_lab
from speclab.sweep import DraftRules, make_grid, reduce_sweep
from speclab.sweep.output import write_sweep
from tests.sweep import synth

DATA = Path(__file__).with_name("data")
ACCEPT = json.loads((DATA / "accept" / "report.json").read_text())
ORDER = ["tokenizer_alignment", "golden", "equivalence", "structured", "latency_curve", "stress", "canary",
         "rollback_drill"]
PHASE = {"pool": "k4", "backends": {"k4": 76}, "requests": 76, "errors": 0, "e2e_p50_ms": 92.735,
         "e2e_p99_ms": 628.223, "rejection_rate": 0.2784, "structured_failure_rate": 0.0}
DRILL_BLOCK = {"rollback_s": 0.412, "drain_s": 1.87, "in_flight_at_flip": 5, "failed_during_flip": 0,
               "converged": True, "limit_s": 2.0,
               "tenants": {"A": {"backend_before": "baseline", "backend_after": "baseline"},
                           "B": {"role": "canary", "phases": {"canary": PHASE, "rolled_back": {
                               **PHASE, "pool": "baseline", "backends": {"baseline": 46}, "rejection_rate": None}}}}}


def _sweep(directory: Path, pair: dict[str, Any], *, plots: bool = True) -> Path:
    grid = make_grid([0, 2, 4], rules=DraftRules("draft_model"), concurrency=[1, 8, 16, 32, 64], repeats=2,
                     slo="ttft_p99=200ms,tpot_p99=40ms")
    result = reduce_sweep(grid, synth.model_cells(grid), lab=load_lab("default"))
    meta = {"lab": "default", "scenario": "mixed", "engine": "sim", "simulated": True, "time_scale": 1.0,
            "pair": pair, "versions": {"engine": "speclab.sim"}, "complete": True}
    write_sweep(directory, result, meta, plots=plots)
    return directory


def _drill(directory: Path, block: dict[str, Any], *, code: int = 0, **changes: Any) -> Path:
    doc = copy.deepcopy(ACCEPT)
    for key in ("gates", "stage_metrics", "profile", "variant_tables_from"):
        doc.pop(key, None)
    doc.update(command="drill", scenario="mixed", drill=block,
               exit={"code": code, "name": "OK" if code == 0 else "ROLLBACK_DRILL", "reason": "drill " + str(code)})
    doc.update(changes)
    directory.mkdir(parents=True)
    (directory / "report.json").write_text(json.dumps(doc))
    return directory


def _report(directory: Path, doc: dict[str, Any]) -> Path:
    directory.mkdir(parents=True)
    (directory / "report.json").write_text(json.dumps(doc))
    return directory


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("release")
    return {"accept": DATA / "accept", "sweep": _sweep(tmp / "sweep", ACCEPT["pair"]),
            "drill": _drill(tmp / "drill", DRILL_BLOCK), "tmp": tmp}


@pytest.fixture(scope="module")
def note(inputs: dict[str, Path]) -> tuple[dict[str, Any], str, Path]:
    out = inputs["tmp"] / "out"
    doc, paths = write_release([inputs["sweep"], inputs["drill"], inputs["accept"]], out)
    assert paths[:2] == [out / "release.md", out / "release.json"]
    assert json.loads((out / "release.json").read_text()) == doc
    return doc, (out / "release.md").read_text(), out


def test_pair_names_models_revisions_tokenizer_hashes_and_method(note: tuple[dict[str, Any], str, Path]) -> None:
    doc, md, _ = note
    pair = ACCEPT["pair"]
    assert doc["pair"]["target_model"] == pair["target_model"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert doc["pair"]["draft_revision"] == pair["draft_revision"]
    assert doc["pair"]["method"] == "draft_model"
    assert doc["pair"]["target_tokenizer_sha256"] == pair["target_sim_tokenizer_sha256"]
    assert doc["pair"]["target_tokenizer_source"] == "simulator stand-in"
    assert md.startswith("# Release note: meta-llama/Llama-3.1-8B-Instruct@main with "
                         "meta-llama/Llama-3.2-1B-Instruct@main (SIMULATED")
    assert f"`{pair['draft_sim_tokenizer_sha256']}` (simulator stand-in)" in md


def test_gates_in_the_checklists_order_with_the_drill_last(note: tuple[dict[str, Any], str, Path]) -> None:
    doc, md, _ = note
    assert [g["stage"] for g in doc["gates"]] == ORDER
    assert [g["exit_code"] for g in doc["gates"]] == [10, 11, 12, 13, 14, 15, 16, 17]
    assert {g["status"] for g in doc["gates"]} == {"passed"}
    assert doc["verdict"] == "every gate passed" and doc["missing"] == []
    rows = [line for line in md.splitlines() if line.startswith("| ") and " | PASSED | " in line]
    assert [r.split(" | ")[1] for r in rows] == ORDER


def test_headline_metrics_are_the_accept_reports_per_class_against_the_baseline(
        note: tuple[dict[str, Any], str, Path]) -> None:
    doc, md, _ = note
    head = doc["headline"]
    assert head["baseline"] == "baseline" and head["from_stage"] == "canary"
    classes = list(ACCEPT["variants"]["k4"]["epochs"][0]["classes"])
    assert classes[-1] == "all" and len(classes) == 5
    assert [(r["variant"], r["class"]) for r in head["rows"]] == [(v, c) for v in ("k2", "k4") for c in classes]
    k4 = next(r for r in head["rows"] if (r["variant"], r["class"]) == ("k4", "tool_call"))
    src = ACCEPT["variants"]["k4"]["epochs"][0]["classes"]["tool_call"]
    base = ACCEPT["variants"]["baseline"]["epochs"][0]["classes"]["tool_call"]
    assert k4["acceptance_length_distribution"] == src["acceptance"]["acceptance_length_distribution"]
    assert k4["rejection_rate"] == src["acceptance"]["rejection_rate"]
    assert k4["e2e_ms"]["p99_ms"] == src["latency"]["e2e_corrected"]["p99_ms"]
    assert k4["e2e_p99_ratio"] == round(src["latency"]["e2e_corrected"]["p99_ms"]
                                        / base["latency"]["e2e_corrected"]["p99_ms"], 4)
    assert k4["structured"]["total"] == src["structured"]["total"] > 0
    assert k4["structured_delta_points"] == 0.0
    assert "| k4 | tool_call | 15 |" in md


def test_schedule_and_crossovers_come_from_the_sweep_and_its_section_is_embedded(
        inputs: dict[str, Path], note: tuple[dict[str, Any], str, Path]) -> None:
    doc, md, out = note
    sweep = json.loads((inputs["sweep"] / "sweep.json").read_text())
    assert doc["schedule"]["schedule"] == sweep["schedule"] == [[1, 7, 4], [8, 31, 2], [32, 64, 0]]
    assert doc["schedule"]["crossover"] == sweep["crossover"]
    assert doc["schedule"]["speculative_config"] == sweep["speculative_config"]
    assert "| 8–31 | 2 |" in md and "| all | k4 | 16 | 16 |" in md
    assert "\n## Draft-length and batch sweep: default × mixed" in md  # sweep.md's title, one level down
    assert "\n### Recommended k schedule" in md
    for line in md.splitlines():
        if line.startswith("![") and "](" in line:
            assert (out / line.split("](")[1].rstrip(")")).is_file(), line


def test_memory_table_against_the_baseline_with_topology(note: tuple[dict[str, Any], str, Path]) -> None:
    doc, md, _ = note
    mem = doc["memory"]
    assert mem["from"] == "accept" and mem["rows"] == ACCEPT["memory"]
    assert mem["topology"]["between_servers"] == "separate"
    assert mem["topology"]["servers"]["k4"]["gpus"] == [2]
    assert "| k4 | 17.26 | +2.30 | 357,264 | 0.768 |" in md
    assert "each server on its own GPUs: baseline [0] (tp 1), k2 [1] (tp 1), k4 [2] (tp 1)" in md


def test_rollback_drill_section(note: tuple[dict[str, Any], str, Path]) -> None:
    doc, md, _ = note
    assert doc["drill"]["rollback_s"] == 0.412 and doc["drill"]["verdict"] == "passed"
    assert "| 0.412 | 1.870 | 5 | 0 | True |" in md
    assert "- tenant A: backend_before=baseline, backend_after=baseline" in md
    assert "| B | canary | canary | k4 | k4 76 | 76 | 0 | 92.7 / 628.2 | 27.8% | 0.0% |" in md
    assert "| B | canary | rolled_back | baseline | baseline 46 | 76 | 0 | 92.7 / 628.2 | – | 0.0% |" in md
    assert "Rollback limit 2 s." in md


def test_a_note_without_a_drill_says_so(inputs: dict[str, Path], tmp_path: Path) -> None:
    doc, _ = write_release([inputs["accept"], inputs["sweep"]], tmp_path)
    md = (tmp_path / "release.md").read_text()
    assert doc["missing"] == [{"kind": "drill", "made_by": "speclab drill LAB --report DIR"}]
    assert doc["verdict"] == "incomplete: no drill report"
    assert doc["gates"][-1] == {"stage": "rollback_drill", "exit_code": 17, "status": "not run",
                                "summary": "no drill report"}
    assert "- drill report: **missing**" in md and "**No drill report was given**" in md


def test_a_failed_drill_blocks_the_release(inputs: dict[str, Path], tmp_path: Path) -> None:
    failed = _drill(tmp_path / "drill", {**DRILL_BLOCK, "converged": False, "failed_during_flip": 3}, code=17)
    doc, _ = write_release([inputs["accept"], failed], tmp_path / "out")
    assert doc["gates"][-1]["status"] == "failed"
    assert doc["verdict"] == "blocked: rollback_drill failed"


def _cli(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "speclab.cli.main", "release-notes", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=60, check=False)


def test_cli_writes_the_note_and_warns_of_a_missing_input(inputs: dict[str, Path], tmp_path: Path) -> None:
    proc = _cli(inputs["accept"], inputs["sweep"], "--out", tmp_path / "note", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"release note: {tmp_path / 'note' / 'release.md'}" in proc.stdout
    assert "verdict: incomplete: no drill report" in proc.stdout
    assert proc.stderr.splitlines() == ["warning: no drill report given; the note says so "
                                        "(speclab drill LAB --report DIR writes one)"]


def _refused(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("speclab: error: "), lines
    for word in words:
        assert word in lines[0], (word, lines[0])


def test_cli_refuses_bad_inputs_with_one_line(inputs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "out"
    _refused(_cli(inputs["accept"], tmp_path / "nowhere", "--out", out, cwd=tmp_path), "nowhere: no such directory")
    other = copy.deepcopy(ACCEPT)
    other["schema"] = "speclab.report/2"
    _refused(_cli(_report(tmp_path / "v2", other), "--out", out, cwd=tmp_path),
             "schema 'speclab.report/2', expected 'speclab.report/1'")
    revised = _drill(tmp_path / "drill-rev", DRILL_BLOCK, pair={**ACCEPT["pair"], "draft_revision": "abc123"})
    _refused(_cli(inputs["accept"], revised, "--out", out, cwd=tmp_path),
             "inputs from different pairs: draft_revision is 'main'", "'abc123'")
    swapped = _sweep(tmp_path / "sweep-other", {**ACCEPT["pair"], "draft_model": "other/Draft-0.5B"}, plots=False)
    _refused(_cli(inputs["accept"], swapped, "--out", out, cwd=tmp_path), "draft_model", "other/Draft-0.5B")
    _refused(_cli(inputs["accept"], inputs["accept"], "--out", out, cwd=tmp_path), "two accept inputs")
    (tmp_path / "empty").mkdir()
    _refused(_cli(tmp_path / "empty", "--out", out, cwd=tmp_path), "neither report.json")
    run_report = {k: v for k, v in ACCEPT.items() if k != "gates"}
    _refused(_cli(_report(tmp_path / "run", run_report), "--out", out, cwd=tmp_path), "neither an accept report")
    measured = _drill(tmp_path / "drill-real", DRILL_BLOCK, simulated=False)
    _refused(_cli(inputs["accept"], measured, "--out", out, cwd=tmp_path), "is simulated but")
    sweep2 = json.loads((inputs["sweep"] / "sweep.json").read_text())
    sweep2["schema"] = "speclab.sweep/2"
    (tmp_path / "sweep2").mkdir()
    (tmp_path / "sweep2" / "sweep.json").write_text(json.dumps(sweep2))
    _refused(_cli(tmp_path / "sweep2", "--out", out, cwd=tmp_path), "expected 'speclab.sweep/1'")
    # A report edited by hand or damaged: the file and the key, not a traceback from deep in the note.
    for key, value, says in (("gates", [1, 2], "'gates' holds an entry that is not an object"),
                             ("variants", [1], "'variants' is list [1], not an object"),
                             ("pair", "x", "'pair' is str 'x', not an object"),
                             ("gates", "oops", "'gates' is str 'oops', not a list")):
        _refused(_cli(_report(tmp_path / f"bad-{key}-{len(str(value))}", {**ACCEPT, key: value}), "--out", out,
                      cwd=tmp_path), f"report.json: {says}")
    assert not out.exists()  # nothing written by a refused run


def test_cli_a_note_that_cannot_be_written_is_one_line_not_a_traceback(inputs: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "note"
    (out / "release.json").mkdir(parents=True)  # the directory is there; the file cannot be written
    _refused(_cli(inputs["accept"], "--out", out, cwd=tmp_path), f"--out {out}: cannot write the release note:")
    _refused(_cli(inputs["accept"], "--out", "/proc/speclab-release", cwd=tmp_path),  # refused even to root
             "--out /proc/speclab-release: cannot write the release note:")
