"""Keep secrets out of recordings: API keys and auth headers are never written (docs/file-formats.md).

Two layers: keys that name a secret have their value replaced wherever they appear in a nested
structure, and strings are searched for the shapes secrets take (bearer tokens, ``sk-``/``hf_``
keys, ``--api-key VALUE``, ``Authorization: ...``) plus any exact values the caller knows.
The substituted text never contains quotes or backslashes, so scrubbing a JSON line keeps it valid.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final

REDACTED: Final = "[REDACTED]"

_SECRET_KEY = re.compile(
    r"(api[_-]?key|authorization|secret|passw(or)?d|cookie|bearer|access[_-]?token|auth[_-]?token|"
    r"hf[_-]?token|hugging_?face_?hub_?token|openai[_-]?key|x-api-key|private[_-]?key|credential)",
    re.IGNORECASE,
)
_EXACT_SECRET_KEYS: Final = frozenset({"token", "auth", "key", "headers_auth"})

_TOKEN_CHARS = r"[A-Za-z0-9_\-\.~+/=]"
# Each pattern with a lowercase word every match contains: a line without it skips that pattern
# (the recorder scrubs every request line, and nearly none holds any of these words).
_PATTERNS: Final = (
    ("bearer", re.compile(r"(?i)(bearer\s+)" + _TOKEN_CHARS + "+")),
    ("authorization", re.compile(r"(?i)(authorization\s*[:=]\s*)(?!bearer\s)" + _TOKEN_CHARS + "+")),
    ("api", re.compile(r"(?i)(--api-key[= ]\s*)" + _TOKEN_CHARS + "+")),
    ("key", re.compile(r"(?i)((?:api[_-]?key|x-api-key)\s*[:=]\s*)" + _TOKEN_CHARS + "+")),
    ("sk-", re.compile(r"()\bsk-[A-Za-z0-9_\-]{16,}")),
    ("hf_", re.compile(r"()\bhf_[A-Za-z0-9]{20,}")),
)


def is_secret_key(key: str) -> bool:
    """True for keys whose value is a secret; ``api_key_env`` names where one lives and is kept."""
    lowered = key.lower()
    if lowered.endswith(("_env", "_env_var", "_var", "_name")):
        return False
    return lowered in _EXACT_SECRET_KEYS or bool(_SECRET_KEY.search(lowered))


class Scrubber:
    """Redacts secrets from text and nested data; ``known`` adds exact values (e.g. an env key)."""

    def __init__(self, known: Iterable[str] = ()) -> None:
        self._known = sorted({k for k in known if k and len(k) >= 4}, key=len, reverse=True)

    def text(self, value: str) -> str:
        for secret in self._known:
            if secret in value:
                value = value.replace(secret, REDACTED)
        lowered = value.lower()
        for word, pattern in _PATTERNS:
            if word in lowered:
                value = pattern.sub(lambda m: m.group(1) + REDACTED, value)
        return value

    def data(self, value: Any) -> Any:
        if isinstance(value, dict):
            return {
                k: (REDACTED if isinstance(k, str) and is_secret_key(k) and v else self.data(v))
                for k, v in value.items()
            }
        if isinstance(value, (list, tuple)):
            return [self.data(v) for v in value]
        if isinstance(value, str):
            return self.text(value)
        return value
