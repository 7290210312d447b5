"""What a request record keeps of its prompt: a reference, never a copy of the text.

A record carries ``{"endpoint", "index", "ref", "sha256"[, "has_schema"]}``: ``ref`` names the
prompt in its plan (``class/position``), ``sha256`` is a digest of exactly what was asked (the
prompt string or the message list), so two runs can be matched on the same prompt without either
storing it per request. A recording keeps each distinct prompt once (``prompts.jsonl``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

DIGEST_CHARS = 16  # 64 bits of SHA-256: unique across any plausible set of prompts


def prompt_digest(asked: Mapping[str, Any]) -> str:
    """The digest of ``{"prompt": str}`` or ``{"messages": [...]}`` (other keys are ignored)."""
    content = {k: asked[k] for k in ("prompt", "messages") if k in asked}
    text = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:DIGEST_CHARS]


def record_digest(info: Mapping[str, Any]) -> str | None:
    """A record's prompt digest: stored, or computed from the text older recordings carried inline."""
    if info.get("sha256"):
        return str(info["sha256"])
    if "prompt" in info or "messages" in info:
        return prompt_digest(info)
    return None


def reference(endpoint: str, index: int, ref: str, asked: Mapping[str, Any], has_schema: bool) -> dict[str, Any]:
    info: dict[str, Any] = {"endpoint": endpoint, "index": index, "ref": ref, "sha256": prompt_digest(asked)}
    if has_schema:
        info["has_schema"] = True
    return info
