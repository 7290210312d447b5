"""Every input file goes through one bounded reader: only regular files, never read past their limit.

``/dev/zero`` as a scenario once grew speclab to 24 GB: a device's or a FIFO's size is 0, so a
``stat`` check let it through to an unbounded read. Now such a file is refused unread, in one line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from speclab.model import limits as L
from speclab.model.errors import InputError
from speclab.model.exit_codes import ExitCode
from speclab.model.gates import load_gates
from speclab.model.lab import load_lab
from speclab.model.loading import load_jsonl, load_toml, read_input
from speclab.model.scenario import PromptItem, load_scenario

DEVICES = ["/dev/zero", "/dev/full"]


def _scenario(tmp_path: Path, prompts_file: str) -> Path:
    path = tmp_path / "s.toml"
    path.write_text('name = "s"\nrequests = 5\n[arrival]\nprocess = "constant"\nrate = 1\n'
                    f'[classes.c]\nprompts_file = "{prompts_file}"\n')
    return path


def _refused(load: Callable[[Any], object], path: Path | str) -> str:
    started = time.perf_counter()
    with pytest.raises(InputError) as caught:
        load(path)
    assert time.perf_counter() - started < 10  # refused at once, not read
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.timeout(30)
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("load", [load_scenario, load_lab, load_gates, load_toml,
                                  lambda p: load_jsonl(p, PromptItem)])
def test_a_device_is_refused_unread(load: Callable[[Any], object], device: str) -> None:
    assert _refused(load, device) == f"{device}: not a regular file"


@pytest.mark.timeout(30)
@pytest.mark.parametrize("device", DEVICES)
def test_a_device_as_prompts_file_is_refused_unread(tmp_path: Path, device: str) -> None:
    message = _refused(load_scenario, _scenario(tmp_path, device))
    assert message.endswith(f"s.toml: classes.c.prompts_file: {device}: not a regular file")


@pytest.mark.timeout(30)
def test_a_fifo_with_no_writer_does_not_hang(tmp_path: Path) -> None:
    fifo = tmp_path / "p.fifo"
    os.mkfifo(fifo)
    shown = str(fifo)  # outside the current directory: shown as given
    for load in (load_scenario, load_lab, load_gates, lambda p: load_jsonl(p, PromptItem)):
        assert _refused(load, fifo).endswith(f"{shown}: not a regular file")
    assert _refused(load_scenario, _scenario(tmp_path, "p.fifo")).endswith("p.fifo: not a regular file")


def test_a_directory_is_not_a_regular_file(tmp_path: Path) -> None:
    (tmp_path / "d.toml").mkdir()
    assert _refused(load_toml, tmp_path / "d.toml").endswith("d.toml: not a regular file")


def test_a_config_file_over_its_limit_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.toml"
    path.write_text('name = "a name longer than the limit"\n')
    monkeypatch.setattr(L, "MAX_CONFIG_FILE_BYTES", 16)
    assert _refused(load_toml, path) == (f"{path}: larger than 16 bytes "
                                         "(the limit for a scenario, lab or gates file; docs/limits.md)")


def test_a_prompts_file_over_its_limit_is_refused_in_mib(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    with path.open("wb") as fh:  # sparse: over a MiB on paper, no disk used
        fh.truncate(1024 * 1024 + 1)
    message = _refused(lambda p: load_jsonl(p, PromptItem, max_bytes=1024 * 1024), path)
    assert message == f"{path}: larger than 1 MiB (the limit for a prompts or golden-set file; docs/limits.md)"


def test_a_file_whose_size_lies_is_read_no_further_than_its_limit() -> None:
    # /proc files are regular files of size 0 with content: a stat check alone would let them through
    status = Path("/proc/self/status")
    assert status.stat().st_size == 0
    assert len(read_input(status, limit=100_000, what="a test file")) > 10
    with pytest.raises(InputError, match=r"^/proc/self/status: larger than 10 bytes \(the limit for a test file; "):
        read_input(status, limit=10, what="a test file")


def test_crlf_is_read_as_before(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_bytes(b'a = 1\r\nb = "x"\r\n')
    assert load_toml(path) == {"a": 1, "b": "x"}


@pytest.mark.timeout(60)
def test_validate_refuses_devices_and_fifos_within_a_small_address_space(tmp_path: Path) -> None:
    fifo = tmp_path / "f.toml"
    os.mkfifo(fifo)
    scenario = _scenario(tmp_path, "/dev/zero")
    script = textwrap.dedent("""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # 1 GiB: an unbounded read dies here
        from speclab.cli.main import main
        sys.argv = ["speclab", "validate", *sys.argv[1:]]
        main()
    """)
    result = subprocess.run([sys.executable, "-c", script, "/dev/zero", "/dev/full", str(fifo), str(scenario)],
                            capture_output=True, text=True, timeout=50, cwd=tmp_path)
    assert result.returncode == ExitCode.BAD_INPUT, result.stderr
    assert "Traceback" not in result.stderr and "MemoryError" not in result.stderr
    assert result.stderr.splitlines() == ["/dev/zero: not a regular file", "/dev/full: not a regular file",
                                          "f.toml: not a regular file",
                                          "s.toml: classes.c.prompts_file: /dev/zero: not a regular file"]
