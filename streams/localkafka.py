"""A local single-node Apache Kafka broker (KRaft), without Docker.

The jars come from Maven Central through Maven (`scripts/kafka-pom.xml`) into a cache
folder outside git, once. `start` formats a fresh storage dir, runs the JVM with a small
heap on free localhost ports, waits until the broker answers, and records its pid;
`stop` ends it (SIGTERM, then SIGKILL) so no JVM outlives its user.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from .errors import BrokerError

KAFKA_VERSION = "4.0.2"
ROOT = Path(__file__).resolve().parents[1]
POM = ROOT / "scripts" / "kafka-pom.xml"
DEFAULT_HEAP = "384m"


def cache_dir() -> Path:
    base = os.environ.get("LOOPWARDEN_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "loopwarden")
    return Path(base) / f"kafka-{KAFKA_VERSION}"


def libs_dir() -> Path:
    return cache_dir() / "libs"


def fetch(quiet: bool = True) -> Path:
    """Fetch the broker's jars with Maven (first run only); return the folder."""
    libs = libs_dir()
    if (libs / ".complete").exists():
        return libs
    if shutil.which("mvn") is None:
        raise BrokerError("Maven (mvn) is not installed; it is needed once to fetch the Kafka jars")
    if shutil.which("java") is None:
        raise BrokerError("java is not installed; the local Kafka broker needs Java 17")
    libs.mkdir(parents=True, exist_ok=True)
    cmd = ["mvn", "-B", "-f", str(POM), "dependency:copy-dependencies", "-DincludeScope=runtime",
           f"-Dkafka.version={KAFKA_VERSION}", f"-DoutputDirectory={libs}"]
    if quiet:
        cmd.insert(1, "-q")
    p = subprocess.run(cmd, capture_output=quiet, text=True)
    if p.returncode != 0:
        raise BrokerError(f"mvn could not fetch the Kafka jars (exit {p.returncode}): {(p.stdout or '')[-800:]}")
    if not any(libs.glob("kafka_2.13-*.jar")):
        raise BrokerError(f"mvn finished but no kafka_2.13 jar is in {libs}")
    (libs / ".complete").write_text(KAFKA_VERSION)
    return libs


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_LOG4J = """\
status = warn
appender.file.type = File
appender.file.name = file
appender.file.fileName = {log}
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.file.ref = file
logger.server.name = kafka.server.KafkaRaftServer
logger.server.level = info
"""

_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cport}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}
advertised.listeners=PLAINTEXT://127.0.0.1:{port}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs={data}
num.partitions=8
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.retention.hours=24
"""


@dataclass(frozen=True)
class Broker:
    """A running local broker: where it listens and where its files are."""

    bootstrap: str
    pid: int
    workdir: Path

    def to_json(self) -> str:
        return json.dumps({"bootstrap": self.bootstrap, "pid": self.pid, "workdir": str(self.workdir)})

    @staticmethod
    def from_file(path: Path) -> "Broker":
        d = json.loads(path.read_text())
        return Broker(d["bootstrap"], d["pid"], Path(d["workdir"]))


def _cluster_id() -> str:
    """A random cluster id as Kafka writes them (URL-safe base64 of 16 bytes, no padding)
    that never starts with '-', which StorageTool would read as an option; Kafka's own
    Uuid.randomUuid draws again in that case too."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _java(libs: Path, heap: str, *args: str, full_jit: bool = False) -> list[str]:
    # The quick JIT tier only: a test broker starts and answers sooner; benchmarks want
    # the optimizing compiler too, for the CPU the broker takes from the 2 cores.
    jit = [] if full_jit else ["-XX:TieredStopAtLevel=1"]
    return ["java", f"-Xmx{heap}", f"-Xms{heap}", "-XX:+UseSerialGC", *jit,
            "-Djava.awt.headless=true", "-cp", f"{libs}/*", *args]


def answers(bootstrap: str, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at host:port."""
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def start(workdir: Path, port: int | None = None, heap: str = DEFAULT_HEAP, timeout: float = 90.0,
          full_jit: bool = False) -> Broker:
    """Format a fresh KRaft storage dir in `workdir` and start the broker there.

    A start that fails (a free port taken meanwhile, say) is tried once more on new ports."""
    try:
        return _start(workdir, port, heap, timeout, full_jit)
    except BrokerError:
        if port is not None:
            raise
        return _start(workdir, None, heap, timeout, full_jit)


def _start(workdir: Path, port: int | None, heap: str, timeout: float, full_jit: bool) -> Broker:
    libs = fetch()
    workdir = Path(workdir).resolve()
    if workdir.exists():
        shutil.rmtree(workdir)
    (workdir / "data").mkdir(parents=True)
    port = port or free_port()
    cport = free_port()
    log = workdir / "broker.log"
    (workdir / "log4j2.properties").write_text(_LOG4J.format(log=log))
    props = workdir / "server.properties"
    props.write_text(_PROPERTIES.format(port=port, cport=cport, data=workdir / "data"))
    logcfg = f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}"
    fmt = subprocess.run(
        _java(libs, "256m", logcfg, "kafka.tools.StorageTool", "format", f"--cluster-id={_cluster_id()}",
              "-c", str(props)),
        capture_output=True, text=True,
    )
    if fmt.returncode != 0:
        raise BrokerError(f"formatting the KRaft storage failed: {(fmt.stderr or fmt.stdout)[-800:]}")
    out = open(workdir / "stdout.log", "wb")
    proc = subprocess.Popen(
        _java(libs, heap, logcfg, "kafka.Kafka", str(props), full_jit=full_jit),
        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )
    broker = Broker(f"127.0.0.1:{port}", proc.pid, workdir)
    (workdir / "broker.json").write_text(broker.to_json())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BrokerError(f"the broker exited with {proc.returncode}; see {workdir / 'stdout.log'} and {log}")
        if log.exists() and "Kafka Server started" in log.read_text(errors="replace"):
            return broker
        time.sleep(0.2)
    stop(broker)
    raise BrokerError(f"the broker did not start within {timeout:.0f}s; see {log}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


def stop(broker: Broker, timeout: float = 30.0) -> None:
    """Stop the broker: SIGTERM to its process group, SIGKILL if it lingers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(broker.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + (timeout if sig == signal.SIGTERM else 5)
        while time.monotonic() < deadline:
            try:
                done, _ = os.waitpid(broker.pid, os.WNOHANG)
                if done:
                    return
            except ChildProcessError:
                if not _alive(broker.pid):
                    return
            time.sleep(0.1)
