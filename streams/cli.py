"""The `loopwarden` command: every subcommand is registered here, and nowhere else.

Each subcommand is a `cmd_*` function that parses nothing itself and returns an
ExitCode; the work lives in the module it names. The exit codes, for every subcommand:

    0  done
    1  error: `Error: ...` on stderr names it; nothing, or not everything, was done
    2  the command line is wrong (argparse names the option), or a check found what it
       looks for: `simulate` missed a loop or flagged a normal run; `audit` found
       mismatched, missing, unexpected or conflicting decisions
    3  `replay` finished, but some input lines were malformed (each named on stderr)
  130  stopped by Ctrl-C (SIGINT) before it was done (`top --once`, `demo`); a `worker`
       only when its graceful stop did not finish in time (it exits 0 when it did)
  143  stopped by SIGTERM: `demo`; a `worker` as for 130
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, TYPE_CHECKING

from detectors.errors import LoopwardenError

from .kafka import settings as settings_mod
from .kafka.errors import SettingsError
from .worker.settings import CONSUMERS

if TYPE_CHECKING:
    from detectors import DetectionConfig

    from .tools.simulate import Burst, SimOptions

CONFIG_FIELDS = (
    "OpenClaw's tools.loopDetection (global and per agent under agents.list) and loopwarden's own block: "
    "loopwarden.runIdleTimeoutMs, loopwarden.budgets.{runTokens,runCostUsd,runToolCalls} and loopwarden.enforce "
    "(global or per agent), loopwarden.holdoutPercent, loopwarden.fleet.toolBreaker.{enabled,minRuns,windowMs,"
    "coolDownMs} (README, Config)"
)
DEFAULT_LOOKBACK = "24h"  # the default run idle timeout (semantics.md section 7)
DEFAULT_GRACE = "5m"


class ExitCode(enum.IntEnum):
    OK = 0
    ERROR = 1
    FOUND = 2  # also argparse's usage error
    BAD_INPUT = 3
    SIGINT = 130
    SIGTERM = 143


EPILOG = """exit codes: 0 done; 1 error (named on stderr); 2 wrong command line, or simulate
found a missed loop or a flagged normal run, or audit found decisions that differ; 3
replay skipped malformed lines; 130/143 stopped by SIGINT/SIGTERM before done (a worker:
only when its graceful stop had to be cut short)."""


WORKER_PACKAGES = ("faust", "mode", "prometheus_client", "rich")


@contextlib.contextmanager
def _needs_worker_extra(command: str) -> Iterator[None]:
    """A plain install has the client and the core only; say what to install."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in WORKER_PACKAGES:
            raise
        raise LoopwardenError(
            f"`loopwarden {command}` needs the worker extra ({exc.name} is not installed): "
            "pip install 'loopwarden[worker]'"
        ) from None


# `--from -10m`: a relative time is a value, not an option (argparse takes only plain
# negative numbers for values); no parser has an option that looks like one.
RELATIVE_TIME = re.compile(r"^-\d+(\.\d+)?\s*(s|sec|m|min|h|d)?$")


def _read_config(path: str | None) -> DetectionConfig:
    return settings_mod.read_detection_config(path, warn=lambda p, w: print(f"warning: {p}: {w}", file=sys.stderr))


def _settings(args: argparse.Namespace) -> settings_mod.Settings:
    return settings_mod.build(vars(args))


def cmd_replay(args: argparse.Namespace) -> int:
    from .replay import file_size, read_fleet_file, run_replay

    config = _read_config(args.config)
    with contextlib.ExitStack() as files:

        def open_file(path: str | None, mode: str, std: IO[bytes] | None, what: str) -> IO[bytes] | None:
            if path is None:
                return None
            if path == "-":
                return std
            try:
                return files.enter_context(open(path, mode))
            except OSError as exc:
                raise LoopwardenError(f"cannot {what} {path}: {exc.strerror}") from None

        src = open_file(args.input, "rb", sys.stdin.buffer, "read input")
        dst = open_file(args.output, "wb", sys.stdout.buffer, "write output")
        dead = open_file(args.dead_letter, "wb", None, "write dead letters to")
        assert src is not None and dst is not None  # --input and --output default to "-"
        total = None if args.input == "-" else file_size(args.input)
        fleet = read_fleet_file(args.fleet) if args.fleet else ()
        report = run_replay(config, src, dst, sys.stderr, dead, args.max_event_bytes, total, fleet)
    if args.stats:
        print(json.dumps(report.as_dict(), indent=None if args.json else 2), file=sys.stderr)
    if report.bad:
        print(f"{report.bad} malformed line(s) skipped", file=sys.stderr)
        return ExitCode.BAD_INPUT
    return ExitCode.OK


def cmd_audit(args: argparse.Namespace) -> int:
    import time

    from .audit.command import run_audit
    from .audit.options import AuditOptions

    return run_audit(_settings(args), AuditOptions.from_args(args, time.time()))


def cmd_worker(args: argparse.Namespace) -> int:
    with _needs_worker_extra("worker"):
        from .worker.app import run_worker
        from .worker.settings import WorkerSettings

    run_worker(settings_mod.build(vars(args), kind=WorkerSettings))
    return ExitCode.OK


