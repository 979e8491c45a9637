"""The audit's connections' reader (streams/audit/frames.py), fed as a socket feeds it:
frames come out whole and in order however the bytes are cut, the end of the stream
and errors reach the reader, and only connections opened under `frames()` get it."""

from __future__ import annotations

import asyncio
import random
import struct

import pytest

from streams.kafka import frames
from streams.kafka.frames import FrameReader


def reader() -> FrameReader:
    r = asyncio.StreamReader()
    r.__class__ = FrameReader
    r._start_frames()  # type: ignore[attr-defined]
    return r  # type: ignore[return-value]


async def read_frames(r: FrameReader, n: int) -> list[bytes]:
    out = []
    for _ in range(n):
        (size,) = struct.unpack(">i", await r.readexactly(4))
        out.append(await r.readexactly(size))
    return out


@pytest.mark.parametrize("seed", range(5))
def test_frames_come_out_whole_however_the_stream_is_cut(seed):
    rng = random.Random(seed)
    bodies = [bytes(rng.randrange(256) for _ in range(rng.choice([0, 1, 3, 100, 5000, 70_000]))) for _ in range(40)]
    stream = b"".join(struct.pack(">i", len(b)) + b for b in bodies)

    async def go() -> list[bytes]:
        r = reader()
        task = asyncio.ensure_future(read_frames(r, len(bodies)))
        i = 0
        while i < len(stream):  # chunks of every size, the reader running between them
            step = rng.choice([1, 2, 4, 7, 1000, 65_536, 262_144])
            r.feed_data(stream[i : i + step])
            i += step
            await asyncio.sleep(0)
        got = await task
        assert r._size == 0 and not r._chunks
        return got

    assert asyncio.run(go()) == bodies


def test_a_frame_that_is_one_chunk_is_handed_over_without_a_copy():
    async def go() -> None:
        r = reader()
        body = b"x" * 100_000
        r.feed_data(struct.pack(">i", len(body)))
        r.feed_data(body)
        (size,) = struct.unpack(">i", await r.readexactly(4))
        assert (await r.readexactly(size)) is body

    asyncio.run(go())


def test_the_end_of_the_stream_and_errors_reach_the_reader():
    async def go() -> None:
        r = reader()
        r.feed_data(b"abc")
        assert not r.at_eof()
        r.feed_eof()
        assert not r.at_eof()  # three bytes are still held
        with pytest.raises(asyncio.IncompleteReadError) as e:
            await r.readexactly(5)
        assert e.value.partial == b"abc" and r.at_eof()

        r = reader()
        waiting = asyncio.ensure_future(r.readexactly(10))
        await asyncio.sleep(0)
        r.feed_data(b"12345")  # not enough: still waiting
        await asyncio.sleep(0)
        assert not waiting.done()
        r.set_exception(ConnectionResetError("gone"))
        with pytest.raises(ConnectionResetError):
            await waiting
        with pytest.raises(ConnectionResetError):
            await r.readexactly(1)

    asyncio.run(go())


def test_only_connections_opened_under_frames_get_the_reader():
    from aiokafka import conn

    assert frames.install() and frames.install()  # (once)

    async def made() -> type:
        loop = asyncio.get_running_loop()
        r = asyncio.StreamReader()
        conn.AIOKafkaProtocol(loop.create_future(), r, loop=loop)
        return type(r)

    async def go() -> tuple[type, ...]:
        before = await made()
        with frames.frames():
            inside = await made()
            task = await asyncio.ensure_future(made())  # a task started meanwhile carries it
        after = await made()
        return before, inside, task, after

    assert asyncio.run(go()) == (asyncio.StreamReader, FrameReader, FrameReader, asyncio.StreamReader)
