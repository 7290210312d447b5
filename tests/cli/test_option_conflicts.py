"""Options that do not apply are refused, never dropped: `gateway LAB --socket`, `replay`'s modes,
`lab show --engine`, and `--who` only where a change is made. Bad input is one line and exit 2."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner, Result

from speclab.cli.gateway import gateway
from speclab.cli.main import cli
from speclab.gateway import config
from speclab.model import limits as L
from speclab.model.paths import resolve
from speclab.recording import Recording
from speclab.recording.replay import ReplaySource


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def _one_line_bad_input(result: Result) -> str:
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and result.stderr.startswith("speclab: error: "), result.stderr
    return result.stderr


# -- gateway LAB --socket ---------------------------------------------------------------------------


@pytest.mark.parametrize("extra, named", [
    (["--weight", "k4=10"], "--weight"),
    (["--tenant", "A=k4", "--route", "/v1/completions=k4"], "--tenant, --route"),
    (["--port", "8080", "--duration", "5"], "--port, --duration"),
    (["--engine", "sim", "--report", "gw"], "--report, --engine"),
    (["--variants", "baseline", "--tenant-header", "X-Team", "--haproxy", "haproxy"],
     "--variants, --tenant-header, --haproxy"),
])
def test_attaching_refuses_the_options_that_only_shape_a_gateway_it_starts(
        tmp_path: Path, extra: list[str], named: str) -> None:
    err = _one_line_bad_input(_invoke("gateway", "default", "--socket", str(tmp_path / "gw.sock"), *extra))
    assert f"; {named} only apply when starting one" in err and "gateway set|weight|rollback" in err
    assert not (tmp_path / "gw").exists()


def test_attaching_needs_no_local_haproxy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(config, "SBIN_DIRS", ())
    err = _one_line_bad_input(_invoke("gateway", "default", "--socket", str(tmp_path / "none.sock")))
    assert "no such socket" in err and "not installed" not in err


def test_who_is_offered_only_where_a_change_is_made() -> None:
    assert isinstance(gateway, click.Group)

    def options(name: str) -> set[str]:
        return {opt for param in gateway.commands[name].params for opt in param.opts}

    for name in ("set", "weight", "rollback"):
        assert {"--who", "--socket", "--report"} <= options(name)
    assert "--who" not in options("show") and {"--socket", "--report", "--json"} <= options("show")
    refused = _invoke("gateway", "show", "--who", "me", "--socket", "gw.sock")
    assert refused.exit_code == 2 and "No such option '--who'" in refused.output


# -- replay -----------------------------------------------------------------------------------------


class _FakeApp:
    return_code = 0

    def run(self) -> None:
        pass


@pytest.fixture
def app_speeds(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Replay in the app without a terminal: the speed each ReplaySource was given."""
    import speclab.ui.app

    seen: list[float] = []

    def create_app(source: Any, controls: Any, *, replay: Any = None, **_: Any) -> _FakeApp:
        seen.append(replay.speed)
        return _FakeApp()

    monkeypatch.setattr(speclab.ui.app, "create_app", create_app)
    monkeypatch.setattr("speclab.cli.commands.require_terminal", lambda *_: None)  # the fake app needs none
    return seen


@pytest.mark.parametrize("speed", ["20", "1000", "0.1", "0", "-1", "nan", "inf"])
def test_replay_speed_outside_the_supported_range_is_refused(app_speeds: list[float], speed: str) -> None:
    err = _one_line_bad_input(_invoke("replay", "sample", "--speed", speed))
    assert "--speed: expected a number at least 0.25 and at most 16, got" in err
    assert app_speeds == []


def test_replay_speed_inside_the_range_reaches_the_app_unchanged(app_speeds: list[float]) -> None:
    for speed in ("0.25", "3", "16"):
        assert _invoke("replay", "sample", "--speed", speed).exit_code == 0
    assert app_speeds == [0.25, 3.0, 16.0]


def test_the_replay_range_has_one_source_of_truth() -> None:
    assert (L.MIN_REPLAY_SPEED, L.MAX_REPLAY_SPEED) == (0.25, 16.0)
    rec = Recording.open(resolve("sample", "recordings"))
    assert ReplaySource(rec, speed=1e9).speed == L.MAX_REPLAY_SPEED
    assert ReplaySource(rec, speed=1e-9).speed == L.MIN_REPLAY_SPEED
    limits_doc = (Path(__file__).resolve().parents[2] / "docs" / "limits.md").read_text()
    assert "`replay --speed` 0.25–16" in limits_doc


@pytest.mark.parametrize("args, says", [
    (["--lab", "nonexist", "--report", "{out}"], "replay: --lab applies only with --refire"),
    (["--engine", "sim", "--force", "--report", "{out}"], "replay: --engine, --force apply only with --refire"),
    (["--speed", "2", "--report", "{out}"], "replay: --speed applies only when replaying in the app"),
    (["--lab", "default"], "replay: --lab applies only with --refire"),
    (["--refire", "--speed", "2", "--report", "{out}"], "replay: --speed applies only when replaying in the app"),
])
def test_replay_refuses_options_of_another_mode(tmp_path: Path, app_speeds: list[float], args: list[str],
                                                says: str) -> None:
    out = tmp_path / "report"
    err = _one_line_bad_input(_invoke("replay", "sample", *(a.replace("{out}", str(out)) for a in args)))
    assert says in err
    assert not out.exists() and app_speeds == []


