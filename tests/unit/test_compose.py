"""docker-compose.yml is for users and CI cannot start it: its loopwarden commands are
checked against the command's own parser here, so a renamed flag cannot slip through."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from streams.cli import build_parser

ROOT = Path(__file__).resolve().parents[2]
SERVICES = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]


def argv_of(service: dict, env: dict[str, str]) -> list[str]:
    """The loopwarden arguments a service runs (its entrypoint's shell line expanded as sh would)."""
    if "entrypoint" in service:
        kind, flag, line = service["entrypoint"]
        assert (kind, flag) == ("sh", "-c")
        line = line.replace("$$", "$")  # compose's escape for a literal $
        out = subprocess.run(
            ["sh", "-c", f"set -- {line.removeprefix('exec loopwarden ')}; printf '%s\\n' \"$@\""],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return out.splitlines()
    return list(service["command"])


@pytest.mark.parametrize("name", [n for n, s in SERVICES.items() if s.get("build")])
def test_every_loopwarden_service_parses(name):
    args = build_parser().parse_args(argv_of(SERVICES[name], {}))
    assert callable(args.func)


def test_the_alerts_service_posts_to_the_webhook_given():
    argv = argv_of(SERVICES["alerts"], {"ALERTS_WEBHOOK": "https://hooks.example.test/x y", "ALERTS_FORMAT": "slack"})
    args = build_parser().parse_args(argv)
    assert (args.webhook, args.format, args.from_beginning) == ("https://hooks.example.test/x y", "slack", True)
    plain = build_parser().parse_args(argv_of(SERVICES["alerts"], {}))
    assert plain.webhook is None and plain.format == "json"
