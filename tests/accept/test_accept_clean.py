"""A clean pair passes every stage of the quick profile, with a report and JUnit a CI can read."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from speclab.gates.result import STAGE_ORDER
from speclab.model.errors import InputError
from speclab.model.exit_codes import ExitCode
from speclab.session.accept import AcceptOptions, run_accept_stages, selected_stages


async def test_clean_pair_passes_every_stage(tmp_path: Path) -> None:
    out = io.StringIO()
    code = await run_accept_stages(AcceptOptions(lab="default", engine="sim", report_dir=tmp_path), out=out)
    text = out.getvalue()
    assert code == ExitCode.OK, text
    assert text.splitlines()[0].startswith("speclab ") and "SIMULATED" in text.splitlines()[0]
    assert text.rstrip().endswith("exit 0 (ok): every stage passed")

    report = json.loads((tmp_path / "report.json").read_text())
    assert report["command"] == "accept" and report["simulated"] is True
    assert [g["stage"] for g in report["gates"]] == list(STAGE_ORDER)
    assert all(g["status"] == "passed" and g["summary"] for g in report["gates"])
    assert report["exit"]["code"] == 0 and report["profile"]["name"] == "quick"
    metrics = report["stage_metrics"]
    assert metrics["equivalence"]["greedy_identical"] == {"k2": 29, "k4": 29}
    assert set(metrics["equivalence"]["p_values"]) == {"k2", "k4"}
    assert metrics["structured"]["failure_rate_pct"]["k4"]["tool_call"] == 0.0
    assert set(metrics["latency_curve"]["curve_ms"]["baseline"]) == {"1", "4"}
    assert report["variant_tables_from"] == "canary"
    canary_all = report["variants"]["k4"]["epochs"][0]["classes"]["all"]
    assert canary_all["requests"] == 48 and canary_all["acceptance"]["acceptance_length_mean"] > 1.0
    assert "SIMULATED" in (tmp_path / "report.md").read_text()

    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None and suite.get("tests") == "7" and suite.get("failures") == "0"
    assert [c.get("name") for c in suite.iter("testcase")] == list(STAGE_ORDER)


def test_stage_subset_keeps_the_checklist_order() -> None:
    assert selected_stages(("canary", "golden")) == ("golden", "canary")
    assert selected_stages(None) == STAGE_ORDER
    with pytest.raises(InputError, match="unknown stage speed"):
        selected_stages(("speed",))
    for empty in (("",), ("golden", ""), ("", "")):  # `--stages ''`, `golden,`, `,`: refused, never "every stage"
        with pytest.raises(InputError, match="a stage name is empty"):
            selected_stages(empty)


async def test_ctrl_c_stops_servers_and_writes_a_partial_report(tmp_path: Path) -> None:
    import asyncio
    import os
    import signal

    import aiohttp

    class CtrlCOnCanary(io.StringIO):
        """Ctrl-C once the canary's traffic is running: waits on the event, not on a clock."""

        def write(self, text: str) -> int:
            if "stage canary: running" in text:
                asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGINT)
            return super().write(text)

    out = CtrlCOnCanary()
    code = await run_accept_stages(
        AcceptOptions(lab="default", engine="sim", report_dir=tmp_path, stages=("golden", "canary"),
                      overrides={"canary": {"requests": 400, "rate": 8.0}}),
        out=out,
    )
    assert code == ExitCode.INTERRUPTED, out.getvalue()
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["exit"]["code"] == 130
    assert report["gates"][-1]["status"] == "skipped" and "interrupted" in report["gates"][-1]["summary"]
    urls = re.findall(r"http://127\.0\.0\.1:\d+", out.getvalue())
    assert len(urls) == 3
    async with aiohttp.ClientSession() as session:
        for url in urls:
            with pytest.raises(aiohttp.ClientConnectionError):
                await session.get(f"{url}/health")
