"""A do-nothing Faust agent over a topic (the framework's own ceiling), for benchmarks.kafka.

    python -m benchmarks.noop_agent BOOTSTRAP TOPIC N APP_ID DATADIR

Consumes as the loopwarden worker's agent does (events acknowledged by hand, in batches
of what has arrived) but does nothing with them. It prints `ready` once it has its
partitions, and one JSON line when it has seen N events: the seconds from its 10%-th
event to its N-th, scaled to N (the window benchmarks.kafka uses for the workers).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import faust

from benchmarks.faust_echo import announce_ready, bare_app, raw_topic


def main() -> None:
    bootstrap, topic, n, app_id, datadir = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    app = bare_app(bootstrap, app_id, datadir)
    src = raw_topic(app, topic)
    seen: dict[str, Any] = {"n": 0, "t10": None}
    announce_ready(app)

    @app.agent(src, concurrency=1)
    async def noop(stream: Any) -> None:
        stream.enable_acks = False
        batch: list[Any] = []
        async for event in stream.events():
            batch.append(event)
            if len(batch) < 500 and not stream.channel.empty():
                continue
            for e in batch:
                await stream.ack(e)
            seen["n"] += len(batch)
            batch = []
            if seen["t10"] is None and seen["n"] >= n // 10:
                seen["t10"], seen["n10"] = time.time(), seen["n"]
            if seen["n"] >= n:
                seconds = (time.time() - seen["t10"]) * n / (seen["n"] - seen["n10"])
                print(json.dumps({"events": seen["n"], "seconds": seconds}), flush=True)
                os._exit(0)

    worker = faust.Worker(app, loglevel="warning", quiet=True, redirect_stdouts=False)
    worker.spinner = None
    worker.execute_from_commandline()


if __name__ == "__main__":
    main()
