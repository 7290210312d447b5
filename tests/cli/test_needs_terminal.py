"""The Textual apps (`lab`, `replay` in the app, `sweep --app`) need a terminal: without one they
are refused in one line with exit 2 and the headless way, instead of drawing into a pipe for ever."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from speclab.cli.base import require_terminal
from speclab.cli.main import cli
from speclab.model.errors import InputError


@pytest.mark.parametrize("args, says", [
    (["lab", "--no-record"], "lab: the app needs a terminal, and stdin, stdout and stderr are not terminals; for a "
                             "run without the app use `speclab run`"),
    (["replay", "sample"], "replay: the app needs a terminal, and stdin, stdout and stderr are not terminals; for "
                           "the report alone use --report DIR"),
    (["sweep", "default", "smoke", "--quick", "--app"], "sweep: the app needs a terminal, and stdin, stdout and "
                                                        "stderr are not terminals; drop --app to run it headless"),
])
def test_an_app_without_a_terminal_is_refused_in_one_line(args: list[str], says: str, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, args, catch_exceptions=False)  # its stdin and stdout are not terminals
    assert result.exit_code == 2, result.output
    assert result.stderr == f"speclab: error: {says}\n"
    assert result.stdout == "" and not (tmp_path / "recordings").exists()


def test_a_terminal_on_both_ends_is_let_through(monkeypatch: pytest.MonkeyPatch) -> None:
    main, other = os.openpty()
    with os.fdopen(main, "r") as stdin, os.fdopen(other, "w") as stdout:
        monkeypatch.setattr(sys, "stdin", stdin)
        monkeypatch.setattr(sys, "stdout", stdout)
        monkeypatch.setattr(sys, "stderr", stdout)
        require_terminal("lab", "unused")  # does not raise
        monkeypatch.setattr(sys, "stderr", io.StringIO())  # `speclab lab 2>file`: Textual would draw into the file
        with pytest.raises(InputError, match="lab: the app needs a terminal, and stderr is not one; use"):
            require_terminal("lab", "use `speclab run`")
        monkeypatch.setattr(sys, "stdout", io.StringIO())
        with pytest.raises(InputError, match="and stdout and stderr are not terminals"):
            require_terminal("lab", "use `speclab run`")
