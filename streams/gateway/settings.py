"""Process settings, one frozen object for a gateway and a worker alike (the topics,
the connection, the worker's batching and web port), layered defaults < environment
(LOOPWARDEN_*) < flags; and the detection config file a process reads.

Only this module reads the environment.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detectors import DetectionConfig, load_config

from .errors import SettingsError

if TYPE_CHECKING:
    import ssl

ENV_PREFIX = "LOOPWARDEN_"


@dataclass(frozen=True)
class Settings:
    """What a process is told, the gateway client and the worker alike (each reads the fields it
    uses); `build` makes one."""

    bootstrap: str = "127.0.0.1:9092"
    topic_prefix: str = "loopwarden."
    partitions: int = 8
    replication: int = 1
    config: str | None = None  # detection config file (JSON or JSON5)
    max_event_bytes: int = 1 << 20
    batch_max: int = 500
    batch_linger_ms: float = 10.0  # only while behind: how long to wait for a fuller batch
    # How often the touched runs' states go to the changelog (and the input is committed).
    flush_interval_ms: float = 1000.0
    producer_linger_ms: float = 5.0
    web_host: str = "127.0.0.1"
    web_port: int = 6066
    data_dir: str = ".loopwarden-data"
    log_level: str = "warning"
    # How soon a dead worker's partitions move to the others: the broker's default floor
    # (group.min.session.timeout.ms), heartbeats every 0.25 s (benchmarks/failover.py).
    session_timeout_s: float = 6.0
    standby_replicas: int = 0  # warm copies of other workers' run states, for a faster failover
    stop_timeout_s: float = 25.0  # a stopping or crashed worker's process ends within this
    state_sweep_interval_s: float = 60.0  # how often idle runs are looked for in the table
    # Kafka security, passed through to Faust and aiokafka.
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)  # never in a log line
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    @property
    def events_topic(self) -> str:
        return f"{self.topic_prefix}events"

    @property
    def decisions_topic(self) -> str:
        return f"{self.topic_prefix}decisions"

    @property
    def deadletter_topic(self) -> str:
        return f"{self.topic_prefix}deadletter"

    @property
    def config_topic(self) -> str:
        """The detection configs and the current one (streams/admin/config_topic.py)."""
        return f"{self.topic_prefix}config"

    @property
    def fleet_topic(self) -> str:
        """Breakers and stop orders (semantics.md section 9; streams/admin/fleet_topic.py)."""
        return f"{self.topic_prefix}fleet"

    @property
    def alerts_topic(self) -> str:
        """Alerts for operators (wire-format.md, "Fleet signals and alerts")."""
        return f"{self.topic_prefix}alerts"

    @property
    def failures_topic(self) -> str:
        """Tool failures keyed by tool name: the input of the fleet's tool breaker stage."""
        return f"{self.topic_prefix}failures"

    @property
    def app_id(self) -> str:
        return f"{self.topic_prefix}worker"

    @property
    def changelog_topic(self) -> str:
        return f"{self.app_id}-runs-changelog"

    def ssl_context(self) -> ssl.SSLContext | None:
        if "SSL" not in self.security_protocol:
            return None
        import ssl  # only a client with TLS settings pays for it

        ctx = ssl.create_default_context(cafile=self.ssl_cafile)
        if self.ssl_certfile:
            ctx.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return ctx

    def kafka_kwargs(self) -> dict[str, Any]:
        """Connection arguments for aiokafka clients (producers, consumers, admin)."""
        kw: dict[str, Any] = {"bootstrap_servers": self.bootstrap, "security_protocol": self.security_protocol}
        if "SASL" in self.security_protocol:
            kw.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.sasl_password,
            )
        ctx = self.ssl_context()
        if ctx is not None:
            kw["ssl_context"] = ctx
        return kw


def _coerce(name: str, typ: Any, raw: str) -> Any:
    t = str(typ)
    try:
        if t == "int":
            return int(raw)
        if t == "float":
            return float(raw)
    except ValueError:
        raise SettingsError(f"{ENV_PREFIX}{name.upper()}={raw!r} is not a number") from None
    return raw


def from_env(base: Settings, env: Mapping[str, str] | None = None) -> Settings:
    env = os.environ if env is None else env
    changes = {}
    for f in fields(Settings):
        key = ENV_PREFIX + f.name.upper()
        if key in env and env[key] != "":
            changes[f.name] = _coerce(f.name, f.type, env[key])
    return replace(base, **changes)


def build(flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings:
    """defaults < environment < flags (flags that are None are not given)."""
    s = from_env(Settings(), env)
    given = {k: v for k, v in (flags or {}).items() if v is not None and k in {f.name for f in fields(Settings)}}
    s = replace(s, **given)
    if s.partitions < 1:
        raise SettingsError(f"partitions must be at least 1, got {s.partitions}")
    if s.batch_max < 1:
        raise SettingsError(f"batch_max must be at least 1, got {s.batch_max}")
    if s.batch_linger_ms < 0:
        raise SettingsError(f"batch_linger_ms must not be negative, got {s.batch_linger_ms}")
    if s.flush_interval_ms < 0:
        raise SettingsError(f"flush_interval_ms must not be negative, got {s.flush_interval_ms}")
    if s.state_sweep_interval_s <= 0 or s.stop_timeout_s <= 0:
        raise SettingsError("state_sweep_interval_s and stop_timeout_s must be positive")
    if s.max_event_bytes < 1:
        raise SettingsError(f"max_event_bytes must be positive, got {s.max_event_bytes}")
    if s.security_protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise SettingsError(
            f"security_protocol {s.security_protocol!r} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
        )
    return s


def _log_warning(path: str, warning: str) -> None:
    import logging  # here: `loopwarden replay` reads a config too, and starts faster without it

    logging.getLogger("loopwarden.worker").warning("%s: %s", path, warning)


def read_detection_config(path: str | None, warn: Callable[[str, str], None] = _log_warning) -> DetectionConfig:
    """The detection config file (JSON or JSON5), or the defaults without one; each
    unusable field is passed to `warn` and falls back as semantics.md says."""
    if not path:
        return DetectionConfig({})
    try:
        text = Path(path).read_bytes()
    except OSError as exc:
        raise SettingsError(f"cannot read config {path}: {exc.strerror}") from None
    config = load_config(text, source=path)
    for w in config.warnings:
        warn(path, w)
    return config