def test_replay_defaults_spelled_out_are_not_refused(tmp_path: Path) -> None:
    done = _invoke("replay", "sample", "--report", str(tmp_path / "r"), "--speed", "1", "--engine", "auto")
    assert done.exit_code == 0, done.output
    assert (tmp_path / "r" / "report.json").exists()


# -- lab show --engine ------------------------------------------------------------------------------


def test_lab_show_engine_vllm_without_vllm_is_refused_as_run_refuses_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no `vllm` executable
    err = _one_line_bad_input(_invoke("lab", "show", "default", "--engine", "vllm"))
    assert "--engine vllm: no `vllm` executable on PATH" in err
    sim = _invoke("lab", "show", "default", "--engine", "sim")
    assert sim.exit_code == 0 and "# this machine runs the simulator" in sim.output
    auto = _invoke("lab", "show", "default")
    assert auto.exit_code == 0 and "# this machine runs the simulator (" not in auto.output.split("\n")[0]


@pytest.mark.parametrize(("value", "why"), [(",", "expected comma-separated variant names"), ("", "expected"),
                                            ("k2,k2", "k2 named twice")])
def test_a_variants_list_that_names_nothing_or_one_twice_is_refused(value: str, why: str) -> None:
    err = _one_line_bad_input(_invoke("run", "smoke", "--engine", "sim", "--variants", value))
    assert f"--variants {value!r}: {why}" in err


@pytest.mark.parametrize("command", [["run", "smoke"], ["sweep", "default", "--quick"], ["drill", "default", "--quick"],
                                     ["accept", "default"]], ids=["run", "sweep", "drill", "accept"])
@pytest.mark.parametrize("workers", ["0", "129"])
def test_workers_out_of_range_is_refused_before_the_banner(command: list[str], workers: str) -> None:
    result = _invoke(*command, "--engine", "sim", "--workers", workers)
    err = _one_line_bad_input(result)
    assert f"--workers: expected a number at least 1 and at most 128, got {workers}" in err
    assert result.stdout == ""  # no banner: nothing was started


@pytest.mark.parametrize("command", [["drill", "default", "--quick"], ["gateway", "open", "default"]], ids=["drill", "gateway"])
def test_a_report_directory_that_cannot_be_written_is_refused_before_any_server(command: list[str], tmp_path: Path) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("mine")
    err = _one_line_bad_input(_invoke(*command, "--engine", "sim", "--report", str(taken)))
    assert f"--report {taken}: {taken} exists and is not a directory" in err
    assert taken.read_text() == "mine"


@pytest.mark.parametrize(("state", "says"), [
    ({"socket": 5}, "socket is 5, not a str"),
    ({"socket": None}, "socket is None, not a str"),
    ({"servers": []}, "servers is [], not a dict"),
])
def test_a_damaged_gateway_state_file_names_the_field(tmp_path: Path, state: dict[str, Any], says: str) -> None:
    import json

    whole = {"schema": "speclab.gateway/1", "lab": "x", "url": "u", "socket": "s", "config": "c", "tenants_map": "t",
             "routes_map": "r", "servers": {}, "routing": {}}
    (tmp_path / "gateway.json").write_text(json.dumps({**whole, **state}))
    err = _one_line_bad_input(_invoke("gateway", "show", "--report", str(tmp_path)))
    assert f"gateway.json: {says}" in err
    (tmp_path / "gateway.json").write_text(json.dumps({"schema": "speclab.gateway/1", "lab": "x"}))
    assert "no url, socket, config, tenants_map, routes_map, servers, routing" in _one_line_bad_input(
        _invoke("gateway", "show", "--report", str(tmp_path)))


def test_small_refusals_say_what_is_wrong(tmp_path: Path) -> None:
    both = _one_line_bad_input(_invoke("gateway", "show", "--socket", str(tmp_path / "s"), "--report", str(tmp_path)))
    assert "--socket PATH or its --report DIR, not both" in both
    kit = _one_line_bad_input(_invoke("monitoring-kit", str(tmp_path / "kit"), "--scrape-interval", "1m30s"))
    assert "'1m30s' is not a duration such as 15s or 1m (one unit: s or m)" in kit and "1h" not in kit
    same = _invoke("compare", "sample", "sample", "--report", str(tmp_path / "cmp"))
    assert same.exit_code == 0 and "warning: sample and sample are the same recording" in same.stderr


def test_a_change_to_true_is_no_draft_length() -> None:
    err = _one_line_bad_input(_invoke("run", "smoke", "--engine", "sim", "--change", "5:k4:k=true"))
    assert "num_speculative_tokens: expected an integer at least 1 and at most 64, got True" in err
