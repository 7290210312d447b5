"""`speclab monitoring-kit DIR`: write the kit, say what is in it, optionally run promtool over it."""

from __future__ import annotations

import json
from pathlib import Path

import click
import yaml

from speclab.model.exit_codes import ExitCode
from speclab.monitoring import kit as kit_files
from speclab.monitoring import promtool


def _summary(directory: Path) -> str:
    recording = alerts = 0
    for path in directory.glob("*.rules.yml"):
        for group in yaml.safe_load(path.read_text())["groups"]:
            for rule in group["rules"]:
                alerts += "alert" in rule
                recording += "record" in rule
    tests = len(list(directory.glob("*.test.yml")))
    board = json.loads((directory / kit_files.DASHBOARD_FILE).read_text())
    panels = sum(p["type"] != "row" for p in board["panels"])
    notes = len(board["annotations"]["list"]) - 1
    return (f"{recording} recording and {alerts} alerting rules, {tests} promtool test files, "
            f"a dashboard of {panels} panels with {notes} config-change annotations")


def write_monitoring_kit(directory: Path, *, force: bool, scrape_interval: str, check: bool) -> int:
    scrape_s = kit_files.scrape_interval(scrape_interval)
    if check:
        promtool.find_promtool()
    written = kit_files.write_kit(directory, force=force, scrape_s=scrape_s)
    for path in written:
        click.echo(str(path))
    click.echo(f"monitoring kit: {_summary(directory)} (scrape interval {scrape_interval})")
    if not check:
        return int(ExitCode.OK)
    failed = False
    for result in promtool.check_kit(directory):
        click.echo(f"{result.command}: {'ok' if result.ok else 'FAILED'}")
        if not result.ok:
            failed = True
            click.echo(result.output, err=True)
    return int(ExitCode.INTERNAL_ERROR if failed else ExitCode.OK)
