"""The canary stage through a real HAProxy when the lab gives a speculative pool a share: only that
share reaches it, the share is set live as a change, structured-output failures keep their
samples and every spike says which change it followed."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import psutil
import pytest

from speclab.gateway import config
from speclab.model.errors import InputError
from speclab.model.exit_codes import ExitCode
from speclab.recording.reader import read_recording
from speclab.session.accept import AcceptOptions, run_accept_stages
from tests.gateway.conftest import haproxy_or_skip

LAB = Path(__file__).resolve().parents[2] / "labs" / "default.toml"


def _lab(tmp_path: Path, faults: str = "") -> Path:
    text = LAB.read_text()
    head, _, _ = text.partition("[[variants]]\nname = \"k2\"")  # baseline and k4 only: a quicker start
    head = head.replace("[[variants]]\nname = \"baseline\"", "[[variants]]\nname = \"baseline\"", 1)
    k4 = '[[variants]]\nname = "k4"\nnum_speculative_tokens = 4\n' + (f"sim_faults = [{faults}]\n" if faults else "")
    gateway = '[gateway]\ntenants = { A = "baseline", C = "canary" }\nweights = { k4 = 30 }\n'
    path = tmp_path / "gwcanary.toml"
    path.write_text(head.replace('name = "default"', 'name = "gwcanary"') + k4 + gateway)
    return path


async def _accept(tmp_path: Path, lab: Path, **options: Any) -> tuple[ExitCode, dict[str, Any], str]:
    haproxy_or_skip()
    out = io.StringIO()
    before = {p.pid for p in psutil.process_iter()}
    code = await run_accept_stages(AcceptOptions(lab=str(lab), engine="sim", report_dir=tmp_path / "report",
                                                 stages=("canary",), **options), out=out)
    leaked = [p for p in psutil.process_iter(["pid", "cmdline"]) if p.pid not in before
              and any(str(tmp_path) in part or "haproxy" in part for part in (p.info["cmdline"] or []))]
    assert leaked == [], leaked
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    return code, next(g for g in report["gates"] if g["stage"] == "canary"), out.getvalue()


async def test_the_canary_runs_through_the_gateway_with_the_configured_share(tmp_path: Path) -> None:
    # Under a time scale and --record, as the other load stages run: the recording is the canary's.
    code, gate, text = await _accept(tmp_path, _lab(tmp_path), record_path=tmp_path / "rec", time_scale=2.0)
    assert code == ExitCode.OK, text
    recording = read_recording(tmp_path / "rec")
    assert recording.complete and recording.manifest["time_scale"] == 2.0
    assert len(recording.records) == 2 * 48 and {r.variant for r in recording.records} <= {"baseline", "k4"}
    assert f"recording (canary run): {tmp_path / 'rec'}" in text
    metrics = gate["metrics"]
    assert metrics["through_gateway"] is True and metrics["shares"] == {"k4": 30} and metrics["tenants"] == ["C"]
    backends = metrics["backends"]
    total = backends["baseline"] + backends["k4"]
    assert total == 2 * 48 and 0.1 < backends["k4"] / total < 0.5, backends  # about the 30% share
    assert [c["kind"] for c in metrics["changes"]] == ["weight_change"]
    assert "through HAProxy" in text and "k4 0% -> 30%" in text
    directory = tmp_path / "report" / "gateway"
    assert (directory / "haproxy.cfg").exists() and (directory / "gateway-api.yaml").exists()
    assert "server k4" in (directory / "haproxy.cfg").read_text() and not (directory / "haproxy.sock").exists()
    assert "p99_ratio" in metrics and metrics["p99_ratio"]["k4"] > 0


async def test_structured_failures_through_the_gateway_fail_the_canary_with_samples_and_linked_spikes(
        tmp_path: Path) -> None:
    code, gate, text = await _accept(tmp_path, _lab(tmp_path, '"json_corruption=1.0"'))
    assert code == ExitCode.CANARY, text
    assert any(d.startswith("FAIL k4: structured-output failures") for d in gate["details"]), gate["details"]
    samples = gate["metrics"]["structured_samples"]
    assert samples and all(s["backend"] == "k4" and len(s["output"]) <= 121 for s in samples)
    spikes = [s for s in gate["metrics"]["spikes"] if "structured-output failures" in s["what"]]
    assert spikes and all(s["after_change"]["kind"] == "weight_change" for s in spikes)
    assert "s after canary shares: k4 0% -> 30%" in spikes[0]["text"]


async def test_a_gateway_canary_without_haproxy_is_bad_input_before_any_server(tmp_path: Path,
                                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(config, "SBIN_DIRS", ())
    out = io.StringIO()
    with pytest.raises(InputError, match=r"haproxy is not installed.*apt-get install -y haproxy"):
        await run_accept_stages(AcceptOptions(lab=str(_lab(tmp_path)), engine="sim", report_dir=tmp_path / "r",
                                              stages=("canary",)), out=out)
    assert "servers ready" not in out.getvalue()
