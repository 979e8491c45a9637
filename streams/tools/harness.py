"""What the tests and the benchmarks share to drive a real broker: a scratch folder and a
broker of their own, settings for a topic prefix, the topics, worker processes (the one
way either starts `loopwarden worker`) and hooks sidecars, producing, reading topics to
their end offsets or following them, waiting for a group's commits or a worker's
metric, percentiles, and the CPU and memory a process used. Waits are on end offsets,
committed offsets or a metric, never on a fixed quiet period.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from ..admin.topics import create_topics
from ..kafka import clients, ranges
from ..kafka import settings as settings_mod
from . import localkafka
from .launch import Worker, command, stop_process

T = TypeVar("T")
Record = tuple[bytes | None, bytes | None]

# --- a scratch folder, a broker ---------------------------------------------------------------

KEEP_HELP = "keep the temporary folder (the broker's data, the processes' logs); it is kept anyway when the run fails"


@contextlib.contextmanager
def terminated_as_exit() -> Iterator[None]:
    """While inside, SIGTERM (`kill`, `timeout`) ends the process as Ctrl-C would: as an
    exception (`SystemExit(143)`) in the main thread, so every `finally` and context
    manager on the way out runs, and the brokers and workers a benchmark started are
    stopped (by default SIGTERM ends Python at once and leaves them running)."""

    def exit_(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, exit_)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def scratch(prefix: str, keep: bool = False) -> Iterator[Path]:
    """A temporary folder for a benchmark's broker, processes and logs, removed at the
    end unless `keep` (--keep) or the run fails: the logs an error names are in it. A
    folder kept is named on stderr. Inside it a SIGTERM ends the run through its cleanup
    (`terminated_as_exit`)."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        with terminated_as_exit():
            yield tmp
    except BaseException:
        keep = True
        raise
    finally:
        if keep:
            print(f"kept {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def own_broker(
    bootstrap: str | None, tmp: Path, heap: str = "512m", full_jit: bool = False
) -> Iterator[tuple[str, localkafka.Broker | None]]:
    """The broker to run on: (`bootstrap`, None) when one is given, else a fresh local one
    in `tmp` (its address, the broker), stopped at the end of the block."""
    if bootstrap:
        yield bootstrap, None
        return
    broker = localkafka.start(tmp / "kafka", heap=heap, full_jit=full_jit, fresh=True)
    try:
        yield broker.bootstrap, broker
    finally:
        localkafka.stop(broker)


# --- topics, and waiting -----------------------------------------------------------------------


def topic_settings(bootstrap: str, prefix: str = "loopwarden.", partitions: int = 8) -> settings_mod.Settings:
    """Settings for the topics under `prefix` on `bootstrap`, the environment ignored."""
    return settings_mod.build({"bootstrap": bootstrap, "topic_prefix": prefix, "partitions": partitions}, env={})


async def setup_topics_async(bootstrap: str, prefix: str, partitions: int = 8) -> settings_mod.Settings:
    """The topics under `prefix`, made if missing; their settings."""
    s = topic_settings(bootstrap, prefix, partitions)
    await create_topics(s)
    return s


def setup_topics(bootstrap: str, prefix: str, partitions: int = 8) -> settings_mod.Settings:
    return asyncio.run(setup_topics_async(bootstrap, prefix, partitions))


def wait_until(cond: Callable[[], T | None], timeout: float, what: str | Callable[[], str], every: float = 0.05) -> T:
    """Poll `cond` until it returns something true, and return that; AssertionError
    naming `what` (a callable: called then, e.g. for a worker's log) once `timeout`
    seconds have passed."""
    deadline = time.monotonic() + timeout
    while not (got := cond()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what() if callable(what) else what}")
        time.sleep(every)
    return got


async def wait_until_async(
    cond: Callable[[], Awaitable[T | None]], timeout: float, what: str | Callable[[], str], every: float = 0.25
) -> T:
    """`wait_until` in an event loop: `cond` is awaited, the loop runs on meanwhile."""
    deadline = time.monotonic() + timeout
    while not (got := await cond()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what() if callable(what) else what}")
        await asyncio.sleep(every)
    return got


