"""`--cluster` as bad input: where Ray is not installed, or the address is malformed, the command
exits 2 with one line (naming the extra to install) before anything starts. Needs no Ray."""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest
from click.testing import CliRunner

from speclab.cli.main import cli
from speclab.model.exit_codes import ExitCode


def _without_ray(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "ray" or name.startswith("ray.") else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


@pytest.mark.parametrize("command", [["run", "smoke"], ["accept", "default"], ["sweep", "default"], ["drill", "default"]])
def test_cluster_without_ray_is_one_line_and_exit_2(monkeypatch: pytest.MonkeyPatch, command: list[str]) -> None:
    _without_ray(monkeypatch)
    result = CliRunner().invoke(cli, [*command, "--cluster", "auto", "--engine", "sim"])
    assert result.exit_code == ExitCode.BAD_INPUT, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Ray is not installed" in lines[0] and "speclab[ray]" in lines[0], result.stderr


@pytest.mark.parametrize("value", ["10.0.0.1:10001", "ray://", "ray:/x"])
def test_a_malformed_cluster_address_is_exit_2(value: str) -> None:
    result = CliRunner().invoke(cli, ["run", "smoke", "--cluster", value])
    assert result.exit_code == ExitCode.BAD_INPUT
    assert "expected ray://HOST:PORT" in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_workers_takes_a_number_or_auto() -> None:
    result = CliRunner().invoke(cli, ["run", "smoke", "--workers", "many"])
    assert result.exit_code == ExitCode.BAD_INPUT and "is neither a number of workers nor 'auto'" in result.stderr


def test_a_ray_task_error_is_named_by_its_cause() -> None:
    # Ray's task errors begin with where the task ran and a traceback; the cause says what happened.
    from speclab.traffic.cluster.runner import _first_line

    class TaskError(Exception):
        def __init__(self, cause: BaseException) -> None:
            super().__init__("ray::placement_group() (pid=1, ip=10.0.0.2)\n  File \"x.py\", line 1\n" + str(cause))
            self.cause = cause

    error = TaskError(RuntimeError("System error: Failed to create placement group 'p': no room"))
    assert _first_line(error) == "System error: Failed to create placement group 'p': no room"


def test_no_room_names_what_holds_the_cluster() -> None:
    # The line a run that found no room ends with: the free CPUs, and the groups holding the rest.
    from speclab.traffic.cluster.runner import room_line

    table = {"a1": {"name": "speclab-traffic-7-x", "state": "CREATED"}, "b2": {"name": "", "state": "CREATED"},
             "c3": {"name": "gone", "state": "REMOVED"}, "d4": {"name": "mine", "state": "PENDING"}}
    assert room_line(0.0, table, "mine") == "0 free; placement groups holding CPUs: b2, speclab-traffic-7-x"
    assert room_line(2.0, {}, "mine") == ("2 free, held by no other placement group: "
                                          "the cluster did not schedule the workers in time")
