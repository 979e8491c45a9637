"""Worker settings: defaults < LOOPWARDEN_* environment < flags; bad values named."""

import pytest

from streams.kafka.errors import SettingsError
from streams.kafka.settings import build
from streams.worker.settings import WorkerSettings


def test_layers_and_topic_names():
    env = {"LOOPWARDEN_BOOTSTRAP": "kafka:9092", "LOOPWARDEN_PARTITIONS": "12", "LOOPWARDEN_TOPIC_PREFIX": "prod."}
    s = build({"partitions": 4, "bootstrap": None}, env=env)
    assert (s.bootstrap, s.partitions, s.topic_prefix) == ("kafka:9092", 4, "prod.")
    assert (s.events_topic, s.decisions_topic, s.deadletter_topic) == (
        "prod.events",
        "prod.decisions",
        "prod.deadletter",
    )
    assert s.changelog_topic == "prod.worker-runs-changelog"
    assert build({}, env={}).bootstrap == "127.0.0.1:9092"


def test_security_settings_reach_the_kafka_clients():
    s = build(
        {
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_username": "u",
            "sasl_password": "p",
            "sasl_mechanism": "SCRAM-SHA-256",
        },
        env={},
    )
    kw = s.kafka_kwargs()
    assert kw["security_protocol"] == "SASL_PLAINTEXT" and kw["sasl_mechanism"] == "SCRAM-SHA-256"
    assert (kw["sasl_plain_username"], kw["sasl_plain_password"]) == ("u", "p")


@pytest.mark.parametrize(
    "env, flags, message",
    [
        ({"LOOPWARDEN_PARTITIONS": "many"}, {}, "LOOPWARDEN_PARTITIONS='many' is not a number"),
        ({}, {"partitions": 0}, "partitions must be at least 1"),
        ({}, {"security_protocol": "TLS"}, "security_protocol 'TLS'"),
        ({"LOOPWARDEN_FLUSH_INTERVAL_MS": "-1"}, {}, "flush_interval_ms must not be negative, got -1"),
        ({}, {"batch_linger_ms": -5.0}, "batch_linger_ms must not be negative"),
        ({}, {"batch_max": 0}, "batch_max must be at least 1"),
        ({"LOOPWARDEN_FETCH_BYTES_PER_PARTITION": "512"}, {}, "fetch_bytes_per_partition must be at least 1024"),
        ({"LOOPWARDEN_CONSUMER": "threads"}, {}, "consumer must be one of inline, thread, got 'threads'"),
    ],
)
def test_bad_values_are_named(env, flags, message):
    with pytest.raises(SettingsError, match=message):
        build(flags, env=env, kind=WorkerSettings)


def test_a_gateway_process_is_told_nothing_of_the_workers_own():
    s = build({"batch_max": 0, "bootstrap": "h:1"}, env={"LOOPWARDEN_WEB_PORT": "x"})  # ignored, not checked
    assert s.bootstrap == "h:1" and not hasattr(s, "batch_max") and not hasattr(s, "web_port")
    w = build({"batch_max": 7, "bootstrap": "h:1"}, env={}, kind=WorkerSettings)
    assert (w.bootstrap, w.batch_max, w.events_topic) == ("h:1", 7, s.events_topic)


def test_the_sasl_password_never_shows_in_the_settings_repr():
    s = build({"sasl_username": "alice", "sasl_password": "s3cret-pass"}, env={})
    assert "s3cret-pass" not in repr(s) and "alice" in repr(s)
