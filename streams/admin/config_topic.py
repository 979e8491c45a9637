"""Config as a stream: the detection configs on a compacted topic, and the current one.

The topic `<prefix>config` (one partition, compacted) holds two kinds of records:

- a config: key = its id (`config_id`: SHA-256 of the canonical JSON of the parsed
  document, so the same config published twice, or once as JSON and once as JSON5, is
  one key), value = the text exactly as published (JSON or JSON5, UTF-8), header
  `loopwarden.source` = the file it came from;
- the current one: key `current`, value `{"config": "<id>"}`.

`publish_config` writes the config, then the `current` record, so a reader that sees a
`current` record has already seen the config it names (compaction keeps the newest
record of each key, which keeps that order). `read_configs` reads the topic to its end;
a worker started without `--config` does that before it folds anything and then follows
the topic with a `ConfigFollower` (streams/worker/app.py).

A worker's switch falls between two batches, and keeps every run's state; in the terms
of semantics.md, the next event of a run is judged under the new config on what the run
has kept:
- history (section 3): kept as it is; the next tool_call is judged over all of it, up
  to the old historySize records, and it is cut to the new historySize only when a
  record is next appended (a call that is not blocked, or a result matching no record);
- warning memory (section 4): kept, so a warning key already shown in a count bucket
  stays suppressed in that bucket under the new thresholds;
- post-compaction guard (section 5): an armed window keeps the attempts left from the
  old windowSize, and aborts once it holds the new windowSize identical outcomes
  (counting those before the switch); an aborted run stays aborted whatever the config;
- remembered decisions (section 6): a duplicated tool_call gets its original verdict,
  with the config_hash of the config it is answered under;
- idle runs (section 7): the new runIdleTimeoutMs applies from the next event.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from detectors import ConfigError, DetectionConfig, load_config
from detectors.config import document_id, parse_document

from ..kafka import compacted
from ..kafka.compacted import READ_TIMEOUT_S
from ..kafka.settings import Settings

log = logging.getLogger("loopwarden.configs")

CURRENT = b"current"  # the key of the record naming the current config
SOURCE_HEADER = "loopwarden.source"


def config_id(text: bytes) -> str:
    """A config's id (`detectors.config.document_id` of its parsed document). Raises
    ConfigError for text that is not JSON5."""
    return document_id(parse_document(text))


@dataclass
class ConfigHistory:
    """What the config topic held when it was read: every config by id (its text and
    the parsed config), the id the last `current` record named (None: none yet, or
    tombstoned), each config's source file, and the offset after the last record read."""

    configs: dict[str, tuple[bytes, DetectionConfig]] = field(default_factory=dict)
    current: str | None = None
    sources: dict[str, str] = field(default_factory=dict)
    next_offset: int = 0

    def current_config(self) -> DetectionConfig | None:
        """The current config, or None when none is named or the one named was not read."""
        got = self.configs.get(self.current) if self.current is not None else None
        return got[1] if got is not None else None

    def add(
        self,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[tuple[str, bytes]] = (),
        where: str = "config topic",
    ) -> None:
        """Take one record of the topic in. An unreadable one is logged and skipped."""
        try:
            if key == CURRENT:
                if value is None:
                    self.current = None
                    return
                named = json.loads(value)["config"]
                if not isinstance(named, str) or not named:
                    raise ValueError(f"'config' is not an id: {named!r}")
                self.current = named
                return
            if key is None:
                raise ValueError("a record without a key")
            cid = key.decode("ascii")
            if value is None:  # a tombstone: the config is gone
                self.configs.pop(cid, None)
                self.sources.pop(cid, None)
                return
            source = next((v.decode("utf-8", "replace") for k, v in headers if k == SOURCE_HEADER), "")
            config = load_config(value, source=source or cid)
            if document_id(config.document) != cid:
                raise ValueError("the text's id is not the record's key")
            self.configs[cid] = (value, config)
            self.sources[cid] = source
        except (ValueError, KeyError, TypeError, UnicodeDecodeError, ConfigError) as exc:
            log.warning("skipping an unreadable record (key %r) at %s: %s", key, where, exc)


async def publish_config(
    settings: Settings, text: bytes, source: str, warn: Callable[[str], None] | None = None
) -> str:
    """Validate `text` (a ConfigError is raised as it is; each warning of the load goes
    to `warn`, or to the log), publish it under its id, then make it current. Returns
    the id. The topics are created first if missing (as a worker does at start)."""
    from .topics import create_topics

    config = load_config(text, source=source)
    cid = config_id(text)
    for w in config.warnings:
        (warn or (lambda m: log.warning("%s: %s", source, m)))(w)
    created = settings.config_topic in await create_topics(settings)
    source_header = [(SOURCE_HEADER, source.encode("utf-8", "replace"))]
    current = json.dumps({"config": cid}).encode()
    records = [(cid.encode(), text, source_header), (CURRENT, current, [])]
    await compacted.publish(settings, settings.config_topic, records, quiet=created)
    return cid


async def read_configs(settings: Settings, timeout: float = READ_TIMEOUT_S) -> ConfigHistory:
    """Every record of the config topic up to its end offset at the time of the call. A
    topic that does not exist gives an empty history; an unreadable record is skipped."""
    history = ConfigHistory()
    await compacted.read_whole(settings, settings.config_topic, history, timeout)
    return history


class ConfigFollower(compacted.Follower):
    """Follows the config topic from where a `read_configs` stopped (`history.next_offset`),
    adding each new record to `history`. One consumer, no group, one partition."""

    def __init__(self, settings: Settings, history: ConfigHistory) -> None:
        super().__init__(settings, settings.config_topic, history, "the config topic")
        self.history = history
