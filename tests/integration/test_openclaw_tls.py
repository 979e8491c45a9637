"""The OpenClaw plugin's client over SASL_SSL (SCRAM, a CA made here) on a real broker and
worker, built from a plugin config as the plugin builds it: a looping run is warned, then
blocked; a wrong password and a missing CA get no decisions, and fail-open answers."""

from __future__ import annotations

import json
import subprocess

import pytest

from streams.tools import localkafka
from streams.tools.launch import command
from tests.integration.harness import ROOT, new_prefix

pytestmark = pytest.mark.integration
PLUGIN = ROOT / "clients" / "openclaw"
NODE = PLUGIN / "node_modules" / ".bin" / "node"
PASSWORD = "Oc-sc7am-pa55word-41"
CONFIG = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}}


@pytest.fixture(scope="module")
def secure(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("oc-secure")
    ca, ca_key = localkafka.make_ca(tmp / "ca")
    keystore = localkafka.make_keystore(ca, ca_key, tmp / "keystore", password="keystore-pw")
    sasl = localkafka.SaslSsl(users={"bob": PASSWORD}, keystore=keystore, keystore_password="keystore-pw")
    broker = localkafka.start(tmp / "kafka", heap="256m", sasl_ssl=sasl)
    try:
        yield broker, ca
    finally:
        localkafka.stop(broker)


def smoke(config: dict, calls: int = 6) -> list[str]:
    assert NODE.exists(), "no clients/openclaw/node_modules (tests/conftest.py installs it)"
    p = subprocess.run(
        [str(NODE), "scripts/smoke.ts", json.dumps(config), str(calls)],
        cwd=PLUGIN,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout)["actions"]


def test_plugin_client_over_sasl_ssl(secure, start_worker):
    broker, ca = secure
    prefix = new_prefix()
    flags = [
        "--bootstrap",
        broker.sasl_ssl,
        "--security-protocol",
        "SASL_SSL",
        "--sasl-mechanism",
        "SCRAM-SHA-512",
        "--sasl-username",
        "bob",
        "--sasl-password",
        PASSWORD,
        "--ssl-cafile",
        str(ca),
    ]
    p = subprocess.run(
        command("topics", "create", "--topic-prefix", prefix, *flags),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    start_worker(prefix, CONFIG, bootstrap=broker.sasl_ssl, extra=tuple(flags[2:]))
    config = {
        "bootstrap": broker.sasl_ssl,
        "topicPrefix": prefix,
        "gatewayId": "oc-tls",
        "timeoutMs": 10000,
        "securityProtocol": "SASL_SSL",
        "saslMechanism": "SCRAM-SHA-512",
        "saslUsername": "bob",
        "saslPassword": PASSWORD,
        "sslCaFile": str(ca),
    }
    assert smoke(config) == ["allow", "allow", "allow", "warn", "allow", "block"]
    quick = dict(config, timeoutMs=1500)
    assert smoke(dict(quick, saslPassword="wrong"), calls=1) == ["degraded-allow"]
    assert smoke({k: v for k, v in quick.items() if k != "sslCaFile"}, calls=1) == ["degraded-allow"]
    assert smoke(dict(quick, saslPassword="wrong", failPolicy="fail-closed"), calls=1) == ["degraded-block"]
