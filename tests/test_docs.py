"""The documentation a user clones stays whole: links resolve inside the repository, nothing points
outside it, and every `speclab <command>` the docs name is a command the CLI has (or is marked planned)."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from speclab.cli.main import cli
from speclab.model.exit_codes import ExitCode

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])

# Where each page lists the exit codes: "START ... 0 ok · 1 internal error · ... · 130 interrupted".
EXIT_CODE_LISTS = {"README.md": "Exit codes: ", "docs/measurements.md": "`speclab/model/exit_codes.py` (`ExitCode`"}

# Commands the docs may name before they exist; a page that names one must say it is planned.
PLANNED: set[str] = set()  # commands docs may name before they exist, on a page saying "planned"
_PLANNED_WORDS = re.compile(r"\b(planned|not yet|not built)\b", re.IGNORECASE)

_LINK = re.compile(r"(?<!!)\[(?:[^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
_FENCE = re.compile(r"^(```|~~~)")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_COMMAND = re.compile(r"(?:^|[\s/(])speclab\s+([a-z][a-z0-9-]*)")
_HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


def _rel(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _split(text: str) -> tuple[list[str], list[str]]:
    """(prose lines, code lines): fenced blocks are code; inline code spans are code too."""
    prose: list[str] = []
    code: list[str] = []
    fenced = False
    for line in text.splitlines():
        if _FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if fenced:
            code.append(line)
        else:
            prose.append(line)
            code.extend(_CODE_SPAN.findall(line))
    return prose, code


def _anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = heading.replace("`", "").replace("**", "").strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    prose, _ = _split(path.read_text(encoding="utf-8"))
    return {_anchor(m.group(1)) for line in prose if (m := _HEADING.match(line))}


def _links(path: Path) -> list[str]:
    prose, _ = _split(path.read_text(encoding="utf-8"))
    text = "\n".join(_CODE_SPAN.sub("", line) for line in prose)
    return _LINK.findall(text)


def _commands(path: Path) -> set[str]:
    _, code = _split(path.read_text(encoding="utf-8"))
    return {m.group(1) for chunk in code for m in _COMMAND.finditer(chunk)}


def test_the_docs_exist() -> None:
    names = {p.name for p in DOCS}
    for page in ("README.md", "architecture.md", "measurements.md", "file-formats.md", "simulator.md",
                 "contributing.md"):
        assert page in names, f"docs/{page} is missing"
    assert (ROOT / "docs" / "README.md").exists()


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_relative_links_resolve_inside_the_repository(doc: Path) -> None:
    problems = []
    for target in _links(doc):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        if file_part.startswith("/"):
            problems.append(f"{target}: an absolute path; link relative to {_rel(doc)}")
            continue
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.is_relative_to(ROOT):
            problems.append(f"{target}: outside the repository")
            continue
        if not dest.exists():
            problems.append(f"{target}: no such file ({_rel(dest)})")
            continue
        if fragment and dest.suffix == ".md" and fragment not in _anchors(dest):
            problems.append(f"{target}: {_rel(dest)} has no heading for #{fragment}")
    assert not problems, f"{_rel(doc)}:\n" + "\n".join(problems)


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_no_doc_points_outside_the_project(doc: Path) -> None:
    text = doc.read_text(encoding="utf-8")
    for needle in ("../shared", "shared/DESIGN.md", "shared/CONVENTIONS.md"):
        assert needle not in text, f"{_rel(doc)} mentions {needle}: the project carries its own docs/"


@pytest.mark.parametrize("doc", DOCS, ids=_rel)
def test_every_named_command_exists(doc: Path) -> None:
    assert isinstance(cli, click.Group)
    known = set(cli.commands)
    named = _commands(doc)
    unknown = sorted(named - known - PLANNED)
    assert not unknown, f"{_rel(doc)} names `speclab {'`, `speclab '.join(unknown)}`, not commands of the CLI ({', '.join(sorted(known))})"
    planned = sorted((named & PLANNED) - known)
    if planned:
        assert _PLANNED_WORDS.search(doc.read_text(encoding="utf-8")), (
            f"{_rel(doc)} names `speclab {planned[0]}`, which does not exist yet, without saying it is planned")


def test_the_command_scan_sees_commands() -> None:
    """Guard the scanner itself: the README's command table must yield the commands it lists."""
    named = _commands(ROOT / "README.md")
    assert {"lab", "run", "accept", "replay", "compare", "validate"} <= named


def _exit_codes_listed(text: str, start: str) -> list[int]:
    """The codes of the paragraph that begins with ``start``, as its "N name · N name" items give them."""
    paragraph = text[text.index(start):].split("\n\n")[0]
    items = paragraph.split("·")
    items[0] = items[0].rsplit(": ", 1)[-1]
    return [int(m.group(1)) for item in items if (m := re.match(r"\s*(\d+) [a-z]", item))]


@pytest.mark.parametrize(("page", "start"), EXIT_CODE_LISTS.items())
def test_every_exit_code_is_listed_once_in_order(page: str, start: str) -> None:
    listed = _exit_codes_listed((ROOT / page).read_text(encoding="utf-8"), start)
    assert listed == [int(code) for code in ExitCode], f"{page} lists exit codes {listed}; ExitCode has {list(map(int, ExitCode))}"