def cmd_topics(args: argparse.Namespace) -> int:
    s = _settings(args)
    import asyncio  # here, not at the top: `replay` starts faster without it

    from .admin.topics import create_topics, topic_specs

    created = asyncio.run(create_topics(s))
    names = [name for name, _, _ in topic_specs(s)]
    if args.json:
        print(json.dumps({"created": created, "topics": names}))
    else:
        for n in names:
            print(f"{n}: {'created' if n in created else 'exists'}")
    return ExitCode.OK


def cmd_stop(args: argparse.Namespace) -> int:
    import asyncio
    import time

    from .admin import fleet_topic
    from .times import parse_duration, parse_from

    s = _settings(args)
    now_ms = int(time.time() * 1000)
    issued_by = args.issued_by or os.environ.get("USER")
    if args.list:
        rows = fleet_topic.listing(asyncio.run(fleet_topic.read_fleet(s)), now_ms)
        if args.json:
            print(json.dumps(rows))
        for r in [] if args.json else rows:
            print(fleet_topic.list_line(r))
        return ExitCode.OK
    if args.lift:
        lifted = asyncio.run(fleet_topic.lift(s, args.lift, now_ms, issued_by))
        print(json.dumps(fleet_topic.describe(lifted, now_ms)) if args.json else lifted.id)
        return ExitCode.OK
    start = parse_from(args.from_time, now_ms / 1000, "--from")
    if start == "beginning":
        raise LoopwardenError("--from: give a time (or leave it out: now)")
    from_ms = now_ms if start == "now" else int(float(start) * 1000)
    until = None if args.duration is None else from_ms + int(parse_duration(args.duration, "--for") * 1000)
    order = fleet_topic.make_order(
        agent_id=args.agent,
        gateway_id=args.gateway,
        run_id=args.run,
        from_ts=from_ms,
        until_ts=until,
        reason=args.reason or "",
        issued_by=issued_by,
        order_id=fleet_topic.new_order_id(now_ms),
    )
    asyncio.run(fleet_topic.publish_order(s, order, now_ms))
    print(json.dumps(fleet_topic.describe(order, now_ms)) if args.json else order.id)
    return ExitCode.OK


def cmd_spend(args: argparse.Namespace) -> int:
    import asyncio
    import time

    from .admin import spend

    s = _settings(args)
    config = _read_config(args.config) if args.config else None
    rep = asyncio.run(spend.spend_report(s, config, args.config, int(time.time() * 1000), args.limit))
    print(json.dumps(rep) if args.json else "\n".join(spend.text_lines(rep)))
    return ExitCode.OK


def cmd_alerts(args: argparse.Namespace) -> int:
    from .admin import alerts

    opts = alerts.AlertsOptions(
        webhook=args.webhook,
        format=args.format,
        group=args.group,
        from_beginning=args.from_beginning,
        timeout_s=args.timeout_s,
        max_backoff_s=args.max_backoff_s,
        count=args.count,
    )
    alerts.run(_settings(args), opts)
    return ExitCode.OK


def cmd_config(args: argparse.Namespace) -> int:
    import asyncio

    from .admin.config_topic import publish_config, read_configs

    s = _settings(args)
    if args.action == "publish":
        try:
            raw = Path(args.file).read_bytes()
        except OSError as exc:
            raise LoopwardenError(f"cannot read config {args.file}: {exc.strerror}") from None
        cid = asyncio.run(
            publish_config(s, raw, args.file, warn=lambda w: print(f"warning: {args.file}: {w}", file=sys.stderr))
        )
        print(cid)
        return ExitCode.OK
    history = asyncio.run(read_configs(s))
    if history.current is None:
        raise LoopwardenError(
            f"no config has been published on {s.config_topic} "
            "(workers there decide under the built-in defaults): loopwarden config publish FILE"
        )
    if history.current not in history.configs:
        raise LoopwardenError(
            f"the current config {history.current} is not on {s.config_topic} (unreadable or removed)"
        )
    raw = history.configs[history.current][0]
    source = history.sources.get(history.current, "")
    text = raw.decode("utf-8")  # published configs were checked to be UTF-8
    if args.json:
        print(json.dumps({"config": history.current, "source": source, "text": text}))
    else:
        print(f"config: {history.current}\nsource: {source}\n")
        print(text, end="" if text.endswith("\n") else "\n")
    return ExitCode.OK


def cmd_kafka(args: argparse.Namespace) -> int:
    from .tools import localkafka

    workdir = Path(args.dir)
    if args.action == "fetch":
        print(localkafka.fetch(quiet=False))
    elif args.action == "start":
        b = localkafka.start(workdir, port=args.port, heap=args.heap, fresh=args.fresh)
        print(b.bootstrap)
    elif args.action == "stop":
        found = localkafka.running(workdir)
        if found is None:
            # Only a broker known to be running is signalled: a recorded pid may belong to
            # another process by now.
            print(f"no broker running in {workdir}", file=sys.stderr)
            return ExitCode.OK
        localkafka.stop(found)
        print("stopped")
    return ExitCode.OK


