"""A local single-node Apache Kafka broker (KRaft), without Docker.

The jars come from Maven Central through Maven (`scripts/kafka-pom.xml`) into a cache
folder outside git, once. `start` formats a KRaft storage dir on first use (or when asked
for a fresh one) and otherwise restarts the broker already formatted there, with its data
and on the ports it had; it runs the JVM with a small heap, waits until the broker
answers, and records its pid; `stop` ends it (SIGTERM, then SIGKILL) so no JVM outlives
its user.

A broker can also get a SASL_SSL listener (SCRAM users, a keystore signed by a CA of your
own; `make_ca` and `make_keystore` make both with openssl) beside its PLAINTEXT one.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ..kafka.errors import BrokerError

KAFKA_VERSION = "4.0.2"
ROOT = Path(__file__).resolve().parents[2]
POM = ROOT / "scripts" / "kafka-pom.xml"
# A whole test run makes about 10,000 partitions (every test its own prefix, every prefix
# its topics, changelogs and the fleet's); with 384 MB the broker ran out of heap there.
DEFAULT_HEAP = "768m"
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
SCRAM_ITERATIONS = 8192
# Everything `start` writes in its folder; a fresh start removes these and nothing else.
BROKER_FILES = ("data", "tls", "server.properties", "log4j2.properties", "broker.json", "broker.log", "stdout.log")


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
    cmd = [
        "mvn",
        "-B",
        "-f",
        str(POM),
        "dependency:copy-dependencies",
        "-DincludeScope=runtime",
        f"-Dkafka.version={KAFKA_VERSION}",
        f"-DoutputDirectory={libs}",
    ]
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
        port: int = s.getsockname()[1]
        return port


def port_free(port: int) -> bool:
    """Whether a listener could bind 127.0.0.1:port now (as the JVM binds: SO_REUSEADDR,
    so connections of an earlier run still in TIME_WAIT do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


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

# A restarted broker can register only once its controller has given up on the previous
# run's registration: a session of 6 s (the default is 9 s) makes restarts that much quicker.
# Not shorter: on a loaded machine the controller has stalled 4.8 s, and a broker whose
# session ends is fenced, which leaves every topic without a leader until it is back.
_PROPERTIES = """\
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@127.0.0.1:{cport}
listeners={listeners}
advertised.listeners={advertised}
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map={protocols}
log.dirs={data}
num.partitions=8
offsets.topic.replication.factor=1
offsets.topic.num.partitions=8
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
group.initial.rebalance.delay.ms=0
auto.create.topics.enable=true
log.retention.hours=24
broker.heartbeat.interval.ms=500
broker.session.timeout.ms=6000
"""

_SASL_SSL_PROPERTIES = """\
sasl.enabled.mechanisms={mechanisms}
ssl.keystore.type=PKCS12
ssl.keystore.location={keystore}
ssl.keystore.password={password}
ssl.key.password={password}
ssl.client.auth=none
"""


@dataclass(frozen=True)
class SaslSsl:
    """An extra SASL_SSL listener: SCRAM `users` (name -> password, created when the
    storage is formatted, for each of `mechanisms`) and the broker's PKCS12 `keystore`
    (see `make_keystore`), which is copied into the broker's folder."""

    users: Mapping[str, str]
    keystore: Path
    keystore_password: str
    mechanisms: tuple[str, ...] = SCRAM_MECHANISMS
    port: int | None = None

    def check(self) -> None:
        bad = [m for m in self.mechanisms if m not in SCRAM_MECHANISMS]
        if bad or not self.mechanisms:
            raise BrokerError(
                f"SASL mechanisms must be among {', '.join(SCRAM_MECHANISMS)}, got {list(self.mechanisms)}"
            )
        if not self.users:
            raise BrokerError("a SASL_SSL listener needs at least one SCRAM user")
        for name in self.users:
            # StorageTool's --add-scram reads name="..." up to the next quote.
            if not name or '"' in name or not name.isprintable():
                raise BrokerError(f"SCRAM user name {name!r} cannot be used (empty, a quote or a control character)")
        if not self.keystore_password.isprintable() or "\\" in self.keystore_password:
            raise BrokerError(
                "the keystore password cannot hold a backslash or a control character "
                "(it goes into server.properties as it is)"
            )
        if not Path(self.keystore).is_file():
            raise BrokerError(f"the keystore {self.keystore} does not exist")


@dataclass(frozen=True)
class Broker:
    """A running local broker: where it listens and where its files are. `sasl_ssl` is
    the address of its SASL_SSL listener, when it has one."""

    bootstrap: str
    pid: int
    workdir: Path
    sasl_ssl: str | None = None

    def to_json(self) -> str:
        return json.dumps(
            {"bootstrap": self.bootstrap, "pid": self.pid, "workdir": str(self.workdir), "sasl_ssl": self.sasl_ssl}
        )

    @staticmethod
    def from_file(path: Path) -> Broker:
        d = json.loads(path.read_text())
        return Broker(d["bootstrap"], d["pid"], Path(d["workdir"]), d.get("sasl_ssl"))


def _cluster_id() -> str:
    """A random cluster id as Kafka writes them (URL-safe base64 of 16 bytes, no padding)
    that never starts with '-', which StorageTool would read as an option; Kafka's own
    Uuid.randomUuid draws again in that case too."""
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def _scram_credential(mechanism: str, name: str, password: str) -> str:
    """StorageTool's --add-scram value with a salted password, so the clear password
    never appears on a command line."""
    algo = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}[mechanism]
    salt = os.urandom(16)
    salted = hashlib.pbkdf2_hmac(algo, password.encode(), salt, SCRAM_ITERATIONS)
    b64 = base64.b64encode
    return (
        f'{mechanism}=[name="{name}",iterations={SCRAM_ITERATIONS},'
        f'salt="{b64(salt).decode()}",saltedpassword="{b64(salted).decode()}"]'
    )