# --- producing -----------------------------------------------------------------------------------


class Send(NamedTuple):
    """A record to produce; a (key, value) pair is one too."""

    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None  # None: now
    headers: Sequence[tuple[str, bytes]] = ()
    partition: int | None = None  # None: the key's
    topic: str | None = None  # None: the topic `produce` was given


async def produce_async(
    bootstrap: str,
    topic: str,
    records: Iterable[Send | Record],
    linger_ms: int = 5,
    **producer_kwargs: Any,
) -> None:
    """Produce the records (`Send`s, or (key, value) pairs) in order, every one
    acknowledged by the broker on return (acks=all, idempotent); `producer_kwargs` go to
    the producer (compression, a larger request size)."""
    s = topic_settings(bootstrap)
    p = clients.producer(s, acks="all", enable_idempotence=True, linger_ms=linger_ms, **producer_kwargs)
    async with clients.opened(p, s):
        futs = []
        for r in records:
            r = Send(*r)
            futs.append(
                await p.send(
                    r.topic or topic,
                    key=r.key,
                    value=r.value,
                    timestamp_ms=r.timestamp_ms,
                    headers=list(r.headers) or None,
                    partition=r.partition,
                )
            )
        await asyncio.gather(*futs)


def produce(bootstrap: str, topic: str, records: Iterable[Send | Record], **kwargs: Any) -> None:
    asyncio.run(produce_async(bootstrap, topic, records, **kwargs))


def event_records(events: list[dict[str, Any]]) -> list[Record]:
    """Events as records keyed by their run id (None: no key, as a bad event may have)."""
    return [
        (e["run_id"].encode() if isinstance(e.get("run_id"), str) else None, json.dumps(e).encode()) for e in events
    ]


# --- reading ---------------------------------------------------------------------------------------


async def read_all_async(bootstrap: str, topic: str, timeout: float = 60.0, **consumer_kwargs: Any) -> list[Any]:
    """Every record of `topic` up to its end offsets now, each partition's in offset
    order, partition after partition ([] when there is no such topic)."""
    got: list[Any] = []
    await ranges.read_records(topic_settings(bootstrap), topic, got.extend, timeout=timeout, **consumer_kwargs)
    return sorted(got, key=lambda m: (m.partition, m.offset))


def read_all(bootstrap: str, topic: str, timeout: float = 60.0, **consumer_kwargs: Any) -> list[Any]:
    return asyncio.run(read_all_async(bootstrap, topic, timeout, **consumer_kwargs))


async def consume_async(bootstrap: str, topic: str, want: int, timeout: float = 60.0) -> list[Any]:
    """Every record of `topic` once at least `want` are there (all it has, up to its end
    offsets then) or `timeout` passed: the topic is followed from its start, and read to
    the end offsets it has when the count is reached."""
    s = topic_settings(bootstrap)
    deadline = time.monotonic() + timeout
    got: list[Any] = []
    r = await ranges.open_range(s)
    try:
        while not await r.add(topic, ranges.BEGINNING, follow=True, must_exist=False):
            if time.monotonic() >= deadline:
                return got
            await asyncio.sleep(0.2)
        while time.monotonic() < deadline:
            got.extend(await r.chunk(timeout_ms=200))
            if len(got) >= want and r.caught_up():
                break
        if len(got) >= want:  # and what came meanwhile, up to the end offsets now
            ends = await r.consumer.end_offsets(r.tps)
            while any(r.position[tp] < ends[tp] for tp in r.tps) and time.monotonic() < deadline:
                got.extend(await r.chunk(timeout_ms=200))
    finally:
        await r.close()
    return sorted(got, key=lambda m: (m.partition, m.offset))


def consume(bootstrap: str, topic: str, want: int, timeout: float = 60.0) -> list[Any]:
    return asyncio.run(consume_async(bootstrap, topic, want, timeout))


