"""What every test shares: the conformance scenarios, the OpenClaw plugin's npm
packages, installed by the test session itself when they are missing or stale, and the
hooks (the Python hook and the fast hook built around it)."""

import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from streams.hooks import fast
from streams.tools.harness import HOOK

ROOT = Path(__file__).resolve().parents[1]


def conformance_dir() -> Path:
    """The shared scenarios: ../shared/conformance beside the checkout, or $LOOPWARDEN_CONFORMANCE_DIR."""
    return Path(os.environ.get("LOOPWARDEN_CONFORMANCE_DIR", ROOT.parent / "shared" / "conformance"))


def scenario_files(v2: tuple[str, ...] = (), v3: tuple[str, ...] = ()) -> list[Path]:
    """The spec v1 scenarios, and those of `v2/` and `v3/` whose names start with one of
    `v2` or `v3` (e.g. ("210", "230")): the sections a harness carries so far."""
    d = conformance_dir()
    files = sorted(d.glob("*.json"))
    if not files:
        # A missing folder must fail the run, never shrink it to nothing.
        return [d / "MISSING-conformance-scenarios.json"]
    for sub, prefixes in (("v2", v2), ("v3", v3)):
        if prefixes:
            more = sorted(p for p in (d / sub).glob("*.json") if p.name.startswith(prefixes))
            if not more:
                return files + [d / sub / f"MISSING-{sub}-conformance-scenarios.json"]
            files += more
    return files


V2_ALL = ("210", "220", "230", "240")  # budgets, the tool breaker, shadow mode, stop orders
V2_PER_RUN = ("210", "230")  # the v2 sections a worker decides without the fleet stage
V3_ALL = ("250", "260")  # fleet spend caps; repeated failures, progress and cycles
V3_PER_RUN = ("260",)  # the v3 sections a worker decides without the spend stage


PLUGIN = ROOT / "clients" / "openclaw"
NPM_CI = ("ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error")


def openclaw_packages_stale() -> bool:
    """Whether clients/openclaw's node_modules is missing or older than its package-lock.json
    (npm ci writes node_modules/.package-lock.json last)."""
    installed = PLUGIN / "node_modules" / ".package-lock.json"
    return not installed.exists() or installed.stat().st_mtime < (PLUGIN / "package-lock.json").stat().st_mtime


@pytest.fixture(scope="session")
def openclaw_packages() -> Path:
    """The OpenClaw plugin's npm packages (its own Node 24 among them): `npm ci` in
    clients/openclaw when they are missing or stale, once per session, under a file lock
    (two test sessions at once install them once). No npm fails the test, never skips it."""
    key = hashlib.sha256(str(PLUGIN).encode()).hexdigest()[:12]
    with open(Path(tempfile.gettempdir()) / f"loopwarden-npm-ci-{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if openclaw_packages_stale():
            npm = shutil.which("npm")
            assert npm, "npm is not installed: the OpenClaw plugin's tests need Node.js and npm (README, prerequisites)"
            p = subprocess.run([npm, *NPM_CI], cwd=PLUGIN, capture_output=True, text=True, timeout=540)
            assert p.returncode == 0, f"npm ci in {PLUGIN} failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return PLUGIN / "node_modules"


@pytest.fixture(autouse=True)
def _openclaw_tests_get_the_plugins_packages(request):
    """Tests in files named test_openclaw_* run the plugin: its packages are installed
    first (`openclaw_packages`)."""
    if request.node.path.name.startswith("test_openclaw"):
        request.getfixturevalue("openclaw_packages")


# Under pytest-xdist the tests run as two queues, one per process. Every test that uses
# the session's shared broker is in the first, one after another as in a single process:
# two at once made the broker lag (a topic just made unknown for seconds, a breakers
# changelog "with 0 partitions") and starved its controller. The second queue holds what
# never touches that broker: the unit and offline tests, and the integration files that
# run Chromium or brokers of their own; it is done in about 3 minutes, so the broker tests
# run alone after that, as the tests that count decisions exactly want. The OpenClaw
# install and the runtimes' hook checks (Node, 2 minutes of CPU) stay in the first queue.
# Each queue runs in the order collected.
OWN_PROCESSES = {
    "test_audit_html_browser.py",  # Chromium on a report made offline
    "test_localkafka.py",  # brokers of its own
    "test_broker_crash.py",
    "test_openclaw_tls.py",
    "test_security.py",
}


@pytest.fixture(scope="session")
def fast_hook(tmp_path_factory) -> Path:
    """The fast hook, built as `hooks install` builds it (a C compiler is needed), around
    this install's Python hook."""
    assert HOOK.exists(), "pip install -e . installs loopwarden-hook"
    return fast.build(str(HOOK), tmp_path_factory.mktemp("fast-hook") / fast.NAME)


@pytest.fixture(params=["python", "fast"])
def hook(request) -> Path:
    """A hook test that takes this fixture runs with the Python hook and with the fast one."""
    return HOOK if request.param == "python" else request.getfixturevalue("fast_hook")


def pytest_collection_modifyitems(config, items):
    for item in items:
        shared = "integration" in item.path.parts and item.path.name not in OWN_PROCESSES
        item.add_marker(pytest.mark.xdist_group("shared-broker" if shared else "the-rest"))