def _java(libs: Path, heap: str, *args: str, full_jit: bool = False) -> list[str]:
    # The quick JIT tier only: a test broker starts and answers sooner; benchmarks want
    # the optimizing compiler too, for the CPU the broker takes from the 2 cores.
    jit = [] if full_jit else ["-XX:TieredStopAtLevel=1"]
    return [
        "java",
        f"-Xmx{heap}",
        f"-Xms{heap}",
        "-XX:+UseSerialGC",
        *jit,
        "-Djava.awt.headless=true",
        "-cp",
        f"{libs}/*",
        *args,
    ]


def answers(bootstrap: str, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at host:port."""
    host, _, port = bootstrap.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def formatted(workdir: Path) -> bool:
    """Whether `workdir` holds a broker `start` formatted: its config and its storage."""
    workdir = Path(workdir)
    return (workdir / "server.properties").is_file() and (workdir / "data" / "meta.properties").is_file()


def running(workdir: Path) -> Broker | None:
    """The broker recorded in `workdir` if its JVM is still running, else None."""
    state = Path(workdir) / "broker.json"
    try:
        broker = Broker.from_file(state)
    except (OSError, ValueError, KeyError):
        return None
    if not _alive(broker.pid):
        return None
    try:  # the pid may have been reused: it must be the JVM started on this folder's config
        cmdline = Path(f"/proc/{broker.pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return broker if answers(broker.bootstrap) else None
    props = str(Path(workdir).resolve() / "server.properties").encode()
    return broker if b"kafka.Kafka" in cmdline and props in cmdline else None


def start(
    workdir: Path,
    port: int | None = None,
    heap: str = DEFAULT_HEAP,
    timeout: float = 90.0,
    full_jit: bool = False,
    fresh: bool = False,
    sasl_ssl: SaslSsl | None = None,
) -> Broker:
    """Start a broker in `workdir` and return it.

    A folder that already holds a formatted broker (see `formatted`) gets that broker
    back, with its data and on the ports it had, so its bootstrap address is the same
    (a BrokerError when a listener port is taken now); if it is running already, it is
    returned as it is. Otherwise, or with `fresh=True` (which first deletes the broker's
    files in the folder, BROKER_FILES, and nothing else), a new KRaft storage is
    formatted; `sasl_ssl` then adds a SASL_SSL listener with its SCRAM users (on a
    restart it only has to agree with the listener the broker was made with: the users
    were created at format time). A fresh start that fails (a free port taken meanwhile,
    say) is tried once more on new ports."""
    workdir = Path(workdir).resolve()
    if sasl_ssl is not None:
        sasl_ssl.check()
    if fresh:
        live = running(workdir)
        if live is not None:
            raise BrokerError(f"a broker is running in {workdir} (pid {live.pid}, at {live.bootstrap}); stop it first")
        _remove_broker_files(workdir)
    elif formatted(workdir):
        return _restart(workdir, port, heap, timeout, full_jit, sasl_ssl)
    try:
        return _start_new(workdir, port, heap, timeout, full_jit, sasl_ssl)
    except BrokerError:
        if port is not None or (sasl_ssl is not None and sasl_ssl.port is not None):
            raise
        return _start_new(workdir, None, heap, timeout, full_jit, sasl_ssl)


def _remove_broker_files(workdir: Path) -> None:
    for name in BROKER_FILES:
        p = workdir / name
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        elif p.exists() or p.is_symlink():
            p.unlink()


def _listeners(port: int, cport: int, sport: int | None) -> dict[str, str]:
    listeners = f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{cport}"
    advertised = f"PLAINTEXT://127.0.0.1:{port}"
    protocols = "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT"
    if sport is not None:
        listeners += f",SASL_SSL://127.0.0.1:{sport}"
        advertised += f",SASL_SSL://127.0.0.1:{sport}"
        protocols += ",SASL_SSL:SASL_SSL"
    return {"listeners": listeners, "advertised": advertised, "protocols": protocols}


def _start_new(
    workdir: Path, port: int | None, heap: str, timeout: float, full_jit: bool, sasl_ssl: SaslSsl | None
) -> Broker:
    libs = fetch()
    keystore = None if sasl_ssl is None else Path(sasl_ssl.keystore).read_bytes()  # it may be in workdir/tls
    _remove_broker_files(workdir)  # what an attempt that failed before formatting left behind
    (workdir / "data").mkdir(parents=True)
    port = port or free_port()
    cport = free_port()
    sport = None if sasl_ssl is None else (sasl_ssl.port or free_port())
    log = workdir / "broker.log"
    (workdir / "log4j2.properties").write_text(_LOG4J.format(log=log))
    props = workdir / "server.properties"
    text = _PROPERTIES.format(cport=cport, data=workdir / "data", **_listeners(port, cport, sport))
    scram: list[str] = []
    if sasl_ssl is not None:
        tls = workdir / "tls"
        tls.mkdir(mode=0o700)
        assert keystore is not None  # read above when sasl_ssl is given
        (tls / "broker.p12").write_bytes(keystore)
        text += _SASL_SSL_PROPERTIES.format(
            mechanisms=",".join(sasl_ssl.mechanisms), keystore=tls / "broker.p12", password=sasl_ssl.keystore_password
        )
        for m in sasl_ssl.mechanisms:
            text += (
                f"listener.name.sasl_ssl.{m.lower()}.sasl.jaas.config="
                "org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
            )
            for name, password in sasl_ssl.users.items():
                scram += ["--add-scram", _scram_credential(m, name, password)]
    # The config holds the keystore password when there is one: only its owner reads it.
    fd = os.open(props, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    logcfg = f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}"
    fmt = subprocess.run(
        _java(
            libs,
            "256m",
            logcfg,
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={_cluster_id()}",
            "-c",
            str(props),
            *scram,
        ),
        capture_output=True,
        text=True,
    )
    if fmt.returncode != 0:
        raise BrokerError(f"formatting the KRaft storage failed: {(fmt.stderr or fmt.stdout)[-800:]}")
    return _launch(workdir, libs, heap, timeout, full_jit, port, sport)


def _recorded_ports(props: Path) -> dict[str, int]:
    """Listener name -> port, from a server.properties `start` wrote."""
    m = re.search(r"^listeners=(.*)$", props.read_text(), re.M)
    if not m:
        raise BrokerError(f"{props} names no listeners; start with fresh=True (--fresh) to make a new broker")
    out = {}
    for item in m.group(1).split(","):
        name, _, addr = item.strip().partition("://")
        out[name] = int(addr.rpartition(":")[2])
    return out


def _restart(
    workdir: Path, port: int | None, heap: str, timeout: float, full_jit: bool, sasl_ssl: SaslSsl | None
) -> Broker:
    live = running(workdir)
    if live is not None:
        return live
    props = workdir / "server.properties"
    ports = _recorded_ports(props)
    if port is not None and port != ports.get("PLAINTEXT"):
        raise BrokerError(
            f"the broker in {workdir} listens on port {ports.get('PLAINTEXT')}, not {port}; "
            "start it without a port, or with fresh=True (--fresh) to make a new one"
        )
    if sasl_ssl is not None and "SASL_SSL" not in ports:
        raise BrokerError(
            f"the broker in {workdir} was made without a SASL_SSL listener; "
            "start it with fresh=True (--fresh) to make a new one"
        )
    if sasl_ssl is not None and sasl_ssl.port is not None and sasl_ssl.port != ports["SASL_SSL"]:
        raise BrokerError(
            f"the broker in {workdir} has its SASL_SSL listener on port {ports['SASL_SSL']}, not {sasl_ssl.port}"
        )
    for name in ("PLAINTEXT", "SASL_SSL"):
        if name in ports and not port_free(ports[name]):
            raise BrokerError(
                f"port {ports[name]} of the broker in {workdir} ({name}) is taken by another "
                "process; free it to restart the broker with its data at the same address, "
                "or start with fresh=True (--fresh) for a new broker on new ports"
            )
    libs = fetch()
    cport = ports["CONTROLLER"]
    if not port_free(cport):  # only the broker itself uses it: move it
        new = free_port()
        props.write_text(re.sub(rf"127\.0\.0\.1:{cport}\b", f"127.0.0.1:{new}", props.read_text()))
    return _launch(workdir, libs, heap, timeout, full_jit, ports["PLAINTEXT"], ports.get("SASL_SSL"))


def _launch(
    workdir: Path, libs: Path, heap: str, timeout: float, full_jit: bool, port: int, sport: int | None
) -> Broker:
    log = workdir / "broker.log"
    seen = log.stat().st_size if log.exists() else 0  # a restart appends to the log of earlier runs
    props = workdir / "server.properties"
    logcfg = f"-Dlog4j2.configurationFile={workdir / 'log4j2.properties'}"
    with open(workdir / "stdout.log", "ab") as out:
        proc = subprocess.Popen(
            _java(libs, heap, logcfg, "kafka.Kafka", str(props), full_jit=full_jit),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    broker = Broker(f"127.0.0.1:{port}", proc.pid, workdir, None if sport is None else f"127.0.0.1:{sport}")
    (workdir / "broker.json").write_text(broker.to_json())
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BrokerError(f"the broker exited with {proc.returncode}; see {workdir / 'stdout.log'} and {log}")
        if log.exists():
            with open(log, "rb") as f:
                f.seek(seen)
                if b"Kafka Server started" in f.read():
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


def _openssl(*args: str, env: Mapping[str, str] | None = None) -> None:
    if shutil.which("openssl") is None:
        raise BrokerError("openssl is not installed; it makes the test CA and the broker's keystore")
    p = subprocess.run(
        ["openssl", *args], capture_output=True, text=True, env=None if env is None else {**os.environ, **env}
    )
    if p.returncode != 0:
        raise BrokerError(f"openssl {args[0]} failed: {(p.stderr or p.stdout)[-800:]}")


def make_ca(folder: Path, name: str = "loopwarden test CA", days: int = 2) -> tuple[Path, Path]:
    """A throwaway certificate authority in `folder`: (ca.pem, ca.key). For tests only:
    its key is not encrypted."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    cert, key = folder / "ca.pem", folder / "ca.key"
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        str(key),
        "-out",
        str(cert),
        "-days",
        str(days),
        "-subj",
        f"/CN={name}",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    )
    return cert, key


