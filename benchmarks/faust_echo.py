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
from typing import Any

import faust

from benchmarks.echo_responder import PAD
from streams.kafka import clients
from streams.kafka import settings as settings_mod


def bare_app(bootstrap: str, app_id: str, datadir: str) -> Any:
    """A Faust app with nothing but its consumer: no web server, no store on disk (the
    benchmarks' do-nothing agents). `datadir`: the folder Faust keeps its own files in (the
    benchmark's temporary folder, removed with it). Any: Faust's decorators and signals are
    untyped."""
    return faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        autodiscover=False,
        web_enabled=False,
        consumer_auto_offset_reset="earliest",
        datadir=datadir,
    )


def announce_ready(app: Any) -> None:
    """Print `ready` once the app has its partitions (what the benchmark waits for)."""
    state = {"ready": False}

    @app.timer(0.2)
    async def announce() -> None:
        if app.consumer.assignment() and not state["ready"]:
            state["ready"] = True
            gc.collect()  # as the loopwarden worker does once started
            gc.freeze()
            print("ready", flush=True)


def raw_topic(app: Any, name: str) -> Any:
    """A topic of the app whose keys and values are bytes, as they are on the broker."""
    return app.topic(name, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")


def main() -> None:
    bootstrap, src, dst, app_id, datadir = sys.argv[1:6]
    app = bare_app(bootstrap, app_id, datadir)
    topic = raw_topic(app, src)
    announce_ready(app)

    @app.agent(topic, concurrency=1)
    async def echo(stream: Any) -> None:
        s = settings_mod.build({"bootstrap": bootstrap}, env={})
        async with clients.opened(clients.producer(s, acks="all", enable_idempotence=True), s) as producer:
            async for event in stream.events():
                h = dict(event.message.headers or ())
                await producer.send(dst, key=h.get("gw", b"gw"), value=h.get("id", b"") + b"\n" + PAD)

    worker = faust.Worker(app, loglevel="warning", quiet=True, redirect_stdouts=False)
    worker.spinner = None
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
