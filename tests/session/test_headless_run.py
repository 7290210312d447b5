"""`speclab run` end to end against real simulator processes over real sockets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from speclab.model.exit_codes import ExitCode

from ..outcome import assert_measured
from .conftest import read_records, read_report, run_cli, write_lab


def test_smoke_run_reports_acceptance_that_reconciles_with_records_and_server(workdir: Path) -> None:
    report_dir, rec_dir = workdir / "report", workdir / "rec"
    out = run_cli(["run", "smoke", "--variants", "baseline,k2", "--report", str(report_dir),
                   "--record", str(rec_dir)], cwd=workdir)
    assert_measured(out)
    first = out.stdout.splitlines()[0]
    assert "simulated" in first and "engine: sim" in first
    assert any(line.startswith("t=") for line in out.stdout.splitlines())

    report = read_report(report_dir)
    assert report["schema"] == "speclab.report/1" and report["simulated"] is True
    assert report["exit"]["code"] == out.returncode
    assert (report_dir / "report.md").read_text().startswith("# speclab run")

    records = [r for r in read_records(rec_dir) if not r.warmup and r.ok]
    k2 = report["variants"]["k2"]["epochs"][0]["classes"]
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
    assert report["variants"]["baseline"]["epochs"][0]["classes"]["all"]["acceptance"]["steps"] == 0
    assert {row["variant"] for row in report["memory"]} == {"baseline", "k2"}
    client = report["measurement"]["client"]  # the worst interval of the flag's inputs, measured
    assert client["send_delay_p99_ms"] > 0.0 and client["read_lateness_ms"] > 0.0
    worst = max(w["send_delay_p99_ms"] for w in report["measurement"]["workers"])
    assert worst == pytest.approx(client["send_delay_p99_ms"], abs=1e-3)


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
        assert_measured(out)
        latency = read_report(report_dir)["variants"]["baseline"]["epochs"][0]["classes"]["all"]["latency"]
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
    assert report["variants"]["baseline"]["epochs"][0]["classes"]["all"]["errors"].get("http_5xx", 0) >= 4
    assert "every request failed" in out.stdout


FAKE_VLLM_DIR = Path(__file__).resolve().parents[1] / "servers" / "fake_vllm"


def test_run_drives_the_vllm_path_end_to_end_through_a_fake_vllm(workdir: Path) -> None:
    import os
    import sys

    argv_log = workdir / "argv.log"
    env = {
        "PATH": f"{FAKE_VLLM_DIR}{os.pathsep}{os.environ['PATH']}",
        "SPECLAB_FAKE_GPU": "1",
        "SPECLAB_FAKE_VLLM_PYTHON": sys.executable,
        "SPECLAB_FAKE_VLLM_ARGV_LOG": str(argv_log),
    }
    report_dir = workdir / "r"
    out = run_cli(["run", "smoke", "--variants", "baseline,k2", "--requests", "6", "--report", str(report_dir)],
                  cwd=workdir, env=env)
    assert_measured(out)
    assert "engine: vllm" in out.stdout.splitlines()[0]
    calls = [json.loads(line) for line in argv_log.read_text().splitlines()]
    assert len(calls) == 2
    for call in calls:
        argv = call["argv"]
        assert argv[:2] == ["serve", "meta-llama/Llama-3.1-8B-Instruct"]
        assert argv[argv.index("--host") + 1] == "127.0.0.1"
    spec = [c for c in calls if "--speculative-config" in c["argv"]]
    assert len(spec) == 1
    config = json.loads(spec[0]["argv"][spec[0]["argv"].index("--speculative-config") + 1])
    assert config["method"] == "draft_model" and config["num_speculative_tokens"] == 2
    assert sorted(c["cuda_visible_devices"] for c in calls) == ["0", "1"]
    report = read_report(report_dir)
    assert report["simulated"] is False
    assert report["variants"]["k2"]["epochs"][0]["classes"]["all"]["acceptance"]["source"] == "exact"


def _start_sim(*flags: str) -> tuple[Any, int]:
    import subprocess
    import sys
    import time
    import urllib.request

    from speclab.servers.process import free_port

    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "speclab.sim", "sim-8b", "--host", "127.0.0.1", "--port",
                               str(port), *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 90  # a loaded host starts a simulator slowly
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
            return server, port
        except OSError:
            if time.monotonic() > deadline or server.poll() is not None:
                server.terminate()
                server.wait(timeout=10)
                raise AssertionError("simulator did not start") from None
            time.sleep(0.2)


def test_without_per_request_metrics_queue_prefill_decode_come_from_metrics_histograms(workdir: Path) -> None:
    server, port = _start_sim()  # no --enable-per-request-metrics: responses carry no timing
    try:
        report_dir = workdir / "r"
        out = run_cli(["run", "smoke", "--attach", f"bare=http://127.0.0.1:{port}", "--requests", "12",
                       "--report", str(report_dir)], cwd=workdir)
        assert_measured(out)
        (epoch,) = read_report(report_dir)["variants"]["bare"]["epochs"]
        everything = epoch["classes"]["all"]
        assert everything["timing_source"] == "server_metrics"
        for metric in ("server_queue", "server_prefill", "server_decode"):
            lat = everything["latency"][metric]
            assert lat["count"] >= 10 and lat["p50_ms"] is not None and lat["mean_ms"] > 0, metric
        # Server-wide, with no prompt class: the per-class blocks have none, and say so.
        for name, block in epoch["classes"].items():
            if name != "all":
                assert block["timing_source"] == "none" and "server_decode" not in block["latency"]
        # The decode estimate is at bucket resolution, yet brackets what the clients saw: e2e > decode.
        assert everything["latency"]["server_decode"]["p50_ms"] < everything["latency"]["e2e"]["max_ms"]
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_attach_measures_a_server_speclab_did_not_launch(workdir: Path) -> None:
    server, port = _start_sim("--enable-per-request-metrics")
    try:
        report_dir = workdir / "r"
        out = run_cli(["run", "smoke", "--attach", f"mine=http://127.0.0.1:{port}", "--requests", "6",
                       "--report", str(report_dir)], cwd=workdir)
        assert_measured(out)
        report = read_report(report_dir)
        assert list(report["variants"]) == ["mine"]
        assert report["variants"]["mine"]["epochs"][0]["classes"]["all"]["requests"] == 4  # 6 minus 2 warm-up
        assert server.poll() is None  # speclab leaves a server it did not launch running
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_ctrl_c_mid_run_exits_130_with_a_partial_report_and_a_replayable_recording(workdir: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    report_dir, rec_dir = workdir / "r", workdir / "rec"
    proc = subprocess.Popen(
        [sys.executable, "-m", "speclab.cli.main", "run", "mixed", "--variants", "baseline", "--duration", "60",
         "--report", str(report_dir), "--record", str(rec_dir)],
        cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # Ctrl-C once a request after warm-up has finished
        line = proc.stdout.readline()
        if not line or (line.startswith("t=") and " done 0 " not in line):
            break
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == ExitCode.INTERRUPTED, stdout + stderr
    report = read_report(report_dir)
    assert report["exit"]["code"] == 130
    assert report["variants"]["baseline"]["epochs"][0]["classes"]["all"]["requests"] > 0
    replay_dir = workdir / "replayed"
    out = run_cli(["replay", str(rec_dir), "--report", str(replay_dir)], cwd=workdir)
    assert out.returncode == 0, out.stdout + out.stderr
    replayed = read_report(replay_dir)
    assert replayed["variants"]["baseline"]["epochs"][0]["classes"]["all"]["requests"] == \
        report["variants"]["baseline"]["epochs"][0]["classes"]["all"]["requests"]


def test_api_key_protects_launched_servers_and_never_reaches_reports_or_recordings(workdir: Path) -> None:
    secret = "sk-speclab-test-0123456789abcdef"
    lab = write_lab(workdir / "keyed.toml", server_extra='api_key_env = "SPECLAB_TEST_KEY"')
    report_dir, rec_dir = workdir / "r", workdir / "rec"
    out = run_cli(["run", "smoke", "--lab", str(lab), "--requests", "6", "--report", str(report_dir),
                   "--record", str(rec_dir)], cwd=workdir, env={"SPECLAB_TEST_KEY": secret})
    assert_measured(out)
    assert read_report(report_dir)["variants"]["baseline"]["epochs"][0]["classes"]["all"]["requests"] == 4
    written = [p for p in [*report_dir.rglob("*"), *rec_dir.rglob("*")] if p.is_file()]
    assert any(p.name == "requests.jsonl" for p in written)
    for path in written:
        assert secret not in path.read_text(errors="replace"), path
    assert secret not in out.stdout + out.stderr

    missing = run_cli(["run", "smoke", "--lab", str(lab)], cwd=workdir, env={"SPECLAB_TEST_KEY": ""}, timeout=30)
    assert missing.returncode == ExitCode.BAD_INPUT
    assert "SPECLAB_TEST_KEY is not set" in missing.stderr and "Traceback" not in missing.stderr


def test_a_killed_traffic_worker_exits_6_and_the_accounting_says_what_was_lost(workdir: Path) -> None:
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    report_dir, rec_dir = workdir / "r", workdir / "rec"
    proc = subprocess.Popen(
        [sys.executable, "-m", "speclab.cli.main", "run", "mixed", "--variants", "baseline", "--duration", "10",
         "--workers", "2", "--report", str(report_dir), "--record", str(rec_dir)],
        cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    assert proc.stdout is not None
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:  # traffic is flowing once a progress line is out
        line = proc.stdout.readline()
        if line.startswith("t=") or not line:
            break
    workers = [p for p in psutil.Process(proc.pid).children(recursive=True)
               if any("spawn_main" in part for part in p.cmdline())]
    assert len(workers) == 2, [p.cmdline() for p in workers]
    os.kill(workers[0].pid, signal.SIGKILL)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == ExitCode.MEASUREMENT_INCOMPLETE, stdout + stderr
    assert "exit 6 (measurement_incomplete): traffic worker" in stdout
    report = read_report(report_dir)
    assert report["exit"]["code"] == 6 and report["measurement"]["incomplete"]
    (epoch,) = report["variants"]["baseline"]["epochs"]
    a = epoch["accounting"]
    assert a["planned"] == a["completed"] + a["errored"] + a["warmup"] + a["in_transition"] + a["lost"]
    assert a["lost"] >= 0 and a["completed"] > 0
    assert "measurement incomplete" in (report_dir / "report.md").read_text()
    # The recording keeps the verdict's grounds: its replayed report says the same.
    out = run_cli(["replay", str(rec_dir), "--report", str(workdir / "replayed")], cwd=workdir)
    assert out.returncode == 0, out.stdout + out.stderr
    replayed = read_report(workdir / "replayed")
    assert replayed["measurement"]["incomplete"] == report["measurement"]["incomplete"]
    assert replayed["variants"]["baseline"]["epochs"][0]["accounting"] == a
