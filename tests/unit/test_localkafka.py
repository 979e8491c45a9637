"""The local broker's pure parts. No JVM is started here."""

from __future__ import annotations

import base64
import re
import uuid

from streams import localkafka

URLSAFE = re.compile(r"[A-Za-z0-9_-]{22}")


def test_cluster_ids_never_start_with_a_dash():
    ids = [localkafka._cluster_id() for _ in range(20_000)]
    assert not [c for c in ids if c.startswith("-")]
    for c in ids:
        assert URLSAFE.fullmatch(c), c
        assert len(base64.urlsafe_b64decode(c + "==")) == 16
    assert len(set(ids)) == len(ids)


def test_an_id_that_would_start_with_a_dash_is_drawn_again(monkeypatch):
    dash = uuid.UUID(bytes=b"\xf8" + bytes(15))  # 0b111110... encodes as '-'
    plain = uuid.UUID(bytes=b"\x00" + bytes(14) + b"\x01")
    assert base64.urlsafe_b64encode(dash.bytes).startswith(b"-")
    draws = iter([dash, dash, plain])
    monkeypatch.setattr(localkafka.uuid, "uuid4", lambda: next(draws))
    assert localkafka._cluster_id() == base64.urlsafe_b64encode(plain.bytes).decode().rstrip("=")
