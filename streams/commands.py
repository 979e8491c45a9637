"""Subcommands that talk to Kafka; registered on the parser by cli.py."""

from __future__ import annotations

import argparse


def register(sub: argparse._SubParsersAction) -> None:
    return None
