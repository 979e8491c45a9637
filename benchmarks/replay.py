"""Throughput of the full `loopwarden replay` command, side by side with a floor and an
older revision, all timed in one run on the same file.

    python -m benchmarks.replay [--events 200000] [--baseline b5f74c6] [--repeat 3]
    python -m benchmarks.replay --input TRACE.jsonl --config CONFIG.json
    python -m benchmarks.replay --against-config examples/config.json5

Prints one JSON object. Three commands are timed in rounds, in rotating order, each in a
subprocess (interpreter start-up included): the floor (`../shared/tools/replay_floor.py`,
which only decodes each line, hashes it and writes a line per call), this checkout's
`loopwarden replay`, and the same command of `--baseline` (checked out with `git
worktree add` into a temporary folder and run with this interpreter from there, so its
own packages import). Each gets its best and median CPU seconds (user + system of the
child; wall time too) and its ratio to the floor's best; `identical_output` says whether
this checkout wrote the same bytes as the baseline. `profile_top` names where this
checkout's time goes (in process, own time).
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import os
import pstats
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from streams.tools.trace import CONFIG, generate

ROOT = Path(__file__).resolve().parents[1]
FLOOR = ROOT.parent / "shared" / "tools" / "replay_floor.py"
GOAL_RATIO = 3.0  # issue 44, with either config


def _sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _worktree(rev: str, into: str) -> str:
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet", into, rev], check=True)
    return subprocess.run(
        ["git", "-C", into, "rev-parse", "--short", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


def _compile(tree: str) -> None:
    """Write the bytecode of a checkout's packages, as an installed command has it. With
    PYTHONDONTWRITEBYTECODE set (as on the CI machines) every run would otherwise compile
    the sources again, and the revision with more source would pay for it in its time."""
    subprocess.run(
        [sys.executable, "-m", "compileall", "-q", "detectors", "streams"],
        cwd=tree,
        check=True,
        stdout=subprocess.DEVNULL,
    )


def _time(cmd: list[str], cwd: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run of `cmd`; CPU time (user + system of the
    child) is what the ratios use, as it hardly moves when other processes share the cores."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _profile(src: str, cfg: str) -> list[dict[str, object]]:
    from detectors import load_config
    from streams.replay import run_replay

    with open(cfg, "rb") as f:
        config = load_config(f.read())
    prof = cProfile.Profile()
    with open(src, "rb") as f:
        prof.runcall(run_replay, config, f, io.BytesIO(), io.StringIO())
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]  # its table, which typeshed leaves out
    top = sorted(stats.items(), key=lambda kv: kv[1][2], reverse=True)[:12]  # by own time
    total = sum(v[2] for v in stats.values())
    return [
        {"function": f"{os.path.basename(k[0])}:{k[1]}:{k[2]}", "own_share": round(v[2] / total, 3)} for k, v in top
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=200_000, help="events of the generated trace (no --input)")
    ap.add_argument("--input", help="a JSONL trace to time instead of the generated one")
    ap.add_argument("--config", help="its config (with --input; default: the generated trace's config)")
    ap.add_argument("--baseline", default="b5f74c6", help="the older revision to time beside this checkout")
    ap.add_argument("--repeat", type=int, default=3, help="rounds; each command runs once per round")
    ap.add_argument(
        "--against-config",
        metavar="CONFIG",
        help="also time this checkout with a second config in the same rounds (e.g. examples/config.json5 beside "
        "the trace's OpenClaw config), reported as current_against",
    )
    ap.add_argument("--no-profile", action="store_true")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="loopwarden-replay-bench-") as d:
        src, cfg = args.input, args.config
        if src is None:
            src = os.path.join(d, "events.jsonl")
            with open(src, "wb") as trace:
                trace.write(b"\n".join(generate(args.events)) + b"\n")
        if cfg is None:  # the generated trace's config
            cfg = os.path.join(d, "config.json")
            with open(cfg, "w") as config:
                json.dump(CONFIG, config)
        src, cfg = os.path.abspath(src), os.path.abspath(cfg)
        size = os.path.getsize(src)
        with open(src, "rb") as lines:
            events = sum(1 for _ in lines)
        wt = os.path.join(d, "baseline")
        rev = _worktree(args.baseline, wt)
        try:
            for tree in (str(ROOT), wt):
                _compile(tree)
            out = {k: os.path.join(d, f"{k}.jsonl") for k in ("floor", "baseline", "current")}
            # As the installed `loopwarden` command runs it: its module imported (from
            # its cached bytecode), not run with -m, which compiles the CLI's source on
            # every start (about 15 ms, charged to whichever revision has more CLI).
            entry = "import sys; from streams.cli import main; sys.exit(main())"
            replay = [sys.executable, "-c", entry, "replay", "--config", cfg, "--input", src, "--output"]
            commands = {
                "floor": ([sys.executable, str(FLOOR), src, out["floor"]], str(ROOT)),
                "baseline": (replay + [out["baseline"]], wt),
                "current": (replay + [out["current"]], str(ROOT)),
            }
            if args.against_config:
                other = [a if a != cfg else os.path.abspath(args.against_config) for a in replay]
                out["current_against"] = os.path.join(d, "current_against.jsonl")
                commands["current_against"] = (other + [out["current_against"]], str(ROOT))
            times: dict[str, list[float]] = {k: [] for k in commands}  # CPU seconds
            walls: dict[str, list[float]] = {k: [] for k in commands}
            names = list(commands)
            for r in range(args.repeat):
                for k in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order each round
                    cmd, cwd = commands[k]
                    wall, cpu = _time(cmd, cwd)
                    walls[k].append(wall)
                    times[k].append(cpu)
            identical = _sha256(out["current"]) == _sha256(out["baseline"])
            current_sha = _sha256(out["current"])
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", wt], check=False)
        profile = [] if args.no_profile else _profile(src, cfg)

    floor = min(times["floor"])

    def row(k: str) -> dict[str, object]:
        best = min(times[k])
        return {
            "cpu_seconds_best": round(best, 3),
            "cpu_seconds_median": round(statistics.median(times[k]), 3),
            "wall_seconds_best": round(min(walls[k]), 3),
            "events_per_cpu_s": round(events / best),
            "ratio_to_floor": round(best / floor, 2),
            # The machines' speed drifts by up to half for seconds at a time: the medians'
            # ratio says how far the best rounds' ratio can be trusted.
            "median_ratio_to_floor": round(statistics.median(times[k]) / statistics.median(times["floor"]), 2),
            "wall_ratio_to_floor": round(min(walls[k]) / min(walls["floor"]), 2),
        }

    against: dict[str, object] = {}
    if args.against_config:
        against = {
            "current_against": {"config": args.against_config, **row("current_against")},
            # above 1: the second config replays slower than the first, by that factor
            "against_over_current_cpu": round(min(times["current_against"]) / min(times["current"]), 3),
            "against_over_current_cpu_median": round(
                statistics.median(times["current_against"]) / statistics.median(times["current"]), 3
            ),
        }
    print(
        json.dumps(
            {
                "benchmark": "replay",
                "input": args.input or f"streams.tools.trace, {args.events} events",
                "events": events,
                "input_bytes": size,
                "rounds": args.repeat,
                "floor": row("floor"),
                "baseline": {"rev": rev, **row("baseline")},
                "current": row("current"),
                **against,
                "goal_ratio_to_floor": GOAL_RATIO,
                "current_over_baseline_speed": round(min(times["baseline"]) / min(times["current"]), 2),
                "identical_output": identical,
                "output_sha256": current_sha,
                "profile_top": profile,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
