"""SASL/SCRAM over TLS on a real broker: a CA made here signs the broker's certificate,
SCRAM users are created when its storage is formatted. `topics create`, a worker and a
gateway client work through the SASL_SSL listener; the password shows up in no log line
and no decision; a wrong password or a foreign CA fails fast, named as such."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time

import pytest

from streams.gateway.client import GatewayClient
from streams.kafka import settings as settings_mod
from streams.kafka.errors import BrokerError
from streams.tools import localkafka
from streams.tools.launch import command
from tests.integration.harness import ROOT, new_prefix, read_all

pytestmark = pytest.mark.integration
PASSWORD = "Sc7am-pa55word-9f1c"
CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}}


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    """A broker with a SASL_SSL listener (SCRAM-SHA-256 and -512, user alice): (broker, ca.pem)."""
    tmp = tmp_path_factory.mktemp("secure")
    ca, ca_key = localkafka.make_ca(tmp / "ca")
    keystore = localkafka.make_keystore(ca, ca_key, tmp / "keystore", password="keystore-pw")
    broker = localkafka.start(
        tmp / "kafka",
        heap="256m",
        sasl_ssl=localkafka.SaslSsl(users={"alice": PASSWORD}, keystore=keystore, keystore_password="keystore-pw"),
    )
    try:
        assert broker.sasl_ssl is not None
        yield broker, ca
    finally:
        localkafka.stop(broker)


def flags(broker, ca, password: str = PASSWORD, mechanism: str = "SCRAM-SHA-256") -> list[str]:
    return [
        "--bootstrap",
        broker.sasl_ssl,
        "--security-protocol",
        "SASL_SSL",
        "--sasl-mechanism",
        mechanism,
        "--sasl-username",
        "alice",
        "--sasl-password",
        password,
        "--ssl-cafile",
        str(ca),
    ]


def topics_create(args: list[str], prefix: str) -> tuple[subprocess.CompletedProcess, float]:
    t = time.monotonic()
    p = subprocess.run(
        command("topics", "create", "--topic-prefix", prefix, "--partitions", "4", "--json", *args),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    return p, time.monotonic() - t


def test_worker_and_client_over_sasl_ssl_keep_the_password_to_themselves(secure, start_worker):
    broker, ca = secure
    prefix = new_prefix()
    p, _ = topics_create(flags(broker, ca), prefix)
    assert p.returncode == 0, p.stderr
    assert sorted(json.loads(p.stdout)["created"]) == sorted(
        prefix + t
        for t in (
            *("events", "decisions", "deadletter", "worker-runs-changelog"),
            *("config", "fleet", "alerts", "failures", "spend"),
        )
    )

    # The worker speaks SCRAM-SHA-512, the client and `topics create` SCRAM-SHA-256.
    w = start_worker(
        prefix,
        CONFIG,
        bootstrap=broker.sasl_ssl,
        partitions=4,
        extra=tuple(flags(broker, ca, mechanism="SCRAM-SHA-512")[2:]),
    )
    s = settings_mod.build(
        {
            "bootstrap": broker.sasl_ssl,
            "topic_prefix": prefix,
            "security_protocol": "SASL_SSL",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_username": "alice",
            "sasl_password": PASSWORD,
            "ssl_cafile": str(ca),
        },
        env={},
    )

    async def main():
        async with GatewayClient(settings=s, gateway_id="gw-secure", timeout_s=15) as client:
            out = [await client.check("run-s", "read", {"path": "a"}) for _ in range(4)]
            return out, client.degraded

    decisions, degraded = asyncio.run(main())
    assert degraded == 0
    assert [d.action for d in decisions] == ["allow", "allow", "allow", "warn"]  # the 4th repeat warns
    assert all(PASSWORD not in repr(d) for d in decisions)

    # What the worker published, read back as bytes over the broker's plain listener (the
    # client has had the four decisions: they are on the topic).
    published = read_all(broker.bootstrap, s.decisions_topic)
    assert len(published) == 4
    assert all(PASSWORD.encode() not in m.value and PASSWORD.encode() not in (m.key or b"") for m in published)
    w.stop()
    log = w.log.read_text(errors="replace")
    assert "Authenticated as alice via SCRAM-SHA-512" in log  # Faust's clients got the mechanism
    assert PASSWORD not in log


def test_a_wrong_password_fails_fast_and_says_authentication_failed(secure, start_worker):
    broker, ca = secure
    wrong = "not-the-" + PASSWORD
    p, took = topics_create(flags(broker, ca, password=wrong), new_prefix())
    assert p.returncode == 1, p.stdout
    assert took < 15
    assert (
        f"Error: authentication failed for user 'alice' at {broker.sasl_ssl} (SASL mechanism SCRAM-SHA-256)" in p.stderr
    ), p.stderr
    assert "Unable to bootstrap" not in p.stderr and "Traceback" not in p.stderr
    assert wrong not in p.stderr and PASSWORD not in p.stderr

    # A worker with the wrong password ends as fast, with the same message in its log.
    t = time.monotonic()
    w = start_worker(
        new_prefix(),
        CONFIG,
        bootstrap=broker.sasl_ssl,
        name="wrong",
        extra=tuple(flags(broker, ca, password=wrong, mechanism="SCRAM-SHA-512")[2:]),
        wait=False,
    )
    assert w.proc is not None
    code = w.proc.wait(15)
    assert time.monotonic() - t < 15
    assert code == 1
    log = w.log.read_text(errors="replace")
    assert "authentication failed for user 'alice'" in log and "SCRAM-SHA-512" in log, log[-2000:]
    assert "Unable to bootstrap" not in log and wrong not in log


def test_a_certificate_from_another_ca_fails_the_tls_handshake(secure, tmp_path):
    broker, _ = secure
    other, _ = localkafka.make_ca(tmp_path / "other-ca", name="some other CA")
    p, took = topics_create(flags(broker, other), new_prefix())
    assert p.returncode == 1 and took < 15
    assert f"Error: TLS handshake with {broker.sasl_ssl} failed: certificate verify failed" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr


def test_a_gateway_client_names_a_refused_login_and_a_foreign_ca(secure, tmp_path):
    """GatewayClient says why it cannot connect, as `topics create` does, not "Unable to bootstrap"."""
    broker, ca = secure
    other, _ = localkafka.make_ca(tmp_path / "other-ca", name="some other CA")
    wrong = "not-the-" + PASSWORD

    def enter(password: str, cafile) -> tuple[BaseException, float]:
        s = settings_mod.build(
            {
                "bootstrap": broker.sasl_ssl,
                "topic_prefix": new_prefix(),
                "security_protocol": "SASL_SSL",
                "sasl_mechanism": "SCRAM-SHA-256",
                "sasl_username": "alice",
                "sasl_password": password,
                "ssl_cafile": str(cafile),
            },
            env={},
        )

        async def main():
            async with GatewayClient(settings=s, gateway_id="gw-secure", timeout_s=5):
                pass

        t = time.monotonic()
        with pytest.raises(BrokerError) as e:
            asyncio.run(main())
        return e.value, time.monotonic() - t

    refused, took = enter(wrong, ca)
    assert took < 15
    assert str(refused).startswith(
        f"authentication failed for user 'alice' at {broker.sasl_ssl} (SASL mechanism SCRAM-SHA-256)"
    ), str(refused)
    assert "Unable to bootstrap" not in str(refused) and wrong not in str(refused) and PASSWORD not in str(refused)

    unverified, took = enter(PASSWORD, other)
    assert took < 15
    assert str(unverified).startswith(f"TLS handshake with {broker.sasl_ssl} failed: certificate verify failed"), str(
        unverified
    )
