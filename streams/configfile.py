"""Reading the detection config file (used by the worker and by `loopwarden replay`)."""

from __future__ import annotations

import logging
from pathlib import Path

from detectors import DetectionConfig, load_config

from .errors import SettingsError

log = logging.getLogger("loopwarden.worker")


def read_detection_config(path: str | None, warn=lambda path, w: log.warning("%s: %s", path, w)) -> DetectionConfig:
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
