"""The worker→parent wire form: records survive the trip exactly, other messages pass untouched."""

from __future__ import annotations

from speclab.model.records import RequestRecord, SpecCounts
from speclab.traffic.shipping import HEALTH, RECORDS, from_wire, ingest, to_wire


def _record(i: int) -> RequestRecord:
    return RequestRecord(
        request_id=f"r-{i}", variant="spec", prompt_class="chat", intended=0.5 * i, sent=0.5 * i + 1e-4,
        first_token=0.5 * i + 0.05, last_token=0.5 * i + 0.6, done=0.5 * i + 0.61, epoch=2, chunks=40,
        token_reads=38, output_tokens=64, output_token_ids=list(range(64)), output_text="é \n\"x\"",
        finish_reason="length", server_queue_ms=1.5,
        spec=SpecCounts(3, 9, 5, [0, 1, 2, 0], 3, "exact", [3, 3, 3], [[3, 3, 5]]), schema_valid=True,
        sampling={"max_tokens": 64, "temperature": 0.0}, prompt={"endpoint": "chat", "index": i},
        output_logprobs=[{"token": None, "logprob": -0.5, "top": {None: -0.5, "a": -1.0}}],
    )


def test_records_round_trip_exactly() -> None:
    records = [_record(i) for i in range(3)]
    kind, blob = to_wire((RECORDS, records))
    assert kind == RECORDS and isinstance(blob, bytes) and blob.count(b"\n") == 2
    back = from_wire((kind, blob))[1]
    expected = [r.to_dict() for r in records]
    expected[0]["output_logprobs"][0]["top"] = {"null": -0.5, "a": -1.0}  # JSON keys are strings
    for r in expected[1:]:
        r["output_logprobs"][0]["top"] = {"null": -0.5, "a": -1.0}
    assert [r.to_dict() for r in back] == expected


def test_unknown_fields_are_ignored_and_other_messages_pass() -> None:
    assert ingest(b'{"request_id":"a","variant":"v","prompt_class":"c","intended":1.0,"new":3}\n')[0].request_id == "a"
    assert ingest(b"") == []
    assert to_wire((HEALTH, "h")) == (HEALTH, "h") == from_wire((HEALTH, "h"))
