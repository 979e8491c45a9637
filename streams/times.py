"""Times and durations as the commands take them: `--from -2h`, `--lookback 24h`."""

from __future__ import annotations

import re
from datetime import datetime

from .kafka.errors import SettingsError

_RELATIVE = re.compile(r"^-?\s*(\d+(?:\.\d+)?)\s*(s|sec|m|min|h|d)$")
_UNIT = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86400}


def parse_from(text: str | None, now: float, option: str = "--from") -> float | str:
    """`--from`: "now", "beginning", an ISO-8601 time (no zone: local time) or a relative
    one like -10m, -30s, -2h, -1d. Returns "now", "beginning" or seconds since the epoch."""
    if text is None:
        return "now"
    t = text.strip().lower()
    if t in ("now", "end", "latest"):
        return "now"
    if t in ("beginning", "earliest", "start"):
        return "beginning"
    m = _RELATIVE.match(t)
    if m:
        return now - float(m.group(1)) * _UNIT[m.group(2)]
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        raise SettingsError(
            f"{option} {text!r} is neither an ISO-8601 time (2024-05-01T12:00:00Z), a relative "
            "one (-10m, -30s, -2h, -1d), 'now' nor 'beginning'"
        ) from None
    return dt.timestamp()  # a naive time is taken as local time


def parse_duration(text: str, option: str) -> float:
    """`24h`, `90m`, `30s`, `2d`, or plain seconds: a duration in seconds."""
    m = _RELATIVE.match(text.strip().lower().lstrip("-")) or re.match(r"^(\d+(?:\.\d+)?)()$", text.strip())
    if not m:
        raise SettingsError(f"{option} {text!r} is not a duration such as 30s, 90m, 24h or 2d")
    return float(m.group(1)) * (_UNIT[m.group(2)] if m.group(2) else 1)
