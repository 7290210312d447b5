"""Write the monitoring kit directory (docs/file-formats.md): ``*.rules.yml``, their promtool tests
``*.test.yml`` and ``speclab.dashboard.json``.

The directory's parent must exist and the directory must be absent or empty, unless ``force``,
which overwrites the kit's own files and leaves anything else there alone. Every refusal is an
``InputError``: one line, exit 2.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from speclab.model.errors import InputError

from . import dashboard, rule_tests, rules, speclab_row
from .promql import parse_duration
from .rules import Windows

DASHBOARD_FILE: Final = "speclab.dashboard.json"
MIN_SCRAPE_S: Final = 1
MAX_SCRAPE_S: Final = 300


class _KitDumper(yaml.SafeDumper):
    """Block style, keys in the order written, multi-line PromQL as literal blocks."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_KitDumper.add_representer(str, _str)


def to_yaml(doc: dict[str, Any]) -> str:
    return yaml.dump(doc, Dumper=_KitDumper, sort_keys=False, allow_unicode=True, width=110)


def scrape_interval(text: str) -> int:
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise InputError(f"--scrape-interval: {text!r} is not a duration such as 15s or 1m (one unit: s or m)") from None
    if not MIN_SCRAPE_S <= seconds <= MAX_SCRAPE_S:
        raise InputError(f"--scrape-interval: {text} is outside 1s..5m")
    return seconds


@dataclass(frozen=True)
class Kit:
    """The kit's files by name, rendered."""

    files: dict[str, str]

    @classmethod
    def build(cls, scrape_s: int = 15) -> Kit:
        w = Windows.for_scrape_interval(scrape_s)
        files = {
            rules.RECORDING_FILE: to_yaml(rules.recording_file(w)),
            rules.ALERTS_FILE: to_yaml(rules.alerts_file(w)),
            **{name: to_yaml(doc) for name, doc in rule_tests.files(w).items()},
            DASHBOARD_FILE: json.dumps(dashboard.dashboard(w, [speclab_row.speclab_row()],
                                                           [speclab_row.relaunch_annotation(w)],
                                                           [speclab_row.variant_variable()]),
                                       indent=2, ensure_ascii=False) + "\n",
        }
        return cls(files)


def _check_target(directory: Path, force: bool) -> None:
    parent = directory.parent
    if directory.exists() and not directory.is_dir():
        raise InputError(f"{directory}: exists and is not a directory")
    if not directory.exists():
        if not parent.exists():
            raise InputError(f"{directory}: parent directory {parent} does not exist")
        if not parent.is_dir():
            raise InputError(f"{directory}: {parent} is not a directory")
        if not os.access(parent, os.W_OK | os.X_OK):
            raise InputError(f"{directory}: parent directory {parent} is not writable")
        return
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"{directory}: directory is not writable")
    if any(directory.iterdir()) and not force:
        raise InputError(f"{directory}: directory is not empty (use --force to overwrite the kit's files)")


def write_kit(directory: Path, *, force: bool = False, scrape_s: int = 15) -> list[Path]:
    """Render first, then write: a refusal leaves nothing half-written."""
    _check_target(directory, force)
    kit = Kit.build(scrape_s)
    try:
        directory.mkdir(exist_ok=True)
        written = []
        for name, text in kit.files.items():
            path = directory / name
            path.write_text(text, encoding="utf-8")
            written.append(path)
    except OSError as exc:
        raise InputError(f"{directory}: cannot write the kit: {exc.strerror or exc}") from None
    return written
