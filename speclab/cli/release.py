"""`speclab release-notes DIR...`: one release note from accept, sweep and drill report directories."""

from __future__ import annotations

from pathlib import Path

import click

from speclab.model.exit_codes import ExitCode


def release_notes(directories: tuple[Path, ...], out: Path) -> int:
    from speclab.headless.release import write_release

    doc, paths = write_release(directories, out)
    for path in paths[:2]:
        click.echo(f"release note: {path}")
    if len(paths) > 2:
        click.echo(f"plots copied: {', '.join(p.name for p in paths[2:])}")
    for missing in doc["missing"]:
        click.echo(f"warning: no {missing['kind']} report given; the note says so ({missing['made_by']} writes one)",
                   err=True)
    for warning in doc.get("warnings", []):
        click.echo(f"warning: {warning}", err=True)
    click.echo(f"verdict: {doc['verdict']}")
    return int(ExitCode.OK)