def make_keystore(
    ca_cert: Path,
    ca_key: Path,
    folder: Path,
    password: str,
    days: int = 2,
    hosts: tuple[str, ...] = ("127.0.0.1", "localhost"),
) -> Path:
    """The broker's PKCS12 keystore in `folder`: a new key and a certificate for `hosts`
    (the subject alternative names clients check) signed by the CA, with the CA's
    certificate in the chain. Returns its path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    key, csr, cert, ext = (folder / n for n in ("broker.key", "broker.csr", "broker.pem", "broker.ext"))
    san = ",".join(f"IP:{h}" if re.fullmatch(r"[0-9.]+|[0-9a-fA-F:]+", h) else f"DNS:{h}" for h in hosts)
    ext.write_text(
        f"subjectAltName={san}\nbasicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,"
        "keyEncipherment\nextendedKeyUsage=serverAuth\n"
    )
    _openssl(
        *("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(csr)),
        *("-subj", f"/CN={hosts[0]}"),
    )
    serial = str(int.from_bytes(os.urandom(8), "big"))
    _openssl(
        *("x509", "-req", "-in", str(csr), "-CA", str(ca_cert), "-CAkey", str(ca_key), "-set_serial", serial),
        *("-days", str(days), "-extfile", str(ext), "-out", str(cert)),
    )
    store = folder / "broker.p12"
    _openssl(
        *("pkcs12", "-export", "-inkey", str(key), "-in", str(cert), "-certfile", str(ca_cert), "-name", "broker"),
        *("-out", str(store), "-passout", "env:LOOPWARDEN_KEYSTORE_PASSWORD"),
        env={"LOOPWARDEN_KEYSTORE_PASSWORD": password},
    )
    return store
