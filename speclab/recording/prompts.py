"""A recording's prompts table: each distinct prompt once, so request records can keep a reference.

``prompts.jsonl`` has one line per prompt the run could send: ``{"ref"[, "id"], "sha256", "class",
"endpoint", "prompt" | "messages", "schema"}`` (``id``: the prompts file's name for the line). Records name a line by ``ref`` (and carry its
``sha256``); refire and compare resolve it here. Recordings made before the table existed carried
the text in every record, and still resolve from there.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from speclab.model.records import RequestRecord

PROMPTS = "prompts.jsonl"


def write_prompts(directory: Path, items: Iterable[Mapping[str, Any]]) -> None:
    seen: set[str] = set()
    with open(Path(directory) / PROMPTS, "w", encoding="utf-8") as fh:
        for item in items:
            if item["ref"] in seen:
                continue
            seen.add(item["ref"])
            fh.write(json.dumps(dict(item), ensure_ascii=False, separators=(",", ":")) + "\n")


def read_prompts(directory: Path) -> dict[str, dict[str, Any]]:
    """ref -> prompt line; empty for a recording without the table (its records carry the text)."""
    path = Path(directory) / PROMPTS
    if not path.exists():
        return {}
    table: dict[str, dict[str, Any]] = {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                item = json.loads(line)
            except ValueError:
                continue  # a truncated last line: the prompts before it still resolve
            if isinstance(item, dict) and "ref" in item:
                table[str(item["ref"])] = item
    return table


def asked(record: RequestRecord, table: Mapping[str, Mapping[str, Any]]) -> dict[str, Any] | None:
    """What the record's request asked (``prompt`` or ``messages``, and ``schema``), or None if unknown."""
    info = record.prompt or {}
    if "prompt" in info or "messages" in info:
        return {k: info[k] for k in ("prompt", "messages", "schema") if k in info}
    entry = table.get(str(info.get("ref")))
    if entry is None or entry.get("sha256") != info.get("sha256"):
        return None
    return {k: entry[k] for k in ("prompt", "messages", "schema") if entry.get(k) is not None}
