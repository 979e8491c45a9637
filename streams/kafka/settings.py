"""Process settings, layered defaults < environment (LOOPWARDEN_*) < flags, split by
audience: `Settings`, what every process that talks to Kafka is told (the connection,
the topics, the detection config file, the event size limit), and the worker's own
fields on top of it (`streams.worker.settings.WorkerSettings`, built by the same
`build`). And the detection config file a process reads.

Only this module reads the environment.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from detectors import DetectionConfig, load_config

from .errors import SettingsError

if TYPE_CHECKING:
    import ssl

ENV_PREFIX = "LOOPWARDEN_"
S = TypeVar("S", bound="Settings")


@dataclass(frozen=True)
class Settings:
    """What a process that talks to Kafka is told: the gateway client, the commands and
    the worker alike; `build` makes one."""

    bootstrap: str = "127.0.0.1:9092"
    topic_prefix: str = "loopwarden."
    partitions: int = 8
    replication: int = 1
    config: str | None = None  # detection config file (JSON or JSON5)
    max_event_bytes: int = 1 << 20
    log_level: str = "warning"
    # Kafka security, passed through to Faust and aiokafka.
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)  # never in a log line
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None

    def check(self) -> None:
        """Raise a SettingsError naming the first field whose value cannot be used."""
        if self.partitions < 1:
            raise SettingsError(f"partitions must be at least 1, got {self.partitions}")
        if self.max_event_bytes < 1:
            raise SettingsError(f"max_event_bytes must be positive, got {self.max_event_bytes}")
        if self.security_protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
            raise SettingsError(
                f"security_protocol {self.security_protocol!r} is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"
            )

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
    def spend_topic(self) -> str:
        """What events add to the fleet's spend caps, keyed by cap and key: the input of
        the spend stage (semantics.md section 11)."""
        return f"{self.topic_prefix}spend"

    @property
    def app_id(self) -> str:
        return f"{self.topic_prefix}worker"

    @property
    def changelog_topic(self) -> str:
        return f"{self.app_id}-runs-changelog"

    def spend_table_topic(self, window_ms: int | None) -> str:
        """The changelog topic of the spend stage's table of `window_ms` windows (None:
        the anomaly watch's), as Faust names a table's: `{app id}-{table}-changelog`."""
        return f"{self.app_id}-{spend_table(window_ms)}-changelog"

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


def from_env(base: S, env: Mapping[str, str] | None = None) -> S:
    env = os.environ if env is None else env
    changes = {}
    for f in fields(base):
        key = ENV_PREFIX + f.name.upper()
        if key in env and env[key] != "":
            changes[f.name] = _coerce(f.name, f.type, env[key])
    return replace(base, **changes)


@overload
def build(flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None) -> Settings: ...
@overload
def build(flags: Mapping[str, Any] | None, env: Mapping[str, str] | None, kind: type[S]) -> S: ...
@overload
def build(flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None, *, kind: type[S]) -> S: ...


def build(
    flags: Mapping[str, Any] | None = None, env: Mapping[str, str] | None = None, kind: type[Settings] = Settings
) -> Settings:
    """defaults < environment < flags (flags that are None are not given), as `kind`
    (Settings, or a subclass with fields of its own: the worker's)."""
    s = from_env(kind(), env)
    names = {f.name for f in fields(kind)}
    given = {k: v for k, v in (flags or {}).items() if v is not None and k in names}
    s = replace(s, **given)
    s.check()
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


def spend_table(window_ms: int | None) -> str:
    """The name of the spend stage's table of `window_ms` windows (None: the anomaly
    watch's, which keeps its own)."""
    return "spend-anomaly" if window_ms is None else f"spend-{window_ms}"
