"""SSE framing: split reads, comments, multi-line data, garbage."""

from __future__ import annotations

import pytest

from speclab.traffic.sse import DONE, MalformedStream, SSEParser


def test_events_split_across_reads_and_merged_in_one() -> None:
    parser = SSEParser()
    assert parser.feed(b'data: {"a"') == []
    assert parser.pending
    assert parser.feed(b': 1}\n\ndata: {"b": 2}\n\ndata: [DO') == [b'{"a": 1}', b'{"b": 2}']
    assert parser.feed(b"NE]\n\n") == [DONE]
    assert not parser.pending


def test_comments_fields_and_crlf_are_skipped() -> None:
    parser = SSEParser()
    out = parser.feed(b": keep-alive\r\n\r\nevent: message\nid: 3\ndata:{\"x\":1}\r\n\r\n")
    assert out == [b'{"x":1}']


def test_multi_line_data_is_joined() -> None:
    assert SSEParser().feed(b"data: line1\ndata: line2\n\n") == [b"line1\nline2"]


def test_garbage_is_malformed() -> None:
    with pytest.raises(MalformedStream):
        SSEParser().feed(b"<html>oops</html>\n")


def test_unterminated_event_is_pending() -> None:
    parser = SSEParser()
    assert parser.feed(b"data: {}\n") == []
    assert parser.pending


def test_known_field_names_are_matched_whole() -> None:
    assert SSEParser().feed(b"retry\nid\nevent: x\n\n") == []
    for line in (b"identity: x\n", b"eventually\n", b"retry-after: 5\n"):
        with pytest.raises(MalformedStream):
            SSEParser().feed(line)
