"""`speclab run` end to end against real simulator processes over real sockets."""

from __future__ import annotations

import json
from pathlib import Path

from speclab.model.exit_codes import ExitCode
from speclab.model.records import RequestRecord

from .conftest import read_report, run_cli, write_lab


def _records(recording: Path) -> list[RequestRecord]:
    lines = (recording / "requests.jsonl").read_text().splitlines()
    return [RequestRecord.from_dict(json.loads(line)) for line in lines if line.strip()]


def test_smoke_run_reports_acceptance_that_reconciles_with_records_and_server(workdir: Path) -> None:
    report_dir, rec_dir = workdir / "report", workdir / "rec"
    out = run_cli(["run", "smoke", "--variants", "baseline,k2", "--report", str(report_dir),
                   "--record", str(rec_dir)], cwd=workdir)
    assert out.returncode == ExitCode.OK, out.stdout + out.stderr
    first = out.stdout.splitlines()[0]
    assert "simulated" in first and "engine: sim" in first
    assert any(line.startswith("t=") for line in out.stdout.splitlines())

    report = read_report(report_dir)
    assert report["schema"] == "speclab.report/1" and report["simulated"] is True
    assert report["exit"]["code"] == 0
    assert (report_dir / "report.md").read_text().startswith("# speclab run")

    records = [r for r in _records(rec_dir) if not r.warmup and r.ok]
    k2 = report["variants"]["k2"]["classes"]
    for cls in ("factual_qa", "continuation"):
        mine = [r for r in records if r.variant == "k2" and r.prompt_class == cls]
        assert mine, cls
        acc = k2[cls]["acceptance"]
        assert acc["source"] == "exact"
        assert acc["accepted"] == sum(r.spec.accepted for r in mine)
        assert acc["drafted"] == sum(r.spec.drafted for r in mine)
        assert acc["steps"] == sum(r.spec.steps for r in mine)
        assert k2[cls]["requests"] == len(mine)
    total = k2["all"]["acceptance"]
    assert total["accepted"] == sum(k2[c]["acceptance"]["accepted"] for c in ("factual_qa", "continuation"))
    # The sum over classes (warm-up included, as the server counts it) equals the server's counters.
    assert report["crosscheck_ok"] is True
    checks = {c["quantity"]: c for c in report["crosscheck"] if c["variant"] == "k2"}
    assert checks["accepted"]["client"] == checks["accepted"]["server"] > 0
    assert checks["drafts"]["client"] == checks["drafts"]["server"] > 0
    assert report["variants"]["baseline"]["classes"]["all"]["acceptance"]["steps"] == 0
    assert {row["variant"] for row in report["memory"]} == {"baseline", "k2"}


def test_server_queue_grows_past_max_num_seqs_while_decode_does_not(workdir: Path) -> None:
    lab = write_lab(workdir / "small.toml", max_num_seqs=2)
    scenario = workdir / "closed.toml"
    scenario.write_text(
        'name = "closed"\nseed = 3\nrequests = 24\nendpoint = "completions"\n'
        '[arrival]\nprocess = "concurrency"\nconcurrency = 2\n'
        '[classes.q]\ntemperature = 0\nmax_tokens = 24\n'
        'prompts = ["The capital of France is", "Water boils at"]\n'
    )
    results = {}
    for concurrency in (2, 8):
        report_dir = workdir / f"r{concurrency}"
        out = run_cli(["run", str(scenario), "--lab", str(lab), "--concurrency", str(concurrency),
                       "--report", str(report_dir)], cwd=workdir)
        assert out.returncode == 0, out.stdout + out.stderr
        latency = read_report(report_dir)["variants"]["baseline"]["classes"]["all"]["latency"]
        results[concurrency] = (latency["server_queue"]["p50_ms"], latency["server_decode"]["p50_ms"])
    (queue_low, decode_low), (queue_high, decode_high) = results[2], results[8]
    assert queue_high > 5 * max(queue_low, 1.0)
    assert decode_high < 1.5 * decode_low


def test_bad_scenario_names_the_field(workdir: Path) -> None:
    bad = workdir / "bad.toml"
    bad.write_text('name = "bad"\nrequests = 5\n[arrival]\nprocess = "poisson"\nrate = "fast"\n'
                   '[classes.a]\nprompts = ["hi"]\n')
    out = run_cli(["run", str(bad)], cwd=workdir, timeout=30)
    assert out.returncode == ExitCode.BAD_INPUT
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "arrival.rate" in lines[0] and "bad.toml" in lines[0]
    assert "Traceback" not in out.stderr


def test_server_that_never_starts_exits_3_naming_the_cause(workdir: Path) -> None:
    lab = write_lab(workdir / "broken.toml", server_extra='extra_args = ["--no-such-flag"]')
    out = run_cli(["run", "smoke", "--lab", str(lab)], cwd=workdir, timeout=60)
    assert out.returncode == ExitCode.SERVER_NOT_READY, out.stdout + out.stderr
    assert "unrecognized arguments" in out.stderr and "Traceback" not in out.stderr


def test_every_request_failing_exits_4(workdir: Path) -> None:
    lab = write_lab(workdir / "fail.toml", variant_extra='sim_faults = ["http_500=1.0"]')
    report_dir = workdir / "r"
    out = run_cli(["run", "smoke", "--lab", str(lab), "--requests", "6", "--report", str(report_dir)], cwd=workdir)
    assert out.returncode == ExitCode.ALL_REQUESTS_FAILED, out.stdout + out.stderr
    report = read_report(report_dir)
    assert report["variants"]["baseline"]["classes"]["all"]["errors"].get("http_5xx", 0) >= 4
    assert "every request failed" in out.stdout
