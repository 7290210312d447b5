"""When a response's bytes reached the client: stamped as aiohttp's protocol hands them over.

aiohttp's protocol reads a socket in ``data_received`` and feeds the bytes to the response's
``StreamReader`` at once (``feed_data``), which wakes the coroutine reading the stream. That
coroutine resumes later in the same loop turn, behind every callback the turn already holds: with
a step's burst of chunks from many streams, behind the parsing of all the others. A stamp taken
where the coroutine resumes carries that wait, and a loop's ticker does not see it (the ticker
waits for the next turn, not for its place in this one). Stamped at the feed, a chunk's error is
how late the loop read the socket, which the ticker does see (docs/measurements.md has the figures
against a server that timestamps its own writes).

``watch(reader, clock)`` makes ``reader`` record ``(clock(), len(data))`` per feed, and
``Arrivals.split`` cuts what a read returned back into those pieces with their stamps, so each SSE
event is stamped when the bytes that completed it arrived. ``StreamReader.feed_data`` is wrapped
once per process, on the first ``watch``; a reader nobody watches pays one dict lookup per feed.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from aiohttp.streams import StreamReader

_WATCHED: dict[int, Arrivals] = {}
_installed = False


class Arrivals:
    """The feeds of one watched reader not yet matched to a read, oldest first."""

    __slots__ = ("clock", "feeds", "first")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.feeds: deque[tuple[float, int]] = deque()
        self.first = True  # the first read may hold bytes fed before the watch began

    def split(self, data: bytes, now: float) -> list[tuple[bytes, float]]:
        """``data`` (one read: the feeds since the last read, joined) as pieces, each with the clock
        reading of the feed that brought it. Bytes fed before the watch began come first in the first
        read; they are stamped with the first watched feed's time, an upper bound on their arrival
        (``now`` where there is none). Anything else unmatched is stamped ``now``, as the coroutine
        would have stamped it."""
        feeds = self.feeds
        first, self.first = self.first, False
        if feeds and feeds[0][1] == len(data):  # the common case: one feed, one read
            return [(data, feeds.popleft()[0])]
        matched: list[tuple[float, int]] = []
        total = 0
        while feeds and total + feeds[0][1] <= len(data):
            t, n = feeds.popleft()
            matched.append((t, n))
            total += n
        rest = len(data) - total
        pieces: list[tuple[bytes, float]] = []
        offset = 0
        if rest and first:
            pieces.append((data[:rest], matched[0][0] if matched else now))
            offset = rest
        for t, n in matched:
            pieces.append((data[offset:offset + n], t))
            offset += n
        if offset < len(data):
            pieces.append((data[offset:], now))
        return pieces


def watch(reader: StreamReader, clock: Callable[[], float]) -> Arrivals:
    """Start stamping ``reader``'s feeds on ``clock``; ``unwatch`` it when done."""
    if not _installed:
        _install()
    arrivals = Arrivals(clock)
    _WATCHED[id(reader)] = arrivals
    return arrivals


def unwatch(reader: StreamReader) -> None:
    _WATCHED.pop(id(reader), None)


def _install() -> None:
    global _installed
    feed = StreamReader.feed_data
    watched = _WATCHED

    def feed_data(self: StreamReader, data: bytes, *args: Any, **kwargs: Any) -> Any:
        arrivals = watched.get(id(self))
        if arrivals is not None and data:
            arrivals.feeds.append((arrivals.clock(), len(data)))
        return feed(self, data, *args, **kwargs)

    feed_data.__wrapped__ = feed  # type: ignore[attr-defined]
    StreamReader.feed_data = feed_data  # type: ignore[method-assign]
    _installed = True
