"""`speclab run --change`: a relaunch mid-run is an epoch boundary, end to end against the simulator."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from speclab.model.exit_codes import ExitCode
from speclab.recording.compare import compare_recordings, records_by_epoch
from speclab.recording.reader import Recording

from ..outcome import assert_measured
from .conftest import read_report, replayable_part, run_cli


@pytest.mark.timeout(300)
def test_a_change_mid_run_reports_two_epochs_a_transition_and_an_ab_that_excludes_it(workdir: Path) -> None:
    report_dir, rec_dir, replayed_dir = workdir / "report", workdir / "rec", workdir / "replayed"
    out = run_cli(["run", "smoke", "--variants", "baseline,k4", "--duration", "20",
                   "--change", "6:k4:num_speculative_tokens=6", "--report", str(report_dir), "--record", str(rec_dir)],
                  cwd=workdir, timeout=240)
    # A simulator starting on a busy 2-core host can starve the client for a while (exit 5 then says
    # so); that verdict is not this test's subject, the epochs are.
    assert_measured(out)
    assert "k4·2 (k=6)" in out.stdout  # the progress lines name the new epoch
    report = read_report(report_dir)

    first, second = report["variants"]["k4"]["epochs"]
    assert (first["epoch"], first["label"], second["epoch"], second["label"]) == (1, "k4", 2, "k4·2 (k=6)")
    assert (first["settings"]["num_speculative_tokens"], second["settings"]["num_speculative_tokens"]) == (4, 6)
    for epoch, k in ((first, 4), (second, 6)):
        acc = epoch["classes"]["all"]["acceptance"]
        assert acc["source"] == "exact" and acc["steps"] > 0
        assert len(acc["per_position"]) == k and len(acc["acceptance_length_distribution"]) == k + 1
        assert epoch["accounting"]["completed"] == epoch["classes"]["all"]["requests"] > 0
    assert [e["epoch"] for e in report["variants"]["baseline"]["epochs"]] == [1]
    assert "classes" not in report["variants"]["k4"], "no variant-level block sums the epochs"

    (moved,) = report["transitions"]
    assert (moved["variant"], moved["from_epoch"], moved["to_epoch"]) == ("k4", 1, 2)
    assert moved["start_s"] == first["end_s"] and moved["end_s"] == second["start_s"] > moved["start_s"]

    # No request counted in both epochs, none in an epoch and the transition: the parts add up.
    recording = Recording.open(rec_dir)
    k4 = [r for r in recording.records if r.variant == "k4" and not r.warmup]
    placed = records_by_epoch(recording)
    ones = [r for r in placed[("k4", 1)] if not r.warmup]
    twos = [r for r in placed[("k4", 2)] if not r.warmup]
    assert len(ones) + len(twos) + moved["requests"] == len(k4)
    assert {r.request_id for r in ones}.isdisjoint(r.request_id for r in twos)
    counted = sum(e["accounting"]["completed"] + e["accounting"]["errored"] for e in (first, second))
    assert counted + moved["requests"] == len(k4)
    assert all(r.sent is not None and r.sent >= moved["end_s"] for r in twos), "sent after the new server answered"
    assert all(r.epoch == 1 for r in ones)
    tags = {line.split(",", 1)[0] for line in (rec_dir / "intervals.hlog").read_text().splitlines()
            if line.startswith("Tag=")}
    assert "Tag=e2e.factual_qa.k4.e1" in tags and "Tag=e2e.factual_qa.k4.e2" in tags

    # A/B: both windows lie wholly outside the transition, each beside the baseline over the same span.
    ab = report["ab"]["k4"]
    cur, prev = ab["current"], ab["previous"]
    assert (cur["epoch"], prev["epoch"]) == (2, 1) and cur["intervals"] > 0
    assert prev["intervals"] == cur["intervals"] or prev["note"]
    assert prev["last_interval"] + 1 <= moved["start_s"] and cur["first_interval"] >= moved["end_s"]
    for side in (cur, prev):
        assert side["own"]["all"]["errors"] == {}, "the restart's failures are in neither window"
        assert side["own"]["all"]["window_s"] == side["baseline"]["all"]["window_s"]
    rows = {row["key"]: row for row in ab["rows"]}
    assert rows["rej"]["vs_previous"].endswith(" pts") and rows["e2e_p99"]["vs_previous"].endswith("%")
    md = (report_dir / "report.md").read_text()
    assert "## Config epochs" in md and "| k4·2 (k=6) | all |" in md and "transition k4 epoch 1 → 2" in md

    # replay --report and compare work per epoch, and the replay equals the live report.
    out = run_cli(["replay", str(rec_dir), "--report", str(replayed_dir)], cwd=workdir)
    assert out.returncode == ExitCode.OK, out.stdout + out.stderr
    replayed = read_report(replayed_dir)
    assert replayed["events"] and [e["kind"] for e in report["events"]].count("relaunch") == 1
    assert replayable_part(replayed) == replayable_part(report), "live and replayed reports differ"
    assert replayed["transitions"] == report["transitions"]
    for ours, theirs in zip(report["variants"]["k4"]["epochs"], replayed["variants"]["k4"]["epochs"], strict=True):
        assert ours["accounting"] == theirs["accounting"] and ours["label"] == theirs["label"]
        assert ours["classes"]["all"]["acceptance"] == theirs["classes"]["all"]["acceptance"]
    result = compare_recordings(recording, recording)
    assert set(result["variants"]) == {"baseline", "k4", "k4·2"}
    assert result["epochs"]["k4·2"]["label_a"] == "k4·2 (k=6)"
    assert result["outputs"]["k4·2"]["differing"] == 0
    json.dumps(result)


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("soon:k4:num_speculative_tokens=6", "AT must be seconds"),
        ("5:k9:num_speculative_tokens=6", "no variant 'k9'"),
        ("5:k4:temperature=0.5", "cannot change 'temperature'"),
        ("5:k4:num_speculative_tokens=0", "--change '5:k4:num_speculative_tokens=0'"),
        ("5:k4", "expected AT:VARIANT:KEY=VALUE"),
        ("inf:k4:num_speculative_tokens=6", "AT must be 0 to 2592000 seconds"),
        ("1e12:k4:num_speculative_tokens=6", "AT must be 0 to 2592000 seconds"),
        ("5:k4:num_speculative_tokens=1000", "at most 64"),
    ],
)
def test_a_bad_change_is_refused_before_anything_starts(workdir: Path, spec: str, says: str) -> None:
    out = run_cli(["run", "smoke", "--variants", "baseline,k4", "--change", spec], cwd=workdir, timeout=60)
    assert out.returncode == ExitCode.BAD_INPUT, out.stdout + out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], out.stderr
    assert not any(line.startswith("t=") for line in out.stdout.splitlines())


@pytest.mark.timeout(240)
def test_a_relaunch_that_never_answers_keeps_its_transition_open_and_exits_3_after_the_report(workdir: Path) -> None:
    report_dir = workdir / "report"
    # Valid for the lab file, refused by the engine at start-up (as vLLM refuses it).
    change = "2:k4:enable_chunked_prefill=false,max_num_batched_tokens=1024"
    out = run_cli(["run", "smoke", "--variants", "baseline,k4", "--duration", "8", "--change", change,
                   "--report", str(report_dir)], cwd=workdir, timeout=200)
    assert out.returncode == ExitCode.SERVER_NOT_READY, out.stdout + out.stderr
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("exit 3") and f"--change {change}" in last and "max_num_batched_tokens (1024)" in last
    report = read_report(report_dir)
    (moved,) = report["transitions"]
    assert moved["end_s"] is None and moved["errors"] > 0
    (only,) = report["variants"]["k4"]["epochs"]
    assert only["end_s"] == moved["start_s"] and only["classes"]["all"]["errors"] == {}
    assert report["variants"]["baseline"]["epochs"][0]["classes"]["all"]["requests"] > 0, "the rest was measured"


@pytest.mark.timeout(240)
def test_a_closed_loop_relaunch_holds_the_variant_instead_of_flooding_connect_errors(workdir: Path) -> None:
    """Closed loop, a slot resends the moment its request ends: against a stopped server that was a
    connect error every few milliseconds (947 in a 6.6 s transition here). The slots now wait."""
    report_dir = workdir / "report"
    out = run_cli(["run", "smoke", "--variants", "baseline,k4", "--duration", "12", "--concurrency", "4",
                   "--change", "4:k4:num_speculative_tokens=6", "--report", str(report_dir)], cwd=workdir, timeout=200)
    assert out.returncode in (ExitCode.OK, ExitCode.MEASUREMENT_INVALID), out.stdout + out.stderr
    report = read_report(report_dir)
    (moved,) = report["transitions"]
    assert moved["end_s"] is not None and moved["errors"] <= 4, moved  # at most the slots in flight
    first, second = report["variants"]["k4"]["epochs"]
    assert second["accounting"]["completed"] > 0 and second["accounting"]["lost"] == 0
    assert first["accounting"]["in_transition"] == moved["requests"] <= 8
