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
    """Refuse to open a Textual app unless stdin, stdout and stderr are terminals: the app would
    otherwise wait for keys that never come, or draw into a pipe or a file (Textual draws on
    stderr; the summary goes to stdout). ``instead``: the headless way."""
    streams = {"stdin": sys.stdin, "stdout": sys.stdout, "stderr": sys.stderr}
    off = [name for name, stream in streams.items() if not stream.isatty()]
    if off:
        names = off[0] if len(off) == 1 else f"{', '.join(off[:-1])} and {off[-1]}"
        raise InputError(f"{command}: the app needs a terminal, and {names} "
                         f"{'is not one' if len(off) == 1 else 'are not terminals'}; {instead}")


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
