"""Chunks stamped as aiohttp's protocol hands them over, not when the reading coroutine resumes."""

from __future__ import annotations

import asyncio
import sys
import time

import aiohttp
from aiohttp.streams import StreamReader

from speclab.model.records import RequestRecord
from speclab.traffic.arrivals import Arrivals, unwatch, watch
from speclab.traffic.client import Target, run_request

from .fake_server import FakeServer
from .test_client import _req

STALL_S = 0.05


def _arrivals(*feeds: tuple[float, int]) -> Arrivals:
    a = Arrivals(time.monotonic)
    a.feeds.extend(feeds)
    return a


def test_one_feed_one_read_keeps_the_feeds_stamp() -> None:
    assert _arrivals((1.0, 3)).split(b"abc", 9.0) == [(b"abc", 1.0)]


def test_feeds_joined_in_one_read_are_cut_back_apart() -> None:
    a = _arrivals((1.0, 2), (2.0, 3), (3.0, 4))
    assert a.split(b"abcde", 9.0) == [(b"ab", 1.0), (b"cde", 2.0)]
    assert list(a.feeds) == [(3.0, 4)]  # a feed that came in during the read waits for the next one


def test_bytes_fed_before_the_watch_get_the_first_watched_stamp() -> None:
    # The first read can hold a chunk that came with the response's headers, before the watch began:
    # it arrived no later than the first feed that was watched.
    assert _arrivals((2.0, 2)).split(b"xyzab", 9.0) == [(b"xyz", 2.0), (b"ab", 2.0)]
    assert _arrivals().split(b"xyz", 9.0) == [(b"xyz", 9.0)]


def test_bytes_no_feed_accounts_for_later_are_stamped_as_read() -> None:
    a = _arrivals((1.0, 2))
    a.split(b"ab", 9.0)
    a.feeds.append((2.0, 2))
    assert a.split(b"cdef", 9.5) == [(b"cd", 2.0), (b"ef", 9.5)]


async def test_a_watched_reader_stamps_each_feed_and_others_do_not() -> None:
    loop = asyncio.get_running_loop()
    ticks = iter([5.0, 6.0])
    watched, other = StreamReader(_Protocol(loop), 2**16, loop=loop), StreamReader(_Protocol(loop), 2**16, loop=loop)
    arrivals = watch(watched, lambda: next(ticks))
    try:
        watched.feed_data(b"ab")
        other.feed_data(b"zz")
        watched.feed_data(b"")  # nothing arrived: no stamp
        watched.feed_data(b"cde")
    finally:
        unwatch(watched)
    watched.feed_data(b"f")
    assert list(arrivals.feeds) == [(5.0, 2), (6.0, 3)]
    assert await watched.readany() == b"abcdef" and await other.readany() == b"zz"


class _Protocol:
    """What a StreamReader asks of its protocol while it is fed."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def pause_reading(self) -> None: ...

    def resume_reading(self) -> None: ...


async def test_tokens_are_stamped_at_their_arrival_over_a_real_socket(fake_server: FakeServer) -> None:
    """As each chunk's bytes are fed, a callback that holds the loop for 50 ms is queued ahead of the
    reading coroutine's wake-up (as the parsing of a burst's other streams would be): the record's
    stamps are the feeds' own, not the moments, 50 ms or more later, when the reader resumed."""
    loop = asyncio.get_running_loop()
    feeds: list[float] = []

    def clock() -> float:
        now = time.monotonic()
        if sys._getframe(1).f_code.co_name == "feed_data":  # the stamp taken inside aiohttp's feed
            feeds.append(now)
            loop.call_soon(time.sleep, STALL_S)  # queued before the feed wakes the reader
        return now

    out: list[RequestRecord] = []
    start = time.monotonic()
    async with aiohttp.ClientSession() as session:
        await run_request(session, Target("spec", fake_server.base_url, "ok:n=3:per=1:ttft=0.01:itl=0.01"),
                          _req(), 0.0, out.append, run_start=start, clock=clock,
                          timeout=aiohttp.ClientTimeout(total=10, sock_read=5))
    (rec,) = out
    assert rec.ok, rec.error
    assert rec.first_token is not None and rec.last_token is not None and rec.done is not None
    stamps = {round(t - start, 9) for t in feeds}
    assert {round(rec.first_token, 9), round(rec.last_token, 9), round(rec.done, 9)} <= stamps
