"""Where bundled and user files live, and how a bare name becomes a path.

Bundled scenarios, labs and the sample recording ship as package data under
``speclab/bundled/``; the repository's top-level ``scenarios/`` and ``labs/`` point there.
A bare name is looked up in the current directory's folder first, then in the bundled one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final, Literal

from .errors import InputError

Kind = Literal["scenarios", "labs", "recordings", "gates"]

BUNDLED: Final = Path(__file__).resolve().parent.parent / "bundled"
_SUFFIXES: Final[dict[str, tuple[str, ...]]] = {
    "scenarios": (".toml",),
    "labs": (".toml",),
    "gates": (".toml",),
    "recordings": ("",),
}


def bundled_dir(kind: Kind) -> Path:
    return BUNDLED if kind == "gates" else BUNDLED / kind


def resolve(name_or_path: str | Path, kind: Kind) -> Path:
    """A path as given if it exists; else ``<kind>/<name><suffix>`` in CWD, then bundled."""
    given = Path(name_or_path)
    if given.exists():
        return given
    candidates: list[Path] = []
    for base in (Path.cwd() / kind, bundled_dir(kind)):
        for suffix in _SUFFIXES[kind]:
            candidates.append(base / f"{given}{suffix}")
    for candidate in candidates:
        if candidate.exists():
            return candidate
    raise InputError(f"{name_or_path}: no such file, and no {kind[:-1]} of that name in ./{kind}/ or the bundled {kind}")
