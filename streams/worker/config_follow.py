"""The config follower: a worker started without `--config` switches to each config
published as current on the config topic (streams/admin/config_topic.py), between two
batches, within about a second."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from mode import Service

from detectors import DetectionConfig

from ..admin.config_topic import ConfigFollower, ConfigHistory
from ..kafka.settings import Settings
from .batches import BatchLoop

log = logging.getLogger("loopwarden.worker")


class ConfigSwitch:
    """What the follower does with the config topic's records: the current config, once
    it changed and has been read, goes to the batch loop (`use_config`), and
    `on_switch(id)` is told (the worker's gauge)."""

    def __init__(self, settings: Settings, history: ConfigHistory, batches: BatchLoop, on_switch: Any) -> None:
        self.settings = settings
        self.follower = ConfigFollower(settings, history)
        self.batches = batches
        self.on_switch = on_switch

    def adopt(self) -> None:
        history, batches = self.follower.history, self.batches
        cid, new = history.current, history.current_config()
        if cid is not None and new is None:
            log.warning(
                "the current config %s is not on %s (yet); keeping %s",
                cid,
                self.settings.config_topic,
                batches.config_id or "defaults",
            )
            return
        if cid != batches.config_id:
            batches.use_config(new or DetectionConfig({}), cid)  # between two batches; logged there
            self.on_switch(cid)


def install(app: Any, switch: ConfigSwitch) -> None:
    """Run the follower with the app: it polls the config topic about once a second."""
    follower, settings = switch.follower, switch.settings

    @app.service
    class _FollowConfigs(Service):
        async def on_start(self) -> None:
            await follower.start()
            log.warning(
                "following %s from offset %d; config %s",
                settings.config_topic,
                follower.history.next_offset,
                switch.batches.config_id or "defaults",
            )

        async def on_stop(self) -> None:
            await follower.stop()

        @Service.task
        async def _follow(self) -> None:
            while not self.should_stop:
                try:
                    if await follower.poll(1.0):
                        switch.adopt()
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # the config in use stays; try again
                    log.warning("cannot read %s: %r", settings.config_topic, exc)
                    await self.sleep(1.0)
