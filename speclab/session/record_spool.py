"""Every record of an accept run, in a temporary file rather than a list, read back in one pass.

Accept's report shows the variant tables of its last load stage; when no load stage ran (only
the correctness stages were asked for, or the run stopped before one), they are rebuilt from every
request of the run. That needs the records once, at the end, so they wait on disk: batches are
pickled as they arrive into an anonymous temporary file (gone when the spool is closed or
collected) and streamed back by ``records()``.
"""

from __future__ import annotations

import pickle
import tempfile
import weakref
from collections.abc import Iterable, Iterator

from speclab.model.records import RequestRecord


class RecordSpool:
    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="speclab-accept-records-")  # noqa: SIM115 - closed by close() or collection
        self._closer = weakref.finalize(self, self._file.close)
        self.count = 0

    def add(self, records: Iterable[RequestRecord]) -> None:
        batch = list(records)
        if batch and not self._file.closed:
            self._file.seek(0, 2)
            pickle.dump(batch, self._file, protocol=pickle.HIGHEST_PROTOCOL)
            self.count += len(batch)

    def records(self) -> Iterator[RequestRecord]:
        """Every record added so far, in the order added (a new pass each call)."""
        if self._file.closed:
            return
        end = self._file.seek(0, 2)
        self._file.seek(0)
        while self._file.tell() < end:
            batch: list[RequestRecord] = pickle.load(self._file)
            position = self._file.tell()
            yield from batch
            self._file.seek(position)  # an add() between two batches moved the file's position

    def close(self) -> None:
        self._closer()
