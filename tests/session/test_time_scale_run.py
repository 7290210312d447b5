"""`speclab run` under the simulator's time scale, end to end over real simulator processes.

Nothing here reads wall-clock speed: modelled durations are checked against the simulator's own
per-request modelled figures (its ``metrics`` decode time), and a slow host is the simulator's
``slow_host`` fault, which really holds its loop so its own clock trails.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from speclab.model.exit_codes import ExitCode
from speclab.model.records import RequestRecord

from ..outcome import SATURATED, assert_measured
from .conftest import read_records, read_report, run_cli, write_lab


def _client_over_server_tpot(records: list[RequestRecord]) -> float:
    """Median of the client's TPOT (modelled, after the division) over the simulator's own modelled
    decode time per token, per request: about 1 when the division is right, about S when it is not."""
    ratios = [r.tpot / (r.server_decode_ms / 1000.0 / (r.output_tokens - 1)) for r in records
              if r.ok and not r.warmup and r.tpot and r.server_decode_ms and r.output_tokens > 2]
    assert len(ratios) >= 5, ratios
    return statistics.median(ratios)


def test_a_run_at_scale_2_reads_in_modelled_time_like_one_at_scale_1(workdir: Path) -> None:
    runs = {}
    for scale in ("2", "1"):
        report_dir, rec_dir = workdir / f"report{scale}", workdir / f"rec{scale}"
        out = run_cli(["run", "smoke", "--engine", "sim", "--variants", "k4", "--time-scale", scale,
                       "--report", str(report_dir), "--record", str(rec_dir)], cwd=workdir, timeout=150)
        assert_measured(out)
        runs[scale] = (out, read_report(report_dir), rec_dir)
    out, report, rec_dir = runs["2"]
    assert "time scale 2" in out.stdout.splitlines()[0]
    assert report["time_scale"] == 2.0 and report["simulator_clock"]["time_scale"] == 2.0
    assert json.loads((rec_dir / "manifest.json").read_text())["time_scale"] == 2.0
    assert "**Time scale 2**" in (workdir / "report2" / "report.md").read_text()
    assert runs["1"][1]["time_scale"] == 1.0 and "time scale" not in runs["1"][0].stdout.splitlines()[0]
    scaled, plain = _client_over_server_tpot(read_records(rec_dir)), _client_over_server_tpot(read_records(runs["1"][2]))
    assert 0.6 < scaled < 1.6 and 0.6 < plain < 1.6, (scaled, plain)
    assert 0.6 < scaled / plain < 1.6
    # The schedule is the same in modelled time: 20 requests at 5 req/s span about 4 modelled seconds.
    sent = sorted(r.intended for r in read_records(rec_dir))
    assert len(sent) == 20 and 3.0 < sent[-1] - sent[0] < 5.0


def test_a_simulator_that_trails_its_clock_most_of_the_run_exits_5_naming_it_and_a_scale(workdir: Path) -> None:
    lab = write_lab(workdir / "slow.toml", variant_extra='[[variants]]\nname = "k2"\nnum_speculative_tokens = 2\n'
                                                         'sim_faults = ["slow_host=1.5"]\n')
    scenario = workdir / "closed.toml"
    scenario.write_text('name = "closed"\nseed = 1\nduration_s = 8\nendpoint = "completions"\n'
                        '[arrival]\nprocess = "concurrency"\nconcurrency = 2\n'
                        '[classes.qa]\nweight = 1\ntemperature = 0\nmax_tokens = 64\nprompts = ["Tell me a story."]\n')
    report_dir = workdir / "report"
    out = run_cli(["run", str(scenario), "--lab", str(lab), "--engine", "sim", "--variants", "k2",
                   "--time-scale", "1", "--report", str(report_dir)], cwd=workdir, timeout=150)
    last = out.stdout.strip().splitlines()[-1]
    assert out.returncode == ExitCode.MEASUREMENT_INVALID, out.stdout + out.stderr
    if SATURATED not in last:  # a starved client is judged first, and honestly
        assert "the simulator, not the client, fell behind" in last and "k2" in last
        assert "--time-scale" in last and "would fit" in last
    assert "SIM BEHIND (k2)" in out.stdout
    report = read_report(report_dir)
    clock = report["simulator_clock"]["variants"]["k2"]
    assert len(clock["trailing_intervals"]) > clock["intervals"] / 2
    assert any(row["sim_trailing"] == ["k2"] for row in report["timeline"])
    assert "Simulator trailed its modelled clock" in (report_dir / "report.md").read_text()


def test_a_scale_below_1_or_for_a_real_server_is_one_line_exit_2(workdir: Path) -> None:
    for args, cause in ((["run", "smoke", "--time-scale", "0.5"], "must be >= 1"),
                        (["run", "smoke", "--time-scale", "fast"], "expected a number"),
                        (["run", "smoke", "--engine", "vllm", "--time-scale", "2"], ""),
                        (["run", "smoke", "--attach", "http://127.0.0.1:9", "--time-scale", "2"], "starts no simulator"),
                        (["accept", "default", "--time-scale", "0"], "must be >= 1"),
                        (["sweep", "default", "--quick", "--time-scale", "0.9"], "must be >= 1")):
        out = run_cli(args, cwd=workdir)
        assert out.returncode == ExitCode.BAD_INPUT, (args, out.stdout, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("speclab: error: --time-scale"), (args, out.stderr)
        assert cause in lines[0]
