"""The shell's aiokafka workarounds that are not about connecting (clients.py) or
reading a connection (frames.py): a consumer that hands over each record as a small
struct. Written for aiokafka 0.14 (`PINS`; pyproject.toml pins the same minor version):
each reaches into a private class, and checks that what it needs is there before it
installs anything, so another layout leaves aiokafka as it is.
"""

from __future__ import annotations

from typing import Any

import msgspec

PINS = {"aiokafka": "0.14", "faust-streaming": "0.15"}
"""The minor versions these workarounds and faust_compat.py's were written for."""


class Msg(msgspec.Struct, gc=False):
    """A consumed record as the light readers make it (`light_records`), instead of
    aiokafka's ConsumerRecord: a struct of five fields is made in C, a ConsumerRecord of
    eleven, with the steps that fill it, in Python (benchmarks.audit reads two whole
    topics this way)."""

    partition: int
    offset: int
    timestamp: int  # ms since the epoch (the record's timestamp)
    key: bytes | None
    value: bytes | None


def raw_key(data: bytes | None) -> bytes | None:
    """The key "deserializer" that marks a consumer as a light reader (`light_records`)."""
    return data


def light_records() -> bool:
    """Have the consumers marked by `raw_key` hand over each record as a `Msg`.

    aiokafka's fetcher unpacks the fetched record batches in `PartitionRecords` (a
    private class it builds by the module's name), and makes a ConsumerRecord of each
    record, through three Python calls a record. Its subclass installed here, for a
    consumer whose key deserializer is `raw_key` (and that checks no CRCs and reads
    uncommitted records, as the audit's do), unpacks the batches itself into a Msg a
    record, and is iterated as that generator (no Python `__next__` a record). Every
    other consumer is left as it was. Why: an audit reads two whole topics, and the
    records' making was most of the reading (benchmarks.audit; benchmarks/RESULTS.md).
    Were aiokafka's fetcher laid out otherwise, nothing is installed and the reader gets
    ConsumerRecords, which have the same five fields (the audit's tests check that Msgs
    arrive)."""
    try:
        from aiokafka.consumer import fetcher
    except ImportError:  # pragma: no cover
        return False
    base = getattr(fetcher, "PartitionRecords", None)
    if base is None or not callable(getattr(base, "_unpack_records", None)):
        return False
    if getattr(base, "light_for_audit", False):
        return True

    committed = getattr(fetcher, "READ_COMMITTED", 1)

    class AuditRecords(base):  # type: ignore[misc, valid-type]
        light_for_audit = True
        next_fetch_offset: int  # (the base class's)

        def _light(self) -> bool:
            return self._key_deserializer is raw_key and not self._check_crcs and self._isolation_level != committed

        def __iter__(self) -> Any:
            # The records' generator itself, not this object: no Python `__next__`
            # between a fetch result's `getall` and each record.
            it = self._records_iterator if self._light() else None
            return it if it is not None else self

        def _unpack_records(self) -> Any:
            if not self._light():
                yield from super()._unpack_records()
                return
            part, records = self._tp.partition, self._records
            while records.has_next():
                batch = records.next_batch()
                if not batch.is_control_batch:  # (a transaction's marker: no record)
                    first = self.next_fetch_offset
                    for r in batch:
                        offset = r.offset
                        if offset >= first:  # (below: before the offset fetched from)
                            self.next_fetch_offset = offset + 1
                            yield Msg(part, offset, r.timestamp, r.key, r.value)
                self.next_fetch_offset = batch.next_offset

    fetcher.PartitionRecords = AuditRecords
    return True