@contextlib.asynccontextmanager
async def following(
    bootstrap: str,
    topic: str,
    start: ranges.Start = ranges.END,
    partitions: Iterable[int] | None = None,
    **consumer_kwargs: Any,
) -> AsyncIterator[ranges.Range]:
    """A reader of `topic` (its `partitions`, or all) from `start` (by default its end
    offsets now) on, never done: each `chunk()` gives the records that came since."""
    r = await ranges.open_range(topic_settings(bootstrap), **consumer_kwargs)
    try:
        await r.add(topic, start, partitions=partitions, follow=True)
        yield r
    finally:
        await r.close()


async def follow_arrivals(
    bootstrap: str, topic: str, on_record: Callable[[float, Any], None], stop: Callable[[], bool], every_ms: int = 100
) -> None:
    """Read `topic` from its end offsets now until `stop()` says so, handing each record to
    `on_record` with the time it was read (`time.monotonic()`)."""
    async with following(bootstrap, topic) as r:
        while not stop():
            records = await r.chunk(timeout_ms=every_ms)
            now = time.monotonic()
            for m in records:
                on_record(now, m)


async def end_offsets_async(bootstrap: str, topic: str) -> dict[int, int]:
    """The end offset of each partition of `topic` now ({} when there is no such topic)."""
    s = topic_settings(bootstrap)
    c = clients.reader(s)
    async with clients.opened(c, s):
        parts = await ranges.topic_partitions(c, topic)
        if not parts:
            return {}
        from aiokafka import TopicPartition

        ends = await c.end_offsets([TopicPartition(topic, p) for p in sorted(parts)])
        return {tp.partition: n for tp, n in ends.items()}


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    return asyncio.run(end_offsets_async(bootstrap, topic))


async def wait_for_count(bootstrap: str, topic: str, want: int, timeout: float, every: float = 0.25) -> int:
    """Until `topic`'s end offsets add up to `want` records (asked of the broker, nothing
    read: a reader would compete with what a benchmark measures for the cores); the
    count then. TimeoutError after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        n = sum((await end_offsets_async(bootstrap, topic)).values())
        if n >= want:
            return n
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{topic} holds {n} records, not {want}, after {timeout:g} s")
        await asyncio.sleep(every)


async def committed_offsets_async(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The offsets `group` has committed on the topic's partitions, by partition (those
    it committed none on are absent)."""
    s = topic_settings(bootstrap)
    admin = clients.admin(s)
    async with clients.opened(admin, s):
        offsets = await admin.list_consumer_group_offsets(group)
    return {tp.partition: o.offset for tp, o in offsets.items() if tp.topic == topic and o.offset >= 0}


def committed(bootstrap: str, group: str, topic: str) -> int:
    """The offsets `group` has committed on the topic's partitions, summed (a worker's
    group is its app id, `Settings.app_id`): what its output covers, durably."""
    return sum(asyncio.run(committed_offsets_async(bootstrap, group, topic)).values())


def wait_committed(bootstrap: str, group: str, topic: str, timeout: float = 60.0) -> dict[int, int]:
    """Until `group` has committed each partition of `topic` up to the end offset it has
    now; those end offsets. A worker commits its input only once what it published for it
    is acknowledged, so that output is then all on its topics, and nothing more will come
    of that input."""
    ends = end_offsets(bootstrap, topic)
    seen: dict[int, int] = {}

    def caught_up() -> bool:
        seen.update(asyncio.run(committed_offsets_async(bootstrap, group, topic)))
        return all(seen.get(p, 0) >= n for p, n in ends.items())

    wait_until(caught_up, timeout, lambda: f"{group} to commit {topic} to {ends} (it has {seen})", every=0.2)
    return ends


async def delete_topics_async(bootstrap: str, prefixes: Sequence[str]) -> None:
    """Delete every topic under the prefixes."""
    s = topic_settings(bootstrap)
    admin = clients.admin(s)
    async with clients.opened(admin, s):
        names = [t for t in await admin.list_topics() if t.startswith(tuple(prefixes))]
        if names:
            await admin.delete_topics(names)