def cmd_demo(args: argparse.Namespace) -> int:
    with _needs_worker_extra("demo"):
        from .tools.demo import DemoOptions, run_demo

    return run_demo(DemoOptions(args.seconds, args.gateways, args.bootstrap))


def cmd_top(args: argparse.Namespace) -> int:
    import time

    from .times import parse_from

    with _needs_worker_extra("top"):
        from .tools.top import TopOptions, run_top

    start = parse_from(args.start, time.time())
    if args.once and args.start is None and args.seconds is None:
        start = "beginning"  # --once alone: what is on the topic now
    if args.seconds is not None and args.seconds <= 0:
        raise SettingsError(f"--seconds must be positive, got {args.seconds}")
    opts = TopOptions(
        start=start,
        once=args.once,
        json=args.json,
        seconds=args.seconds,
        worker_metrics=tuple(args.worker_metrics or ()),
        forget_after=args.forget_after,
        screen=not args.no_screen,
    )
    return run_top(_settings(args), opts)


def cmd_simulate(args: argparse.Namespace) -> int:
    with _needs_worker_extra("simulate"):
        from .tools.simulate import main_simulate

    return main_simulate(_settings(args), sim_options(args))


def sim_burst(text: str, agents: int) -> Burst:
    """`--burst AGENT@SECONDS:FACTOR`, an agent of the simulated fleet (`--agents N`'s, or
    the breaker loops' own); a SettingsError names what is wrong."""
    from .tools.loops import BREAKER_AGENT
    from .tools.simulate import Burst, agent_names

    agent, _, when = text.rpartition("@")
    at, _, factor = when.partition(":")
    try:
        burst = Burst(agent.strip(), float(at), float(factor))
    except ValueError:
        raise SettingsError(f"--burst {text!r} is not AGENT@SECONDS:FACTOR (sim-agent-0@30:5)") from None
    if not (burst.at_s >= 0 and burst.factor >= 1 and burst.factor < float("inf")):
        raise SettingsError(f"--burst {text!r}: SECONDS must be at least 0 and FACTOR a number of at least 1")
    names = [*agent_names(agents), BREAKER_AGENT]
    if burst.agent.lower() not in names:
        raise SettingsError(
            f"--burst: {burst.agent!r} is not an agent of the simulated fleet; with --agents {max(agents, 1)} its "
            f"agents are {', '.join(agent_names(max(agents, 1)))} (and {BREAKER_AGENT}, the breaker loops')"
        )
    return burst


def sim_options(args: argparse.Namespace) -> SimOptions:
    """`loopwarden simulate`'s options; a SettingsError names a bad value."""
    from .tools.simulate import SimOptions

    lo, _, hi = args.think_ms.partition(":")
    try:
        think = (float(lo), float(hi or lo))
    except ValueError:
        raise SettingsError(f"--think-ms {args.think_ms!r} is not LO:HI milliseconds (5:50)") from None
    if args.agents < 0:
        raise SettingsError(f"--agents {args.agents}: a number of agents, 0 or more")
    if args.holdout is not None and not 0 <= args.holdout <= 100:
        raise SettingsError(f"--holdout {args.holdout} is not a percentage from 0 to 100")
    opts = SimOptions(
        gateways=args.gateways,
        runs=args.runs,
        seconds=args.seconds,
        loop_share=args.loop_share,
        think_ms=think,
        seed=args.seed,
        timeout_s=args.timeout,
        holdout=args.holdout,
        quiet=args.quiet,
        agents=args.agents,
        burst=sim_burst(args.burst, args.agents) if args.burst is not None else None,
    )
    return opts


def cmd_hooks(args: argparse.Namespace) -> int:
    if args.action == "serve":
        from .hooks.sidecar import ServeOptions, run_serve

        serve = ServeOptions(
            listen=args.listen,
            gateway_id=args.gateway_id,
            agent_id=args.agent_id,
            timeout_s=args.timeout_s,
            fail_closed=args.fail_closed,
            raw=args.raw,
            max_input_bytes=args.max_input_bytes,
            log_level=args.log_level,
        )
        run_serve(_settings(args), serve)
        return ExitCode.OK
    from .hooks.install import InstallOptions, run_install

    install = InstallOptions(
        runtime=args.runtime,
        project=args.project,
        user=args.user,
        print=args.print,
        fail_closed=args.fail_closed,
        url=args.url,
        http=args.http,
        hook_command=args.hook_command,
    )
    return run_install(install)


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return n


