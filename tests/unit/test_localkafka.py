"""The local broker's pure parts: cluster ids, SCRAM credentials, what a restart reads and
what a fresh start deletes. No JVM is started here (tests/integration/test_localkafka.py
starts real ones)."""

from __future__ import annotations

import base64
import hashlib
import re
import socket
import uuid

import pytest

from streams.kafka.errors import BrokerError
from streams.tools import localkafka

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


@pytest.mark.parametrize("mechanism,algo", [("SCRAM-SHA-256", "sha256"), ("SCRAM-SHA-512", "sha512")])
def test_scram_credential_is_salted_and_never_holds_the_password(mechanism, algo):
    arg = localkafka._scram_credential(mechanism, "alice", "pa55word")
    m = re.fullmatch(rf'{mechanism}=\[name="alice",iterations=(\d+),salt="([^"]+)",saltedpassword="([^"]+)"\]', arg)
    assert m, arg
    assert "pa55word" not in arg
    iterations, salt, salted = int(m[1]), base64.b64decode(m[2]), base64.b64decode(m[3])
    assert iterations >= 4096  # Kafka's minimum for SCRAM
    assert salted == hashlib.pbkdf2_hmac(algo, b"pa55word", salt, iterations)


def _fake_broker(d, port: int, cport: int, sport: int | None = None) -> None:
    """A folder as `start` leaves it after formatting (no JVM, no real storage)."""
    (d / "data").mkdir(parents=True)
    (d / "data" / "meta.properties").write_text("cluster.id=x\n")
    text = localkafka._PROPERTIES.format(cport=cport, data=d / "data", **localkafka._listeners(port, cport, sport))
    (d / "server.properties").write_text(text)


def test_recorded_ports_come_from_the_listeners(tmp_path):
    _fake_broker(tmp_path, 41001, 41002, 41003)
    assert localkafka.formatted(tmp_path)
    assert localkafka._recorded_ports(tmp_path / "server.properties") == {
        "PLAINTEXT": 41001,
        "CONTROLLER": 41002,
        "SASL_SSL": 41003,
    }


def test_restart_refuses_a_taken_port_instead_of_moving_the_address(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        _fake_broker(tmp_path, port, localkafka.free_port())
        with pytest.raises(BrokerError, match=rf"port {port} .* is taken"):
            localkafka.start(tmp_path)


def test_restart_refuses_another_port_or_a_listener_it_was_not_made_with(tmp_path):
    _fake_broker(tmp_path, 41001, 41002)
    with pytest.raises(BrokerError, match="listens on port 41001, not 41009"):
        localkafka.start(tmp_path, port=41009)
    ks = tmp_path / "ks.p12"
    ks.write_bytes(b"x")
    with pytest.raises(BrokerError, match="without a SASL_SSL listener"):
        localkafka.start(tmp_path, sasl_ssl=localkafka.SaslSsl(users={"a": "b"}, keystore=ks, keystore_password="p"))


def test_fresh_deletes_the_broker_files_and_nothing_else(tmp_path, monkeypatch):
    _fake_broker(tmp_path, 41001, 41002)
    for name in ("broker.log", "stdout.log", "log4j2.properties"):
        (tmp_path / name).write_text("x")
    (tmp_path / "broker.json").write_text('{"bootstrap": "127.0.0.1:41001", "pid": 999999999, "workdir": "x"}')
    (tmp_path / "notes.txt").write_text("mine")
    seen = []

    def fake_start_new(workdir, *args):
        seen.append(sorted(p.name for p in workdir.iterdir()))
        return "started"

    monkeypatch.setattr(localkafka, "_start_new", fake_start_new)
    assert localkafka.start(tmp_path, fresh=True) == "started"
    assert seen == [["notes.txt"]]


def test_a_recorded_pid_that_is_not_this_brokers_jvm_is_not_running(tmp_path):
    import os

    # Our own pid is alive but is no kafka.Kafka on this folder's config.
    (tmp_path / "broker.json").write_text(localkafka.Broker("127.0.0.1:1", os.getpid(), tmp_path).to_json())
    assert localkafka.running(tmp_path) is None
    assert localkafka.running(tmp_path / "nothing-here") is None


def test_sasl_ssl_settings_are_checked():
    ok = dict(users={"alice": "x"}, keystore=localkafka.POM, keystore_password="p")
    localkafka.SaslSsl(**ok).check()
    with pytest.raises(BrokerError, match="SASL mechanisms"):
        localkafka.SaslSsl(**ok, mechanisms=("PLAIN",)).check()
    with pytest.raises(BrokerError, match="cannot be used"):
        localkafka.SaslSsl(**{**ok, "users": {'a"b': "x"}}).check()
    with pytest.raises(BrokerError, match="does not exist"):
        localkafka.SaslSsl(**{**ok, "keystore": localkafka.ROOT / "no-such.p12"}).check()


def test_broker_json_of_an_older_start_still_reads(tmp_path):
    f = tmp_path / "broker.json"
    f.write_text('{"bootstrap": "127.0.0.1:9", "pid": 5, "workdir": "/w"}')
    assert localkafka.Broker.from_file(f) == localkafka.Broker("127.0.0.1:9", 5, localkafka.Path("/w"))
