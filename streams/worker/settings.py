"""The worker's own settings, on top of what every process is told (`streams.kafka.settings`):
its batching, its flushes, its web port and data folder, its group membership and its
stop. Built like every Settings: defaults < LOOPWARDEN_* < flags
(`streams.kafka.settings.build(flags, kind=WorkerSettings)`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..kafka.errors import SettingsError
from ..kafka.settings import Settings

CONSUMERS = ("inline", "thread")


@dataclass(frozen=True)
class WorkerSettings(Settings):
    batch_max: int = 500
    batch_linger_ms: float = 10.0  # only while behind: how long to wait for a fuller batch
    # How often the touched runs' states go to the changelog (and the input is committed).
    flush_interval_ms: float = 1000.0
    producer_linger_ms: float = 5.0
    # Most bytes one fetch brings per partition (Faust's consumer_max_fetch_size): above
    # Faust's default, which held the workers' throughput down (benchmarks.kafka;
    # benchmarks/RESULTS.md); a worker buffers at most this much per assigned partition.
    fetch_bytes_per_partition: int = 4 << 20
    # Where Faust's Kafka consumer runs: "inline", in the worker's event loop, or "thread",
    # in a thread of its own, as Faust runs it (faust_compat.consume_inline).
    consumer: str = "inline"
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    data_dir: str = ".loopwarden-data"
    # How soon a dead worker's partitions move to the others: the broker's default floor
    # (group.min.session.timeout.ms), with heartbeats every 0.25 s (benchmarks.failover).
    session_timeout_s: float = 6.0
    standby_replicas: int = 0  # warm copies of other workers' run states, for a faster failover
    stop_timeout_s: float = 25.0  # a stopping or crashed worker's process ends within this
    state_sweep_interval_s: float = 60.0  # how often idle runs are looked for in the table

    def check(self) -> None:
        super().check()
        if self.batch_max < 1:
            raise SettingsError(f"batch_max must be at least 1, got {self.batch_max}")
        if self.batch_linger_ms < 0:
            raise SettingsError(f"batch_linger_ms must not be negative, got {self.batch_linger_ms}")
        if self.fetch_bytes_per_partition < 1024:
            got = self.fetch_bytes_per_partition
            raise SettingsError(f"fetch_bytes_per_partition must be at least 1024, got {got}")
        if self.consumer not in CONSUMERS:
            raise SettingsError(f"consumer must be one of {', '.join(CONSUMERS)}, got {self.consumer!r}")
        if self.flush_interval_ms < 0:
            raise SettingsError(f"flush_interval_ms must not be negative, got {self.flush_interval_ms}")
        if self.state_sweep_interval_s <= 0 or self.stop_timeout_s <= 0:
            raise SettingsError("state_sweep_interval_s and stop_timeout_s must be positive")