def _worker_flags(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("kafka (each also LOOPWARDEN_<NAME>, e.g. LOOPWARDEN_BOOTSTRAP)")
    g.add_argument("--bootstrap", help="broker host:port (default 127.0.0.1:9092)")
    g.add_argument("--topic-prefix", help="prefix of every topic name (default 'loopwarden.')")
    g.add_argument("--partitions", type=int, help="partitions of the topics (default 8)")
    g.add_argument("--replication", type=int, help="replication factor of created topics (default 1)")
    g.add_argument("--security-protocol", help="PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL")
    g.add_argument("--sasl-mechanism", help="PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512")
    g.add_argument("--sasl-username")
    g.add_argument("--sasl-password")
    g.add_argument("--ssl-cafile")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loopwarden",
        description="Fleet-wide guard against runaway AI-agent tool loops: decides allow / warn / "
        "block / abort for every tool call, offline (replay) or on Kafka (worker).",
        epilog=EPILOG,
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    r = sub.add_parser(
        "replay",
        help="fold a JSONL file of events offline and write the decisions (no Kafka)",
        description="Replay events (one JSON object a line) through the detection engine and write "
        "one decision per line, in the order produced. Malformed lines are named on stderr "
        "(line number and reason) and skipped; the exit code is 3 when any were (see `loopwarden --help` for "
        "every exit code).",
    )
    r.add_argument(
        "--config",
        metavar="FILE",
        help="detection config, JSON or JSON5 (default: built-in defaults); " + CONFIG_FIELDS,
    )
    r.add_argument("--input", "-i", default="-", metavar="EVENTS.jsonl", help="events to replay; - for stdin (default)")
    r.add_argument(
        "--output", "-o", default="-", metavar="DECISIONS.jsonl", help="where decisions go; - for stdout (default)"
    )
    r.add_argument("--dead-letter", metavar="FILE", help="also write each rejected line here, as JSONL with its error")
    r.add_argument(
        "--fleet",
        metavar="FILE",
        help="stop orders and spend cap lifts to judge calls against: a JSONL file of fleet records as on the "
        'fleet topic ({"kind": "stop", "id", "agent_id" | "gateway_id" | "run_id", "from_ts", "until_ts", '
        '"reason"}; {"kind": "spend_cap", "id", ..., "until_ts"}, which ends that cap signal early); breakers '
        "are opened from the input itself when loopwarden.fleet.toolBreaker is enabled, and spend caps "
        "(loopwarden.fleet.spendCaps) are reached from it",
    )
    r.add_argument("--stats", action="store_true", help="print counts by action and detector on stderr at the end")
    r.add_argument("--json", action="store_true", help="with --stats: print them as one compact JSON line")
    r.add_argument(
        "--max-event-bytes", type=int, default=1 << 20, metavar="N", help="larger lines are rejected (default 1 MiB)"
    )
    r.set_defaults(func=cmd_replay)

    w = sub.add_parser(
        "worker",
        help="run a stream worker (Faust) that decides every event on Kafka",
        description="Consume the events topic, keep each run's state in a changelog-backed "
        "table, publish decisions keyed by gateway_id. Metrics at /metrics, health at /health.",
    )
    _worker_flags(w)
    w.add_argument(
        "--config", help="detection config file, JSON or JSON5 (default: follow the config topic); " + CONFIG_FIELDS
    )
    w.add_argument("--web-port", type=int, help="port of /metrics and /health (default 6066)")
    w.add_argument("--web-host", help="address of /metrics and /health (default 127.0.0.1)")
    w.add_argument("--data-dir", help="Faust's working folder (default .loopwarden-data)")
    w.add_argument("--max-event-bytes", type=int, help="larger events go to the dead-letter topic (default 1 MiB)")
    w.add_argument("--batch-max", type=int, help="most events folded in one batch (default 500)")
    w.add_argument(
        "--batch-linger-ms",
        type=float,
        help="while the worker is behind (at least --batch-max events waiting), wait up to this "
        "long for a full batch (default 10; 0: never). Caught up, an event is folded at once",
    )
    w.add_argument(
        "--flush-interval-ms",
        type=float,
        help="how often touched run states are written to the changelog and the input is "
        "acknowledged (default 1000; 0: whenever something is pending, checked every 50 ms). "
        "A crashed worker's successor replays the input since the last commit (at most about "
        "this plus Faust's 2.8 s commit interval), which the engine answers as before",
    )
    w.add_argument(
        "--producer-linger-ms",
        type=float,
        help="linger of Faust's own producer (offsets, internal topics; default 5 ms); decisions and "
        "state writes go out in explicit batches",
    )
    w.add_argument(
        "--fetch-bytes-per-partition",
        type=int,
        help="most bytes one fetch of the events topic brings per partition (default 4 MiB; Faust's own default, "
        "1 MiB, holds the workers' throughput down); a worker buffers at most this per assigned partition",
    )
    w.add_argument(
        "--consumer",
        choices=CONSUMERS,
        help="where Faust's Kafka consumer runs: inline, in the worker's event loop (default), or thread, "
        "in a thread of its own as Faust runs it, where every fetch and commit crosses between the two "
        "threads (more CPU per event, a longer tail: benchmarks.kafka)",
    )
    w.add_argument("--log-level", help="debug, info, warning (default), error")
    w.add_argument(
        "--session-timeout-s",
        type=float,
        help="consumer session timeout: how soon a dead worker's partitions move (default 6, the "
        "broker's default minimum; heartbeats go every 0.25 s)",
    )
    w.add_argument(
        "--standby-replicas",
        type=int,
        help="keep warm copies of this many other workers' run states (Faust standby tables), so a "
        "failover does not read the dead worker's changelog from its start (default 0)",
    )
    w.add_argument(
        "--stop-timeout-s",
        type=float,
        help="a worker asked to stop (SIGTERM, SIGINT) or that crashed exits within this many seconds, "
        "forcibly if its graceful stop has not finished (exit 143, 130, or 1 after a crash; default 25)",
    )
    w.add_argument(
        "--state-sweep-interval-s",
        type=float,
        help="how often the table is swept for runs idle (in event time) past twice the config's "
        "loopwarden.runIdleTimeoutMs; they are dropped and tombstoned (default 60)",
    )
    w.set_defaults(func=cmd_worker)

    t = sub.add_parser("topics", help="create the topics with the right keys and cleanup policies")
    t.add_argument("action", choices=["create"])
    _worker_flags(t)
    t.add_argument("--json", action="store_true", help="print the result as JSON")
    t.set_defaults(func=cmd_topics)

    au = sub.add_parser(
        "audit",
        help="replay the topics and compare every decision with the one recorded",
        description="Read the events topic (all partitions, or those of --run / --gateway) for a time range, "
        "replay each event through the core under the config its recorded decision names, and match each "
        "replayed decision with the one on the decisions topic by event_id. A run already under way at --from "
        "is replayed from its start, found within --lookback; runs whose start is not found are reported as "
        "partial and not compared. Exit 0 when every decision matched, 2 when some were mismatched, missing "
        "(replayed, none recorded: the gateway never got its answer), unexpected (recorded, nothing replayed) "
        "or conflicting (one event_id recorded with two verdicts), 1 on an error.",
    )
    _worker_flags(au)
    au.add_argument(
        "--from",
        dest="start",
        metavar="TIME",
        help="start of the range: an ISO-8601 time (2026-11-30T12:00:00Z), a relative one (-2h, -30m, "
        "-1d) or 'beginning' (default: the beginning of the topics)",
    )
    au.add_argument("--to", dest="end", metavar="TIME", help="end of the range, as --from (default: now)")
    au.add_argument(
        "--lookback",
        default=DEFAULT_LOOKBACK,
        metavar="DURATION",
        help="how far before --from to look for the start of runs already under way (default 24h, "
        "the default run idle timeout: a run quiet that long has started over)",
    )
    au.add_argument("--run", action="append", metavar="RUN_ID", help="audit only this run (repeatable)")
    au.add_argument(
        "--gateway", action="append", metavar="GATEWAY_ID", help="audit only this gateway's runs (repeatable)"
    )
    au.add_argument(
        "--config",
        metavar="FILE",
        help="what-if: also replay under this config, and report what would change against what was "
        "decided (calls newly warned or blocked, warnings and blocks that vanish, aborts gained or lost)",
    )
    au.add_argument(
        "--worker-config",
        action="append",
        metavar="FILE",
        help="a config workers were pinned with (--config): decisions naming its hash are replayed "
        "under it (configs published to the config topic are found there); repeatable",
    )
    au.add_argument(
        "--grace",
        default=DEFAULT_GRACE,
        metavar="DURATION",
        help="how long after an event its decision may be recorded (default 5m); a later one counts as "
        "missing. Memory holds the decisions of this window, never the events read",
    )
    au.add_argument(
        "--max-event-bytes", type=int, help="larger events are set aside, as the workers do (default 1 MiB)"
    )
    au.add_argument(
        "--jobs",
        type=_positive_int,
        metavar="N",
        help="processes to audit in, each some of the events topic's partitions and the recorded decisions "
        "of their runs (default: one per core for 200,000 events or more, else 1; at most one per "
        "partition). Shards pair decisions with runs by Kafka's default partitioner, as gateways key "
        "events; runs found elsewhere make the audit start again in one process",
    )
    au.add_argument("--json", action="store_true", help="print the summary as one JSON object on stdout")
    au.add_argument(
        "--diff",
        metavar="FILE",
        help="write one JSON line per mismatch, missing, unexpected or conflicting decision, and per "
        "what-if change, with both decisions",
    )
    au.add_argument(
        "--html",
        metavar="FILE",
        help="write a self-contained HTML report (opens from disk, no network): the summary, decisions "
        "by action, detector, agent and tool, budgets and runs not enforced (shadow mode, holdout), "
        "warnings and blocks per minute, a timeline of each run "
        "with a mismatch, block or abort, the configs used",
    )
    au._negative_number_matcher = RELATIVE_TIME  # `--from -2h`: a value, as for top
    au.set_defaults(func=cmd_audit)

    st = sub.add_parser(
        "stop",
        help="stop an agent, a gateway or a run fleet-wide (a stop order); lift or list orders",
        description="Publish a stop order to the fleet topic (<prefix>fleet, compacted): every tool call that "
        "names the agent, gateway or run, with a ts within [--from, --from + --for), is answered abort "
        "(detector operator_stop, the reason as its message), and its run stays aborted. Workers apply an order "
        "within about a second. Prints the order's id. --lift ID ends an order now (a run it aborted stays "
        "aborted), or lifts a spend cap reached (its record republished with until_ts now, and a "
        "spend_cap_lifted alert): the key's calls are judged as before until the window ends, and the cap is not "
        "reached again there; --list prints every order, breaker and spend cap reached on the topic with its state.",
    )
    target = st.add_mutually_exclusive_group()
    target.add_argument("--agent", metavar="AGENT", help="stop every run of this agent (agent_id, case-insensitive)")
    target.add_argument("--gateway", metavar="GATEWAY", help="stop every run on this gateway (gateway_id)")
    target.add_argument("--run", metavar="RUN", help="stop this run (run_id)")
    target.add_argument(
        "--lift",
        metavar="ID",
        help="end the stop order ID now, or lift the spend cap reached ID (its signal id, {cap}:{key}:{window "
        "start}, as `loopwarden spend` and --list show it): its key's calls run again until the window ends",
    )
    target.add_argument(
        "--list", action="store_true", help="list the stop orders, breakers and spend caps reached on the fleet topic"
    )
    st.add_argument("--reason", help="why: the message the stopped agent sees (required for a new order)")
    st.add_argument(
        "--from",
        dest="from_time",
        metavar="TIME",
        help="when the order starts (event time): ISO-8601 or -10m; default now",
    )
    st.add_argument(
        "--for", dest="duration", metavar="DURATION", help="how long it lasts (30m, 2h); default until lifted"
    )
    st.add_argument(
        "--issued-by", default=None, metavar="WHO", help="who issued it, kept in the order (default: $USER)"
    )
    st.add_argument("--json", action="store_true", help="print JSON (the order, or the list)")
    _worker_flags(st)
    st._negative_number_matcher = RELATIVE_TIME  # `--from -10m`: a value
    st.set_defaults(func=cmd_stop)

    sp = sub.add_parser(
        "spend",
        help="each fleet spend cap's keys in the current window: used, ceiling, percent, time left",
        description="Read the spend stage's tables (the changelog topics <prefix>worker-spend-{windowMs}-changelog) "
        "and the fleet topic, and show each spend cap of the config (loopwarden.fleet.spendCaps) with its keys in "
        "the current window (an agent, a gateway, or all): what each kind used of its ceiling (tokens, cost, calls), "
        "the percent, the time left; the keys that reached the cap first, with their signal id (for `loopwarden "
        "stop --lift ID`), whether they pause calls now and whether they were lifted. Without --config the caps "
        "are the config topic's current config's. Live, event time is about the wall clock: the current window is "
        "the one holding now.",
    )
    sp.add_argument(
        "--config",
        metavar="FILE",
        help="the caps of this config file, as the workers were pinned with (default: the config topic's current one)",
    )
    sp.add_argument("--limit", type=_positive_int, metavar="N", help="show only the N keys nearest to their cap")
    sp.add_argument(
        "--json",
        action="store_true",
        help="one JSON object: at, config, caps (window, ceilings, table, keys, reached), rows (cap, key, kinds "
        "with used, ceiling and percent; cost in micro-dollars; time_left_s, reached, signal, paused, lifted), notes",
    )
    _worker_flags(sp)
    sp.set_defaults(func=cmd_spend)

    al = sub.add_parser(
        "alerts",
        help="follow the alerts topic and post each alert to a webhook (or print it)",
        description="Follow <prefix>alerts (breakers opened and closed, stop orders, runs aborted, budget "
        "warnings, spend caps at 80 and 95 percent, reached and lifted, spend anomalies) and POST each alert to "
        "--webhook, in order, at least once: an alert's offset is committed in the consumer group only after a "
        "2xx answer; errors and timeouts are retried with a pause that doubles "
        "from 0.5 s up to --max-backoff-s. Without --webhook each alert is printed as a JSON line. Runs until "
        "SIGINT or SIGTERM; the deciding workers never wait for it.",
    )
    al.add_argument("--webhook", metavar="URL", help="where to POST each alert (JSON)")
    al.add_argument(
        "--format",
        choices=["json", "slack"],
        default="json",
        help='json: the alert record as it is; slack: an incoming-webhook message {"text": ...}',
    )
    al.add_argument(
        "--group", metavar="GROUP", help="consumer group keeping the position (default <prefix>alerts-follower)"
    )
    al.add_argument(
        "--from-beginning",
        action="store_true",
        help="a new group starts at the first alert (default: new ones)",
    )
    al.add_argument("--timeout-s", type=float, default=5.0, metavar="S", help="one POST's timeout (default 5)")
    al.add_argument("--max-backoff-s", type=float, default=30.0, metavar="S", help="longest pause between tries")
    al.add_argument("--count", type=int, metavar="N", help="stop after N alerts (default: run until stopped)")
    _worker_flags(al)
    al.set_defaults(func=cmd_alerts)

    cf = sub.add_parser(
        "config",
        help="publish a detection config to the config topic, or show the current one",
        description="The config topic (<prefix>config, compacted, one partition) holds each config published, "
        "keyed by its id (the SHA-256 of its canonical JSON, so the same config published twice is one record), "
        "and a record naming the current one. Workers started without --config decide under the current config "
        "(the built-in defaults while there is none) and switch to a newly published one within about a second, "
        "without a restart; a worker started with --config keeps that file's config.",
    )
    cfs = cf.add_subparsers(dest="action", metavar="ACTION", required=True)
    cp = cfs.add_parser(
        "publish",
        help="check a config file, publish it and make it current; prints its id",
        description="Check FILE (JSON or JSON5; a file that is not is an error, exit 1; each "
        "unusable field is named in a warning on stderr and falls back, as replay does), publish "
        "it to the config topic (created if missing, with the other topics) under its id, make it "
        "the current config, and print the id. Exit 0 when published, 1 on an error.",
    )
    cp.add_argument("file", metavar="FILE", help="the config file, JSON or JSON5")
    _worker_flags(cp)
    cs = cfs.add_parser(
        "show",
        help="print the current config: its id, source file and text",
        description="Read the config topic to its end and print the current config's id, the "
        "file it was published from and its text as published. Exit 1 with a message when no "
        "config was published (workers then decide under the built-in defaults).",
    )
    _worker_flags(cs)
    cs.add_argument("--json", action="store_true", help="one JSON object: config (the id), source, text")
    cf.set_defaults(func=cmd_config)

    k = sub.add_parser(
        "kafka",
        help="a local single-node Kafka broker for development and tests (no Docker)",
        description="fetch: download the broker jars with Maven (once). start: start the broker "
        "in --dir and print its bootstrap address; a folder that already holds one gets it back "
        "with its data, on the same ports (a broker running there already is left as it is); "
        "otherwise, or with --fresh, a new KRaft storage is formatted. stop: stop it.",
    )
    k.add_argument("action", choices=["fetch", "start", "stop"])
    k.add_argument("--dir", default=".kafka", help="where the broker keeps its files (default .kafka)")
    k.add_argument("--port", type=int, help="listener port of a new broker (default: a free one)")
    k.add_argument("--heap", default="384m", help="JVM heap (default 384m)")
    k.add_argument(
        "--fresh",
        action="store_true",
        help="start: delete the broker's files in --dir (data, config, logs) and format a new one",
    )
    k.set_defaults(func=cmd_kafka)

    sm = sub.add_parser(
        "simulate",
        help="drive a fleet of gateways with normal and looping agents",
        description="N gateways keep M runs each going (normal agents and every kind of loop) "
        "against running workers; prints live progress, then latency, throughput, recall per "
        "detector and normal runs wrongly flagged as JSON. Exit 2 when a loop was missed or a "
        "normal run was flagged.",
    )
    _worker_flags(sm)
    sm.add_argument("--gateways", type=int, default=8, help="gateways (default 8)")
    sm.add_argument("--runs", type=int, default=4, help="concurrent runs per gateway (default 4)")
    sm.add_argument("--seconds", type=float, default=60, help="how long new runs are started (default 60)")
    sm.add_argument("--loop-share", type=float, default=0.3, help="share of runs that loop (default 0.3)")
    sm.add_argument("--think-ms", default="5:50", help="think time range per call, LO:HI ms (default 5:50)")
    sm.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for a decision (default 5)")
    sm.add_argument("--seed", type=int, default=1)
    sm.add_argument("--quiet", action="store_true", help="no live progress line")
    sm.add_argument(
        "--holdout",
        type=int,
        metavar="PERCENT",
        help="hold this share of runs out of enforcement: publish the current config with "
        "loopwarden.holdoutPercent set to PERCENT on the config topic, and wait until every partition's "
        "worker decides under it (workers pinned with --config do not follow: set it in their file)",
    )
    sm.add_argument(
        "--agents",
        type=int,
        default=0,
        metavar="N",
        help="the runs of the default agent run as N named agents, sim-agent-0 to sim-agent-N-1, one per slot "
        "(slot s of gateway g: agent (g * runs + s) mod N), each at a steady pace (default 0: no agent id)",
    )
    sm.add_argument(
        "--burst",
        metavar="AGENT@SECONDS:FACTOR",
        help="a spend burst: from SECONDS into the run on, AGENT's runs report FACTOR times their model usage "
        "(tokens and cost) and think FACTOR times less between calls (so call more often). The spend anomaly watch "
        "(loopwarden.fleet.spendAnomaly) alerts on it: give the fleet at least the watch's minWindows windows "
        "of steady spend before SECONDS, floors "
        "the steady windows stay under or a factor they stay within, and a FACTOR above the watch's factor. AGENT "
        "is one of --agents' (e.g. --agents 4 --burst sim-agent-0@30:5)",
    )
    sm.set_defaults(func=cmd_simulate)

    d = sub.add_parser(
        "demo",
        help="start a local broker, a worker and a short demo fleet; show decisions live",
        description="The whole pipeline on this machine: a local Kafka broker, one worker, "
        "gateways that run normal and looping agents; `loopwarden top` on their decisions; then "
        "everything is stopped.",
    )
    d.add_argument("--seconds", type=float, default=20.0, help="how long the fleet runs (default 20)")
    d.add_argument("--gateways", type=int, default=3, help="gateways in the fleet (default 3)")
    d.add_argument("--bootstrap", help="use this broker instead of starting a local one")
    d.set_defaults(func=cmd_demo)

    tp = sub.add_parser(
        "top",
        help="a live view of a fleet's decisions, looping runs, gateways and workers",
        description="Read the decisions topic (every partition, no consumer group) and show, "
        "refreshed about once a second: decisions per second by action; warnings, blocks and "
        "aborts per minute by detector; the runs looping now (the latest warning, block or abort "
        "of each), newest first; calls per second and blocks per minute per gateway; the "
        "workers' consumer lag (--worker-metrics) and dead letters per minute (the dead-letter "
        "topic). Ctrl-C quits. --once --json prints one snapshot as JSON instead.",
    )
    _worker_flags(tp)
    tp.add_argument(
        "--from",
        dest="start",
        metavar="TIME",
        help="where to start reading: now (default; --once alone: beginning), beginning, an ISO-8601 "
        "time (2024-05-01T12:00:00Z; without a zone: local time) or a relative one (-10m, -30s, -2h, -1d)",
    )
    tp.add_argument(
        "--worker-metrics",
        action="append",
        metavar="URL",
        help="a worker's /metrics (or host:port) to read its consumer lag from; repeatable",
    )
    tp.add_argument(
        "--once",
        action="store_true",
        help="read what is on the topics up to their end offsets at start (or for --seconds), print "
        "one snapshot and exit",
    )
    tp.add_argument(
        "--json",
        action="store_true",
        help="with --once: the snapshot as JSON; without: one JSON snapshot a line, each refresh",
    )
    tp.add_argument("--seconds", type=float, help="stop after this many seconds (with --once: read for this long)")
    tp.add_argument(
        "--forget-after",
        type=float,
        default=120.0,
        metavar="S",
        help="a run not warned, blocked or aborted for this long is no longer listed (default 120)",
    )
    tp.add_argument(
        "--no-screen",
        action="store_true",
        help="draw in place below the prompt instead of on the terminal's alternate screen",
    )
    tp._negative_number_matcher = RELATIVE_TIME
    tp.set_defaults(func=cmd_top)

    hk = sub.add_parser(
        "hooks",
        help="guard Claude Code, Codex and Gemini CLI through their hooks: the local sidecar, the installer",
        description="serve: the sidecar the hooks ask (one gateway client, an HTTP endpoint per runtime and hook "
        "event, POST /claude-code/PreToolUse ...). install: write or merge the runtime's hook config so each of its "
        "hook events runs the fast hook (a small C program built at install, which starts no interpreter; "
        "`loopwarden-hook RUNTIME EVENT`, the Python hook, where no C compiler is found or the build fails). "
        "The README's hooks sections say what each decision does in each runtime.",
    )
    hks = hk.add_subparsers(dest="action", metavar="ACTION", required=True)
    hs = hks.add_parser("serve", help="serve the hooks until SIGINT or SIGTERM")
    hs.add_argument("--listen", default="127.0.0.1:7077", metavar="HOST:PORT", help="default 127.0.0.1:7077")
    hs.add_argument("--gateway-id", help="the gateway id of every event (default: the host name)")
    hs.add_argument("--agent-id", help="the agent id of every event (default: the project directory's name)")
    hs.add_argument("--timeout-s", type=float, default=2.0, help="wait this long for a decision (default 2)")
    hs.add_argument("--fail-closed", action="store_true", help="deny calls without a decision (http hooks)")
    hs.add_argument("--raw", action="store_true", help="send params and results, not their hashes")
    hs.add_argument("--max-input-bytes", type=_positive_int, default=16 << 20, help="refuse larger hook inputs")
    hs.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"])
    _worker_flags(hs)
    hi = hks.add_parser("install", help="write or merge a runtime's hook config (JSON or TOML)")
    hi.add_argument("runtime", choices=["claude-code", "codex", "gemini-cli"])
    where = hi.add_mutually_exclusive_group()
    where.add_argument("--project", metavar="DIR", help="the project's config (default: this directory's)")
    where.add_argument("--user", action="store_true", help="the user's config (~/.claude, ~/.codex, ~/.gemini)")
    hi.add_argument("--print", action="store_true", help="print the config as it would be written; write nothing")
    hi.add_argument("--fail-closed", action="store_true", help="the hooks deny calls when loopwarden gives no answer")
    hi.add_argument("--url", help="the sidecar's URL, if not http://127.0.0.1:7077")
    hi.add_argument("--http", action="store_true", help="claude-code: http hooks posting to the sidecar")
    hi.add_argument(
        "--hook-command", metavar="PATH", help="run this hook command instead of the fast hook or loopwarden-hook"
    )
    hk.set_defaults(func=cmd_hooks)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code = args.func(args)
    except LoopwardenError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return ExitCode.ERROR
    except KeyboardInterrupt:
        print("Error: interrupted", file=sys.stderr)
        return ExitCode.ERROR
    return ExitCode(code)  # a code not documented above is a bug, and fails loudly here


if __name__ == "__main__":
    sys.exit(main())
