"""The audit's connections read each Kafka response with one copy of its bytes.

aiokafka reads a connection through an asyncio StreamReader: every chunk the socket
gives (up to 256 KiB) is appended to one bytearray, which grows by reallocation to the
size of the response (a fetch is up to 8 MiB for the audit), and `readexactly` copies
the response out of it. Past twice the reader's 64 KiB limit the transport is paused,
and resumed by the next read: twice per chunk, two system calls each. An audit reads
two whole topics this way, and `_read_ready`, `feed_data` and `readexactly` were a
large share of its reading (benchmarks.audit; benchmarks/RESULTS.md).

`FrameReader` keeps the chunks as the socket gave them, and joins a response's chunks
once, when it is complete (a response that is one chunk is not copied at all). It does
not pause the transport: a broker sends only the responses the client asked for, and
the base reader buffers the whole response too before `readexactly` returns it.

It is installed (`install`) as the reader of the connections opened while `frames()` is
in effect: the audit's consumers' (read.py), and no one else's. aiokafka reads a
connection only with `readexactly`; `at_eof` is kept true to the chunks held.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, cast

_ON: ContextVar[bool] = ContextVar("loopwarden_audit_frames", default=False)


class FrameReader(asyncio.StreamReader):
    """A StreamReader for length-prefixed frames read whole (`readexactly`)."""

    _chunks: deque[bytes]
    _size: int  # bytes held in `_chunks`, from `_offset` in the first one
    _offset: int
    _want: int  # what `readexactly` waits for: the waiter is woken once that much is here

    def _start_frames(self) -> None:
        self._chunks = deque()
        self._size = self._offset = self._want = 0

    def feed_data(self, data: Any) -> None:  # (bytes, from the socket transport)
        assert not self._eof, "feed_data after feed_eof"  # type: ignore[attr-defined]
        if not data:
            return
        self._chunks.append(data)
        self._size += len(data)
        if self._size >= self._want:
            self._wakeup_waiter()  # type: ignore[attr-defined]

    def at_eof(self) -> bool:
        return self._eof and not self._size  # type: ignore[attr-defined]

    async def readexactly(self, n: int) -> bytes:
        if self._exception is not None:  # type: ignore[attr-defined]
            raise self._exception  # type: ignore[attr-defined]
        if n < 0:
            raise ValueError("readexactly size can not be less than zero")
        while self._size < n:
            if self._eof:  # type: ignore[attr-defined]
                raise asyncio.IncompleteReadError(self._take(self._size), n)
            self._want = n
            await self._wait_for_data("readexactly")  # type: ignore[attr-defined]
        self._want = 0
        return self._take(n)

    def _take(self, n: int) -> bytes:
        """The next `n` bytes held (there are that many)."""
        if n == 0:
            return b""
        chunks, off = self._chunks, self._offset
        first = chunks[0]
        avail = len(first) - off
        if avail >= n:
            if off == 0 and avail == n:
                chunks.popleft()
                out = bytes(first)  # (the chunk itself: bytes of bytes is no copy)
            else:
                out = first[off : off + n]
                off += n
                if off == len(first):
                    chunks.popleft()
                    off = 0
        else:
            parts: list[Any] = [memoryview(first)[off:]]
            chunks.popleft()
            need, off = n - avail, 0
            while need:
                c = chunks[0]
                if len(c) <= need:
                    parts.append(c)
                    need -= len(c)
                    chunks.popleft()
                else:
                    parts.append(memoryview(c)[:need])
                    off, need = need, 0
            out = b"".join(parts)
        self._size -= n
        self._offset = off
        return out


@contextmanager
def frames() -> Iterator[None]:
    """Connections opened meanwhile (by this task, or by tasks it starts, which carry
    its context: a consumer's fetcher and metadata tasks) read with a FrameReader."""
    token = _ON.set(True)
    try:
        yield
    finally:
        _ON.reset(token)


def install() -> bool:
    """Have aiokafka's connections opened under `frames()` read with a FrameReader:
    its protocol class, made for each connection around the connection's new reader,
    is replaced by a subclass that turns that reader into a FrameReader first. Every
    other connection is left as it was. Were aiokafka or asyncio laid out otherwise,
    nothing is installed (False), and the audit reads as any consumer does."""
    try:
        from aiokafka import conn
    except ImportError:  # pragma: no cover
        return False
    base = getattr(conn, "AIOKafkaProtocol", None)
    if base is None:
        return False
    if getattr(base, "frames_for_audit", False):
        return True
    reader = asyncio.StreamReader
    if not all(hasattr(reader, name) for name in ("_wakeup_waiter", "_wait_for_data")):
        return False

    class AuditProtocol(base):  # type: ignore[misc, valid-type]
        frames_for_audit = True

        def __init__(self, closed_fut: Any, stream_reader: Any, *args: Any, **kw: Any) -> None:
            if _ON.get() and type(stream_reader) is asyncio.StreamReader:
                stream_reader.__class__ = FrameReader
                cast(FrameReader, stream_reader)._start_frames()
            super().__init__(closed_fut, stream_reader, *args, **kw)

    conn.AIOKafkaProtocol = AuditProtocol
    return True
