"""The physical limit for benchmarks.kafka: a bare aiokafka consume-and-answer loop.

    python -m benchmarks.echo_responder BOOTSTRAP IN_TOPIC OUT_TOPIC GROUP [N]

For every message on IN_TOPIC it produces an answer of a decision's size to OUT_TOPIC,
keyed by the message's `gw` header and carrying its `id` header first in the value. It prints
`ready` once it has its partitions. With N, it prints the seconds from its first message to
its N-th as one JSON line and exits.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

from streams.kafka import clients
from streams.kafka import settings as settings_mod

PAD = b"x" * 420  # a decision is about 600 bytes


async def main() -> None:
    bootstrap, src, dst, group = sys.argv[1:5]
    n = int(sys.argv[5]) if len(sys.argv) > 5 else None
    s = settings_mod.build({"bootstrap": bootstrap}, env={})
    c = clients.consumer(s, group_id=group, auto_offset_reset="earliest", max_poll_records=500)
    c.subscribe([src])
    p = clients.producer(s, acks="all", enable_idempotence=True)
    await clients.start(c, s)
    await clients.start(p, s)
    while not c.assignment():  # joined the group
        await asyncio.sleep(0.05)
    print("ready", flush=True)
    seen, t0 = 0, 0.0
    try:
        while True:
            batches = await c.getmany(timeout_ms=100, max_records=500)
            for msgs in batches.values():
                for m in msgs:
                    if seen == 0:
                        t0 = time.time()
                    h = dict(m.headers or ())
                    await p.send(dst, key=h.get("gw", b"gw"), value=h.get("id", b"") + b"\n" + PAD)
                    seen += 1
            if n is not None and seen >= n:
                await p.flush()
                print(json.dumps({"events": seen, "seconds": time.time() - t0}), flush=True)
                return
    finally:
        await c.stop()
        await p.stop()


if __name__ == "__main__":
    asyncio.run(main())
