"""The framework's own floor for benchmarks.kafka: the bare echo, answered from a Faust agent.

    python -m benchmarks.faust_echo BOOTSTRAP IN_TOPIC OUT_TOPIC APP_ID DATADIR

Does what benchmarks/echo_responder.py does (an answer of a decision's size per message,
keyed by the message's `gw` header, its `id` header first in the value), but consumes
through a Faust agent, as the loopwarden worker does: Faust's consumer thread, its
conductor and its stream in the path, nothing else. Prints `ready` once it has its
partitions.
"""

from __future__ import annotations

import gc
import sys

import faust
from aiokafka import AIOKafkaProducer

from benchmarks.echo_responder import PAD


def bare_app(bootstrap: str, app_id: str, datadir: str) -> faust.App:
    """A Faust app with nothing but its consumer: no web server, no store on disk (the
    benchmarks' do-nothing agents). `datadir`: the folder Faust keeps its own files in (the
    benchmark's temporary folder, removed with it)."""
    return faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        autodiscover=False,
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        datadir=datadir,
    )


def main() -> None:
    bootstrap, src, dst, app_id, datadir = sys.argv[1:6]
    app = bare_app(bootstrap, app_id, datadir)
    topic = app.topic(src, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    state: dict = {}

    @app.timer(0.2)
    async def announce() -> None:
        if app.consumer.assignment() and not state.get("ready"):
            state["ready"] = True
            gc.collect()  # as the loopwarden worker does once started
            gc.freeze()
            print("ready", flush=True)

    @app.agent(topic, concurrency=1)
    async def echo(stream):
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
        await producer.start()
        try:
            async for event in stream.events():
                h = dict(event.message.headers or ())
                await producer.send(dst, key=h.get("gw", b"gw"), value=h.get("id", b"") + b"\n" + PAD)
        finally:
            await producer.stop()

    worker = faust.Worker(app, loglevel="warning", quiet=True, redirect_stdouts=False)
    worker.spinner = None
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
