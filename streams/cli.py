"""The `loopwarden` command: one entry point, one subcommand per job.

Exit codes: 0 success; 1 `Error: ...` (nothing or not everything was done);
3 replay finished but some input lines were malformed (each named on stderr).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys

from detectors.errors import LoopwardenError

EXIT_BAD_LINES = 3


def _read_config(path: str | None):
    from .configfile import read_detection_config

    return read_detection_config(path, warn=lambda p, w: print(f"warning: {p}: {w}", file=sys.stderr))


def cmd_replay(args: argparse.Namespace) -> int:
    from .replay import file_size, run_replay

    config = _read_config(args.config)
    with contextlib.ExitStack() as files:
        def open_file(path: str | None, mode: str, std, what: str):
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
        total = None if args.input == "-" else file_size(args.input)
        report = run_replay(config, src, dst, sys.stderr, dead, args.max_event_bytes, total)
    if args.stats:
        print(json.dumps(report.as_dict(), indent=None if args.json else 2), file=sys.stderr)
    if report.bad:
        print(f"{report.bad} malformed line(s) skipped", file=sys.stderr)
        return EXIT_BAD_LINES
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loopwarden",
        description="Fleet-wide guard against runaway AI-agent tool loops: decides allow / warn / "
        "block / abort for every tool call, offline (replay) or on Kafka (worker).",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    r = sub.add_parser(
        "replay",
        help="fold a JSONL file of events offline and write the decisions (no Kafka)",
        description="Replay events (one JSON object a line) through the detection engine and write "
        "one decision per line, in the order produced. Malformed lines are named on stderr "
        "(line number and reason) and skipped; the exit code is 3 when any were.",
    )
    r.add_argument("--config", metavar="FILE", help="detection config, JSON or JSON5 (default: built-in defaults)")
    r.add_argument("--input", "-i", default="-", metavar="EVENTS.jsonl", help="events to replay; - for stdin (default)")
    r.add_argument("--output", "-o", default="-", metavar="DECISIONS.jsonl", help="where decisions go; - for stdout (default)")
    r.add_argument("--dead-letter", metavar="FILE", help="also write each rejected line here, as JSONL with its error")
    r.add_argument("--stats", action="store_true", help="print counts by action and detector on stderr at the end")
    r.add_argument("--json", action="store_true", help="with --stats: print them as one compact JSON line")
    r.add_argument(
        "--max-event-bytes", type=int, default=1 << 20, metavar="N", help="larger lines are rejected (default 1 MiB)"
    )
    r.set_defaults(func=cmd_replay)

    from . import commands

    commands.register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except LoopwardenError as exc:
        print(f"Error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("Error: interrupted", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
