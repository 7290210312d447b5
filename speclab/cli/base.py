"""What every command shares: a group with a default command, and one line per known error."""

from __future__ import annotations

import sys
from collections.abc import Callable

import click

from speclab.model.errors import InputError, SpeclabError
from speclab.model.exit_codes import ExitCode


class DefaultGroup(click.Group):
    """A group whose first argument, when it is not a subcommand, goes to a default command."""

    default_command = "open"

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if not args or (args[0] not in self.commands and args[0] not in ("--help", "-h")):
            args = [self.default_command, *args]
        return super().parse_args(ctx, args)


def require_terminal(command: str, instead: str) -> None:
    """Refuse to open a Textual app when stdin or stdout is not a terminal: the app would draw
    into a pipe or a file and wait for keys that never come. ``instead``: the headless way."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise InputError(f"{command}: the app needs a terminal, and stdin or stdout is not one; {instead}")


def _guard(fn: Callable[[], int]) -> None:
    """Run a command body: one clear line for known errors, 130 on Ctrl-C."""
    try:
        code = fn()
    except SpeclabError as exc:
        click.echo(f"speclab: error: {exc}", err=True)
        sys.exit(int(exc.exit_code))
    except KeyboardInterrupt:
        click.echo("speclab: interrupted", err=True)
        sys.exit(int(ExitCode.INTERRUPTED))
    sys.exit(int(code))