# --- metrics, percentiles, a process's figures ------------------------------------------------------


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of the samples of metric `name` (or `name`_total, a counter's) in a
    Prometheus text page whose labels include `labels`; 0 when there is none."""
    want = [f'{k}="{v}"' for k, v in labels.items()]
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        sample, _, value = line.rpartition(" ")
        base, _, tags = sample.partition("{")
        if base in (name, f"{name}_total") and all(w in tags for w in want):
            total += float(value)
    return total


def percentile(values: Sequence[float], p: float) -> float | None:
    """The `p`-th percentile (0-100) of `values`, nearest rank; None for none."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))]


def percentiles(values: Sequence[float], ps: Iterable[float] = (50, 99), scale: float = 1.0) -> dict[str, Any]:
    """{"p50": ..., "p99": ..., "max": ..., "n": ...} of `values` times `scale`, rounded."""
    out: dict[str, Any] = {}
    for p in ps:
        v = percentile(values, p)
        out[f"p{p:g}"] = round(v * scale, 2) if v is not None else None
    out["max"] = round(max(values) * scale, 2) if values else None
    out["n"] = len(values)
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process has used (Linux /proc; 0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def rss_kib(pid: int) -> int | None:
    """A process's resident set (VmRSS) in KiB; None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def rss_mb(pid: int) -> float | None:
    """A process's resident set (VmRSS) in MB, to a tenth; None once it is gone."""
    kib = rss_kib(pid)
    return round(kib / 1024, 1) if kib is not None else None


# --- worker processes ------------------------------------------------------------------------------


class WorkerProcess(Worker):
    """`loopwarden worker` as a real child process (streams/tools/launch.py) on the topics
    under `prefix`, with a config (a document, written to a file in `tmp`, or a file;
    None: none, so it follows the config topic), its own data dir, a 6 s session timeout
    and `extra` flags (a flag given again there wins); `env` is added to the child's
    environment, `cwd` is where it runs (a directory holding another `streams` package
    runs that one). `topics`: the settings naming its topics."""

    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        config: Mapping[str, Any] | Path | None,
        tmp: Path,
        partitions: int = 8,
        name: str = "w",
        extra: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        log_level: str = "info",
    ) -> None:
        self.tmp = tmp
        self.topics = topic_settings(bootstrap, prefix, partitions)
        port = localkafka.free_port()
        pinned: tuple[str, ...] = ()
        if isinstance(config, Path):
            pinned = ("--config", str(config))
        elif config is not None:
            cfg = tmp / f"config-{name}.json"
            cfg.write_text(json.dumps(config))
            pinned = ("--config", str(cfg))
        flags = [
            *("--bootstrap", bootstrap, "--topic-prefix", prefix, "--partitions", str(partitions), *pinned),
            *("--data-dir", str(tmp / f"data-{name}"), "--log-level", log_level, "--session-timeout-s", "6"),
            *extra,
        ]
        super().__init__(flags, tmp / f"worker-{name}-{port}.log", port=port, cwd=cwd, stop_timeout=30, env=env)

    @property
    def pid(self) -> int:
        assert self.proc is not None, "start() first"
        return self.proc.pid

    def partitions(self) -> list[int]:
        """The partitions its /health names (none while it does not answer)."""
        return list((self.health() or {}).get("partitions") or [])

    def metric(self, name: str, **labels: str) -> float:
        """The sum of the samples of metric `name` on its /metrics whose labels include
        `labels` (`metric_value`); 0 when there is none."""
        return metric_value(self.metrics(), name, **labels)

    def wait_metric(self, name: str, at_least: float, timeout: float = 30.0, **labels: str) -> float:
        """Until its metric `name` reaches `at_least`; the value then."""
        wait_until(
            lambda: self.metric(name, **labels) >= at_least,
            timeout,
            lambda: f"{name} >= {at_least:g} (it is {self.metric(name, **labels):g})\n{self.tail()}",
        )
        return self.metric(name, **labels)

    def wait_published(self, events: int, timeout: float = 60.0) -> None:
        """Until it has taken `events` events (applied, `loopwarden_events`, or
        dead-lettered, `loopwarden_dead_letters`) and every decision and dead letter it
        published is on its topic (their end offsets add up to `loopwarden_decisions` and
        `loopwarden_dead_letters`). For the one worker of its topics, started once, those
        topics read to their end offsets then hold all it will ever publish of them."""
        s = self.topics
        seen: dict[str, float] = {}

        def published() -> bool:
            page = self.metrics()
            seen.update(
                {
                    m: metric_value(page, m)
                    for m in ("loopwarden_events", "loopwarden_dead_letters", "loopwarden_decisions")
                }
            )
            if seen["loopwarden_events"] + seen["loopwarden_dead_letters"] < events:
                return False
            on = {t: sum(end_offsets(s.bootstrap, t).values()) for t in (s.decisions_topic, s.deadletter_topic)}
            seen.update(on)
            return (
                on[s.decisions_topic] >= seen["loopwarden_decisions"]
                and on[s.deadletter_topic] >= seen["loopwarden_dead_letters"]
            )

        wait_until(published, timeout, lambda: f"{events} events taken and published ({seen})\n{self.tail()}")


def owners(workers: Sequence[WorkerProcess], partitions: int) -> dict[int, int] | None:
    """Once every worker says ok and owns a partition, and together they own each of
    `partitions` once: partition -> the index of its owner; None before."""
    found: dict[int, int] = {}
    for i, w in enumerate(workers):
        h = w.health() or {}
        mine = h.get("partitions") or []
        if h.get("status") != "ok" or not mine:
            return None
        for p in mine:
            if p in found:
                return None
            found[p] = i
    return found if sorted(found) == list(range(partitions)) else None


def wait_assigned(workers: Sequence[WorkerProcess], partitions: int, timeout: float = 60.0) -> dict[int, int]:
    """Until the group has settled on every worker (`owners`); partition -> its owner."""
    return wait_until(lambda: owners(workers, partitions), timeout, "the group to settle on every worker", every=0.2)


async def wait_assigned_async(
    workers: Sequence[WorkerProcess], partitions: int, timeout: float = 60.0
) -> dict[int, int]:
    """`wait_assigned` in an event loop (the /health requests go to a thread)."""
    loop = asyncio.get_running_loop()

    async def settled() -> dict[int, int] | None:
        return await loop.run_in_executor(None, owners, workers, partitions)

    return await wait_until_async(settled, timeout, "the group to settle on every worker", every=0.2)


@contextlib.asynccontextmanager
async def running_workers(
    bootstrap: str,
    prefix: str,
    config: Mapping[str, Any] | Path | None,
    tmp: Path,
    partitions: int,
    count: int,
    timeout: float = 120.0,
    **kwargs: Any,
) -> AsyncIterator[tuple[list[WorkerProcess], dict[int, int]]]:
    """`count` workers (`WorkerProcess`, named w0, w1, ...; `kwargs` go to each) started
    together, once the group has settled on all of them: the workers and partition ->
    owner. Every one is stopped on the way out."""
    workers = [WorkerProcess(bootstrap, prefix, config, tmp, partitions, f"w{i}", **kwargs) for i in range(count)]
    try:
        for w in workers:
            w.start(wait=False)
        yield workers, await wait_assigned_async(workers, partitions, timeout)
    finally:
        for w in workers:
            w.stop()


# --- the hooks sidecar ---------------------------------------------------------------------------

HOOK = Path(sys.executable).parent / "loopwarden-hook"  # the Python hook this interpreter's install has


class SidecarProcess:
    """`loopwarden hooks serve` as a child process on a free port (or `port`)."""

    def __init__(
        self,
        bootstrap: str,
        prefix: str,
        gateway_id: str,
        log: Path,
        timeout_s: float = 2.0,
        extra: tuple[str, ...] = (),
        port: int | None = None,
    ) -> None:
        self.port = port or localkafka.free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = log
        self.argv = command(
            *("hooks", "serve", "--bootstrap", bootstrap, "--topic-prefix", prefix),
            *("--listen", f"127.0.0.1:{self.port}", "--gateway-id", gateway_id, "--timeout-s", str(timeout_s)),
            *extra,
        )
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> SidecarProcess:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(self.argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while self.health() is None:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"the sidecar did not start:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.2)
        return self

    def health(self) -> dict[str, Any] | None:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                body: dict[str, Any] = json.loads(r.read())
                return body
        except (OSError, ValueError):
            return None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, 20)
