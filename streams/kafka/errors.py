"""Errors of the shell (the gateway library's, and the commands' and tools' that build on
it); the root and the core's subtree live in detectors/errors.py.

LoopwardenError
├── SettingsError   a setting (flag, LOOPWARDEN_* variable) with an unusable value
├── BrokerError     the local Kafka broker cannot be fetched, started or reached
└── WorkerError     a worker process started here exited or never became healthy
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from typing import Any

from detectors.errors import LoopwardenError


class SettingsError(LoopwardenError):
    """A setting has a value that cannot be used."""


class BrokerError(LoopwardenError):
    """The local broker could not be fetched, started or reached."""


class WorkerError(LoopwardenError):
    """A worker process started by a tool (streams/tools/launch.py) exited or never said ok."""


# Connection failures, named by their cause. aiokafka's bootstrap catches what went wrong
# on each connection attempt (a refused SASL login, a certificate it could not verify),
# logs it, and raises only "Unable to bootstrap from [...]"; `connect_errors` collects
# the exceptions it logged meanwhile so that `broker_error` can name the real cause.


@contextlib.contextmanager
def connect_errors(logger: str = "aiokafka") -> Iterator[list[BaseException]]:
    """Collect the exceptions aiokafka logs (as log arguments) inside the block.

    The handler sits on the shared "aiokafka" logger, so a failure of another client of
    the same process inside the block is collected too; keep the block to one connect.
    Records still reach the handlers configured on the loggers above; only Python's
    last-resort printing to stderr (when no logging is configured) stops meanwhile, so a
    command prints the named error once instead of aiokafka's line before it."""
    import logging  # here: a replay, which never talks to Kafka, starts without it

    seen: list[BaseException] = []

    class _Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if isinstance(record.args, tuple):
                seen.extend(a for a in record.args if isinstance(a, BaseException))

    handler = _Collect(logging.DEBUG)
    log = logging.getLogger(logger)
    log.addHandler(handler)
    try:
        yield seen
    finally:
        log.removeHandler(handler)


def _kind(exc: BaseException) -> int:
    """How much an exception says about why a connection failed (higher: more)."""
    import ssl  # here: a replay, which never talks to Kafka, starts without it

    from aiokafka import errors as ak

    if isinstance(
        exc,
        (
            ak.SaslAuthenticationFailed,
            ak.AuthenticationFailedError,
            ak.UnsupportedSaslMechanismError,
            ak.AuthenticationMethodNotSupported,
            ak.IllegalSaslStateError,
        ),
    ):
        return 3
    if isinstance(exc, ssl.SSLError):
        return 2
    if isinstance(
        exc, (ak.TopicAuthorizationFailedError, ak.GroupAuthorizationFailedError, ak.ClusterAuthorizationFailedError)
    ):
        return 1
    return 0


def broker_error(exc: BaseException, target: Any, causes: Iterable[BaseException] = ()) -> BrokerError:
    """A BrokerError that names why talking to Kafka failed.

    `target` is the Settings used (for the user and SASL mechanism to name) or just the
    bootstrap address; `causes` what `connect_errors` collected. The password is never
    part of the message."""
    import ssl

    from aiokafka import errors as ak

    at = getattr(target, "bootstrap", target)
    user = getattr(target, "sasl_username", None)
    mechanism = getattr(target, "sasl_mechanism", None)
    cause = max([exc, *causes], key=_kind)  # the first of the most telling kind
    detail = str(cause).strip()
    if isinstance(cause, (ak.SaslAuthenticationFailed, ak.AuthenticationFailedError, ak.IllegalSaslStateError)):
        who = f"user {user!r}" if user is not None else "the user"
        how = f" (SASL mechanism {mechanism})" if mechanism else ""
        return BrokerError(f"authentication failed for {who} at {at}{how}: {detail}")
    if isinstance(cause, (ak.UnsupportedSaslMechanismError, ak.AuthenticationMethodNotSupported)):
        return BrokerError(
            f"authentication failed at {at}: the broker does not accept SASL mechanism {mechanism}: {detail}"
        )
    if isinstance(cause, ssl.SSLCertVerificationError):
        why = cause.verify_message or cause.reason or detail
        return BrokerError(
            f"TLS handshake with {at} failed: certificate verify failed: {why} "
            "(is --ssl-cafile the CA that signed the broker's certificate?)"
        )
    if isinstance(cause, ssl.SSLError):
        return BrokerError(
            f"TLS handshake with {at} failed: {cause.reason or detail} "
            "(is it a TLS listener, and does --security-protocol match it?)"
        )
    if _kind(cause) == 1:
        who = f"user {user!r}" if user is not None else "the client"
        return BrokerError(f"{who} is not authorized at {at}: {detail}")
    return BrokerError(f"cannot reach Kafka at {at}: {detail}")
