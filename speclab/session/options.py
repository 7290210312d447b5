"""What a run was asked to do: the options every front end collects, resolved into files and a plan."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from speclab.model.errors import InputError
from speclab.model.lab import Lab, load_lab
from speclab.model.paths import resolve
from speclab.model.scenario import Scenario
from speclab.model.scenario import load_scenario as read_scenario
from speclab.servers.backends import AUTO, EngineRequest

DEFAULT_LAB = "default"


@dataclass(frozen=True)
class RunOptions:
    scenario: str
    lab: str | None = None
    engine: EngineRequest = AUTO
    attach: tuple[str, ...] = ()
    headers: tuple[str, ...] = ()
    api_key_env: str | None = None
    record_path: Path | None = None
    report_dir: Path | None = None
    duration: float | None = None
    requests: int | None = None
    rate: float | None = None
    concurrency: int | None = None
    seed: int | None = None
    workers: int | None = 1  # None: one per core (locally) or per CPU of the cluster
    cluster: str | None = None  # --cluster ray://ADDRESS|auto: traffic workers as Ray actors
    sequential: bool = False
    variants: tuple[str, ...] | None = None
    force: bool = False
    changes: tuple[str, ...] = ()  # --change AT:VARIANT:KEY=VALUE[,KEY=VALUE], parsed by the session
    drain_timeout_s: float = 10.0
    keep_records: bool = True  # every record and sample in lists (sweep cells); False for run and lab
    keep_intervals: bool = True  # every closed interval (the report's timeline); False for the all-day lab
    metrics_port: int | None = None  # --metrics-port: serve speclab's own Prometheus metrics
    metrics_host: str = "127.0.0.1"
    metrics_hold_s: float = 0.0  # keep serving the final metrics this long after the run (a last scrape)
    time_scale: float | None = None  # --time-scale S; None: auto (speclab.session.time_scale)


def load_scenario(name_or_path: str | Path) -> tuple[Scenario, Path]:
    """The scenario with its prompts and schema files read, and the path it came from."""
    return read_scenario(name_or_path), resolve(name_or_path, "scenarios")


def load_lab_for(options: RunOptions, scenario: Scenario, scenario_path: Path) -> Lab | None:
    """The lab named on the command line, else the scenario's inline [lab], else the default lab
    (none when only --attach servers are measured)."""
    if options.lab:
        return load_lab(options.lab)
    if scenario.lab is not None:
        try:
            return Lab.model_validate(scenario.lab)
        except ValueError as error:
            raise InputError(f"{scenario_path}: lab: {error}") from None
    if options.attach:
        return None
    return load_lab(DEFAULT_LAB)


def parse_headers(specs: tuple[str, ...], api_key_env: str | None) -> tuple[dict[str, str], str | None]:
    """``--header K=V`` and ``--api-key-env VAR`` -> headers for attached servers, and the key itself."""
    headers: dict[str, str] = {}
    for spec in specs:
        key, sep, value = spec.partition("=")
        if not sep or not key.strip():
            raise InputError(f"--header {key!r}: expected K=V")
        headers[key.strip()] = value
    api_key = None
    if api_key_env:
        api_key = os.environ.get(api_key_env)
        if not api_key:
            raise InputError(f"API key: environment variable {api_key_env} is not set (named by --api-key-env "
                             "or the lab's server.api_key_env)")
        headers["Authorization"] = f"Bearer {api_key}"
    return headers, api_key
