"""One real KRaft broker per test session: the one .ci/run started (LOOPWARDEN_TEST_BOOTSTRAP),
or a fresh local one, shared by pytest-xdist's worker processes. No broker means failure,
never a skip. Workers are started through `start_worker`, and stopped when the test ends;
the topics a test made are deleted then."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

import pytest

from streams.tools import localkafka
from tests.integration import harness


@pytest.fixture(scope="session")
def bootstrap(tmp_path_factory) -> str:
    given = os.environ.get("LOOPWARDEN_TEST_BOOTSTRAP")
    if given:
        assert localkafka.answers(given, timeout=5), f"LOOPWARDEN_TEST_BOOTSTRAP={given} does not answer"
        yield given
        return
    if os.environ.get("PYTEST_XDIST_WORKER") is None:  # one process: a broker of its own
        broker = localkafka.start(Path(tmp_path_factory.mktemp("kafka")))
        try:
            yield broker.bootstrap
        finally:
            localkafka.stop(broker)
        return
    # pytest-xdist's workers share one broker: the first to need it starts it, each one
    # counts itself in and out, and the last out stops it.
    shared = tmp_path_factory.getbasetemp().parent  # the same folder for every worker
    with _locked(shared / "kafka.lock"):
        broker = localkafka.start(shared / "kafka")  # a broker running there is given back
        _count(shared / "kafka.users", +1)
    try:
        yield broker.bootstrap
    finally:
        with _locked(shared / "kafka.lock"):
            if _count(shared / "kafka.users", -1) == 0:
                localkafka.stop(broker)


@contextlib.contextmanager
def _locked(path: Path):
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _count(path: Path, step: int) -> int:
    n = (int(path.read_text() or 0) if path.exists() else 0) + step
    path.write_text(str(n))
    return n


@pytest.fixture
def workers():
    """Worker processes started by a test; all are killed when it ends."""
    started: list[harness.WorkerProcess] = []
    yield started
    for w in started:
        w.kill()


@pytest.fixture
def start_worker(request, tmp_path, workers):
    """`start_worker(prefix, config, **kw) -> WorkerProcess`: `loopwarden worker` on the
    topics of `prefix` (None: a fresh prefix, its topics made first; `w.topics` names
    them), healthy on return; killed when the test ends. `bootstrap=`: another broker than
    the session's; `wait=False`: started, not waited for; `start=False`: not started yet;
    the rest goes to WorkerProcess (partitions, name, extra, env)."""

    def start(prefix: str | None, config: dict | None, *, bootstrap: str | None = None, **kw) -> harness.WorkerProcess:
        broker = bootstrap or request.getfixturevalue("bootstrap")
        return harness.launch_worker(broker, tmp_path, workers, prefix, config, **kw)

    return start


def _delete(bootstrap: str | None, prefixes: list[str]) -> None:
    if bootstrap and prefixes:
        harness.delete_topics(bootstrap, prefixes)
    _deleted.update(prefixes)


_deleted: set[str] = set()


@pytest.fixture(autouse=True)
def _delete_the_tests_topics(request):
    """The topics of every prefix made during the test (`new_prefix`) are deleted on the
    session's broker once it ends, after its workers (autouse: set up first, torn down
    last)."""
    mark = len(harness.PREFIXES)
    yield
    made = harness.PREFIXES[mark:]
    if made and "bootstrap" in request.fixturenames:
        _delete(request.getfixturevalue("bootstrap"), made)


@pytest.fixture(autouse=True, scope="session")
def _delete_leftover_topics():
    """Topics of prefixes made outside a test (module fixtures), on the shared broker, at
    the session's end (a broker the session started goes with its data)."""
    yield
    _delete(os.environ.get("LOOPWARDEN_TEST_BOOTSTRAP"), [p for p in harness.PREFIXES if p not in _deleted])
