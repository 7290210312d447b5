"""Under a load the host cannot carry, every planned request is still accounted for, per variant."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from speclab.model.scenario import load_scenario
from speclab.traffic import build_plan

from ..outcome import assert_measured
from .conftest import read_report, run_cli

RATE = 150.0  # per variant: two variants' traffic, two simulators and speclab share two cores
DURATION_S = 4.0


def test_every_planned_request_is_recorded_once_and_counted_when_the_host_is_saturated(workdir: Path) -> None:
    report_dir, rec_dir = workdir / "report", workdir / "rec"
    out = run_cli(["run", "mixed", "--variants", "baseline,k4", "--rate", f"{RATE:g}", "--duration", f"{DURATION_S:g}",
                   "--report", str(report_dir), "--record", str(rec_dir)], cwd=workdir, timeout=110)
    assert_measured(out)
    planned = {req.request_id for _, req in
               build_plan(load_scenario("mixed"), duration_s=DURATION_S, rate=RATE).offsets()}
    assert len(planned) > RATE * DURATION_S * 0.7
    lines = [json.loads(line) for line in (rec_dir / "requests.jsonl").read_text().splitlines() if line.strip()]
    report = read_report(report_dir)
    for variant in ("baseline", "k4"):
        ids = Counter(r["request_id"] for r in lines if r["variant"] == variant)
        assert set(ids) == planned, (variant, len(planned - set(ids)), len(set(ids) - planned))
        assert max(ids.values()) == 1, variant  # each once
        (epoch,) = report["variants"][variant]["epochs"]
        acc = epoch["accounting"]
        assert acc["planned"] == len(planned) and acc["lost"] == 0, (variant, acc)
        assert acc["completed"] + acc["errored"] + acc["warmup"] + acc["in_transition"] == len(planned), (variant, acc)
        ok = sum(1 for r in lines if r["variant"] == variant and r["error_kind"] is None and r["done"] is not None
                 and not r["warmup"])
        assert acc["completed"] == ok, (variant, acc, ok)
