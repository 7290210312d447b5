"""Server-sent events as vLLM streams them: ``data: <json>`` events, ``[DONE]``, ``:`` comments.

Kept separate from the client so the framing rules are tested byte by byte. The parser works on
raw bytes as they arrive (an event may be split across reads, or several may share one read) and
returns each complete event's data; it never decodes JSON itself.
"""

from __future__ import annotations

DONE = b"[DONE]"
_IGNORED_FIELDS = frozenset((b"event", b"id", b"retry"))  # field names, matched whole


class MalformedStream(Exception):
    """The body is not an SSE stream (a line that is neither data, comment nor a known field).

    ``events`` are the ones completed before the bad line in the same read: what arrived before
    the fault is still the request's."""

    def __init__(self, message: str, events: list[bytes] | None = None) -> None:
        super().__init__(message)
        self.events = events or []


class SSEParser:
    """Incremental SSE decoder: ``feed(bytes)`` returns the data of every event completed by it."""

    __slots__ = ("_data", "_tail")

    def __init__(self) -> None:
        self._tail = b""
        self._data: bytes | None = None

    def feed(self, chunk: bytes) -> list[bytes]:
        buf = self._tail + chunk if self._tail else chunk
        lines = buf.split(b"\n")
        self._tail = lines.pop()
        out: list[bytes] = []
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if self._data is not None:
                    out.append(self._data)
                    self._data = None
                continue
            if line.startswith(b"data:"):
                payload = line[6:] if line.startswith(b"data: ") else line[5:]
                self._data = payload if self._data is None else self._data + b"\n" + payload
            elif line.startswith(b":") or line.partition(b":")[0] in _IGNORED_FIELDS:
                continue
            else:
                raise MalformedStream(f"not an SSE line: {line[:80]!r}", out)
        return out

    @property
    def pending(self) -> bool:
        """Bytes or an event started but not completed (the stream ended mid-event)."""
        return bool(self._tail.strip()) or self._data is not None
