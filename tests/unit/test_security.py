"""Kafka security without a broker: failures named by their cause (errors.broker_error)
and the credentials the worker hands to Faust (app._credentials). The real SASL_SSL
broker is in tests/integration/test_security.py."""

from __future__ import annotations

import logging
import ssl

import pytest
from aiokafka import errors as ak

from streams.kafka import settings as settings_mod
from streams.kafka.errors import SettingsError, broker_error, connect_errors

ADDR = "127.0.0.1:9093"


def scram(**kw) -> settings_mod.Settings:
    flags = {
        "bootstrap": ADDR,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_username": "alice",
        "sasl_password": "hunter2-secret",
        **kw,
    }
    return settings_mod.build(flags, env={})


def unable() -> ak.KafkaConnectionError:
    return ak.KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 9093, <AddressFamily.AF_INET: 2>)]")


def test_a_refused_login_names_user_address_and_mechanism_not_the_password():
    refused = ak.SaslAuthenticationFailed("Authentication failed during authentication due to invalid credentials")
    e = broker_error(unable(), scram(), [OSError("other"), refused])
    assert str(e).startswith(f"authentication failed for user 'alice' at {ADDR} (SASL mechanism SCRAM-SHA-512)")
    assert "hunter2" not in str(e) and "Unable to bootstrap" not in str(e)
    assert str(broker_error(refused, ADDR)).startswith(f"authentication failed for the user at {ADDR}")


def test_a_mechanism_the_broker_does_not_offer():
    e = broker_error(unable(), scram(), [ak.UnsupportedSaslMechanismError("Enabled mechanisms are: ['PLAIN']")])
    assert "authentication failed" in str(e) and "does not accept SASL mechanism SCRAM-SHA-512" in str(e)


def test_a_certificate_the_ca_does_not_vouch_for():
    bad = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    bad.verify_message = "self-signed certificate in certificate chain"
    e = broker_error(unable(), scram(), [bad])
    assert str(e).startswith(f"TLS handshake with {ADDR} failed: certificate verify failed: self-signed certificate")


def test_nothing_telling_keeps_the_old_message():
    e = broker_error(unable(), scram(), [ConnectionRefusedError(111, "Connect call failed")])
    assert str(e).startswith(f"cannot reach Kafka at {ADDR}: KafkaConnectionError: Unable to bootstrap")


def test_connect_errors_collects_what_aiokafka_logs_only_inside_the_block():
    exc = ak.SaslAuthenticationFailed("no")
    log = logging.getLogger("aiokafka")
    with connect_errors() as seen:
        log.error('Unable connect to "%s:%s": %s', "127.0.0.1", 9093, exc)
        log.warning("a message without arguments")
    log.error('Unable connect to "%s:%s": %s', "127.0.0.1", 9093, ak.KafkaError("after"))
    assert seen == [exc]
    assert not any(type(h).__name__ == "_Collect" for h in log.handlers)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_worker_credentials_carry_the_mechanism_and_tls_to_aiokafka(mechanism, tmp_path):
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    from streams.worker.app import _credentials

    auth = credentials_to_aiokafka_auth(_credentials(scram(sasl_mechanism=mechanism)))
    assert auth["security_protocol"] == "SASL_SSL" and auth["sasl_mechanism"] == mechanism
    assert isinstance(auth["ssl_context"], ssl.SSLContext)
    assert (auth["sasl_plain_username"], auth["sasl_plain_password"]) == ("alice", "hunter2-secret")
    plain = credentials_to_aiokafka_auth(
        _credentials(scram(sasl_mechanism=mechanism, security_protocol="SASL_PLAINTEXT"))
    )
    assert plain["security_protocol"] == "SASL_PLAINTEXT" and plain["ssl_context"] is None
    assert plain["sasl_mechanism"] == mechanism


def test_worker_credentials_refuse_what_aiokafka_could_not_use():
    from streams.worker.app import _credentials

    with pytest.raises(SettingsError, match="not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"):
        _credentials(scram(sasl_mechanism="scram-sha-256"))
    with pytest.raises(SettingsError, match="needs --sasl-username and --sasl-password"):
        _credentials(scram(sasl_password=None))
    assert _credentials(settings_mod.build({}, env={})) is None


def test_topics_create_names_unusable_security_settings_before_connecting(tmp_path):
    import asyncio

    from streams.admin.topics import create_topics

    with pytest.raises(SettingsError, match=r"cannot load the TLS files \(--ssl-cafile .*no-such-ca.pem\)"):
        asyncio.run(create_topics(scram(ssl_cafile=str(tmp_path / "no-such-ca.pem"))))
    with pytest.raises(SettingsError, match="needs --sasl-username and --sasl-password"):
        asyncio.run(create_topics(scram(sasl_username=None)))
    with pytest.raises(SettingsError, match="cannot connect with these settings"):
        asyncio.run(create_topics(scram(sasl_mechanism="scram-sha-256")))
