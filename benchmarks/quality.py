"""Detection quality on real agents' runs: how many failed runs a config stops, how early,
and how many successful runs it bothers.

    python -m benchmarks.quality [--corpus DIR] [--config FILE] [--against FILE]
                                 [--examples N] [--table-only | --json-only]

Replays a corpus of labelled runs (default `../shared/corpus/`: real trajectories
converted to loopwarden events, with each run's outcome in `labels.json`) through the
offline fold with a config (default: loopwarden's recommended one,
`examples/config.json5`), and prints one JSON object on stdout and a short table per
source and overall on stderr. With `--against FILE` a second config is judged on the
same runs and both are printed side by side.

What is counted, per source and overall, and per detector:

- runs, and runs resolved (the run solved its task);
- runs *flagged* (a decision whose action, enforced or in shadow, is warn, block or
  abort), *warned*, *blocked* and *aborted*, apart for resolved and failed runs;
- *calls saved*: in failed runs, the tool calls from the first block or abort on (that
  call included), which a gateway honouring the decision would not have made, beside
  every call the failed runs made;
- *harmful blocks*: blocks (or aborts) in resolved runs whose call had not got the same
  outcome the last time it was made in that run (or was never made before): the block
  withheld something the agent had not seen. A block of a call whose previous
  identical call returned exactly what this one returned cost the agent nothing.

The replay is counterfactual in one way only: the trajectories go on after a block as
they really did, so each decision is the one loopwarden would have given had the agent
been let through until then. `--examples N` prints, for each kind of flag (detector and
outcome), the first N runs with the calls and outcomes around the flag. The corpus's
attribution (its README's table of sources and licences) is carried in the JSON.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from msgspec import UNSET

from detectors import Decision, DetectionConfig, decode_event, fingerprint, load_config, replay
from detectors.fingerprint import normalize_tool_name
from detectors.wire import Event, ToolCall, ToolResult

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
RECOMMENDED = ROOT / "examples" / "config.json5"
FLAGS = ("warn", "block", "abort")
STOPS = ("block", "abort")
AROUND = (6, 2)  # calls shown before and after a flag by --examples


@dataclass
class Call:
    """One tool call of a run, with the outcome it really got (None: no result)."""

    seq: int
    tool: str
    args_hash: str
    tool_call_id: str | None
    params: Any
    outcome: str | None = None
    failed: bool = False
    text: str = ""


@dataclass
class Run:
    run_id: str
    system: str
    resolved: bool
    calls: list[Call] = field(default_factory=list)


@dataclass
class Corpus:
    events: list[Event]
    runs: dict[str, Run]
    attribution: list[str]
    source: str


def _lines(path: Path) -> Iterator[bytes]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as f:
        yield from f


def _text(ev: ToolResult) -> str:
    if isinstance(ev.error, str):
        return "error: " + ev.error
    res = ev.result
    if isinstance(res, dict):
        parts = [c.get("text") for c in res.get("content") or [] if isinstance(c, dict)]
        return "\n".join(p for p in parts if isinstance(p, str))
    return json.dumps(res)[:2000] if res is not None else ""


def _attach(run: Run, ev: ToolResult) -> None:
    """The result's outcome on the newest call of `run` it completes (by id, else by
    signature), as the history of semantics.md section 3 matches them."""
    fp = fingerprint(ev)
    for c in reversed(run.calls):
        if (
            c.outcome is None
            and c.args_hash == fp.args_hash
            and (ev.tool_call_id is None or c.tool_call_id == ev.tool_call_id)
        ):
            c.outcome = fp.result_hash or None
            c.failed = c.outcome is not None and (
                ev.error is not UNSET or ev.failed is True or c.outcome.startswith("error:")
            )
            c.text = _text(ev)
            return


def load_corpus(where: Path) -> Corpus:
    """The events of `where`/events.jsonl.gz (or events.jsonl) and the labels of
    `where`/labels.json: `run_id -> {system, resolved, ...}`."""
    path = where / "events.jsonl.gz"
    if not path.exists():
        path = where / "events.jsonl"
    labels = json.loads((where / "labels.json").read_text())
    events: list[Event] = []
    runs: dict[str, Run] = {}
    for line in _lines(path):
        if not line.strip():
            continue
        ev = decode_event(line)
        events.append(ev)
        label = labels.get(ev.run_id)
        if label is None:
            raise SystemExit(f"{where}: run {ev.run_id!r} has events but no label in labels.json")
        run = runs.get(ev.run_id)
        if run is None:
            run = runs[ev.run_id] = Run(ev.run_id, str(label.get("system")), bool(label.get("resolved")))
        if isinstance(ev, ToolCall):
            fp = fingerprint(ev)
            run.calls.append(Call(ev.seq, normalize_tool_name(ev.tool_name), fp.args_hash, ev.tool_call_id, ev.params))
        elif isinstance(ev, ToolResult):
            _attach(run, ev)
    readme = where / "README.md"
    attribution = []
    if readme.exists():
        attribution = [ln for ln in readme.read_text().splitlines() if ln.startswith("| `")]
    return Corpus(events, runs, attribution, str(where))


# --- judging one config ------------------------------------------------------------------


def shown(d: Decision) -> str:
    """What the decision says to do, enforced or not (shadow mode counts what it would do)."""
    return d.shadow_action or d.action


def _outcome(resolved: bool) -> str:
    return "resolved" if resolved else "failed"


def _pair() -> dict[str, int]:
    return {"resolved": 0, "failed": 0}


def _detector_tally() -> dict[str, Any]:
    return {"flagged": _pair(), "blocked": _pair(), "blocks": 0, "harmful_blocks": 0, "calls_saved": 0}


@dataclass
class Tally:
    """The figures of one source (or all of them) under one config."""

    runs: int = 0
    resolved: int = 0
    calls: int = 0
    failed_run_calls: int = 0
    flagged: dict[str, int] = field(default_factory=_pair)
    warned: dict[str, int] = field(default_factory=_pair)
    blocked: dict[str, int] = field(default_factory=_pair)
    aborted: dict[str, int] = field(default_factory=_pair)
    calls_saved: int = 0
    harmful_blocks: int = 0
    runs_with_harmful_blocks: int = 0
    by_detector: dict[str, dict[str, Any]] = field(default_factory=lambda: defaultdict(_detector_tally))

    def as_dict(self) -> dict[str, Any]:
        failed = self.runs - self.resolved
        return {
            "runs": self.runs,
            "resolved": self.resolved,
            "failed": failed,
            "calls": self.calls,
            "failed_run_calls": self.failed_run_calls,
            "flagged": self.flagged,
            "warned": self.warned,
            "blocked": self.blocked,
            "aborted": self.aborted,
            "resolved_flagged_percent": _percent(self.flagged["resolved"], self.resolved),
            "failed_stopped_percent": _percent(self.blocked["failed"] + self.aborted["failed"], failed, exact=False),
            "calls_saved": self.calls_saved,
            "calls_saved_percent": _percent(self.calls_saved, self.failed_run_calls),
            "harmful_blocks": self.harmful_blocks,
            "runs_with_harmful_blocks": self.runs_with_harmful_blocks,
            "by_detector": {k: self.by_detector[k] for k in sorted(self.by_detector)},
        }


def _percent(part: int, whole: int, exact: bool = True) -> float | None:
    """The percentage, rounded; the runs' stop rate to 1 decimal, the others to 2."""
    return round(part * 100 / whole, 2 if exact else 1) if whole else None


def harmful(run: Run, index: dict[int, int], d: Decision) -> bool:
    """Whether a block or abort `d` of a resolved run withheld an outcome the agent had
    not seen: its call's real outcome differs from the one the same call got the last
    time it was made in the run (or the call was never made before, or is no call)."""
    i = index.get(d.seq)
    if i is None:  # an abort on a usage event: the run would have been stopped
        return True
    c = run.calls[i]
    for prev in reversed(run.calls[:i]):
        if prev.args_hash == c.args_hash and prev.tool == c.tool:
            return prev.outcome is None or c.outcome is None or prev.outcome != c.outcome
    return True


def _judge_run(run: Run, ds: list[Decision], t: Tally) -> None:
    """Add one run's figures to `t`."""
    out = _outcome(run.resolved)
    t.runs += 1
    t.resolved += run.resolved
    t.calls += len(run.calls)
    if not run.resolved:
        t.failed_run_calls += len(run.calls)
    flags = [d for d in ds if shown(d) in FLAGS]
    if not flags:
        return
    t.flagged[out] += 1
    acts = {shown(d) for d in flags}
    for act, pair in (("warn", t.warned), ("block", t.blocked), ("abort", t.aborted)):
        pair[out] += act in acts
    for det in sorted({d.detector or "?" for d in flags}):
        t.by_detector[det]["flagged"][out] += 1
    stops = [d for d in flags if shown(d) in STOPS]
    for det in sorted({d.detector or "?" for d in stops}):
        t.by_detector[det]["blocked"][out] += 1
    index = {c.seq: i for i, c in enumerate(run.calls)}
    if stops and not run.resolved:
        first = stops[0]
        saved = sum(1 for c in run.calls if c.seq >= first.seq)
        t.calls_saved += saved
        t.by_detector[first.detector or "?"]["calls_saved"] += saved
    bad = 0
    for d in stops:
        tally = t.by_detector[d.detector or "?"]
        tally["blocks"] += 1
        if run.resolved and harmful(run, index, d):
            tally["harmful_blocks"] += 1
            bad += 1
    t.harmful_blocks += bad
    t.runs_with_harmful_blocks += bad > 0


def judge(corpus: Corpus, config: DetectionConfig) -> tuple[dict[str, Any], dict[str, list[Decision]]]:
    """The figures per source and overall, and each run's decisions."""
    by_run: dict[str, list[Decision]] = defaultdict(list)
    for d in replay(corpus.events, config):
        by_run[d.run_id].append(d)
    sources: dict[str, Tally] = defaultdict(Tally)
    overall = Tally()
    for run in corpus.runs.values():
        ds = by_run.get(run.run_id, [])
        _judge_run(run, ds, sources[run.system])
        _judge_run(run, ds, overall)
    return {
        "sources": {k: sources[k].as_dict() for k in sorted(sources)},
        "overall": overall.as_dict(),
    }, by_run


# --- examples ------------------------------------------------------------------------------


def _short(v: Any, n: int) -> str:
    s = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 1] + "…"


def examples(corpus: Corpus, by_run: dict[str, list[Decision]], n: int) -> dict[str, list[dict[str, Any]]]:
    """For each kind of flag (`{detector}/{resolved|failed}`), the first `n` runs in corpus
    order with their first flag of that kind and the calls around it."""
    out: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for run in corpus.runs.values():
        seen: set[str] = set()
        index = {c.seq: i for i, c in enumerate(run.calls)}
        for d in by_run.get(run.run_id, []):
            kind = f"{d.detector}/{_outcome(run.resolved)}"
            if shown(d) not in FLAGS or kind in seen or len(out[kind]) >= n:
                continue
            seen.add(kind)
            i = index.get(d.seq, len(run.calls))
            lo, hi = max(0, i - AROUND[0]), min(len(run.calls), i + AROUND[1] + 1)
            calls = [
                {
                    "seq": c.seq,
                    "flag": f"{shown(d)} {d.detector} ({d.count})" if c.seq == d.seq else None,
                    "tool": c.tool,
                    "params": _short(c.params, 140),
                    "failed": c.failed,
                    "outcome": _short(c.text, 160),
                    "same_outcome_as_previous_identical_call": _same_as_before(run, j),
                }
                for j, c in enumerate(run.calls[lo:hi], lo)
            ]
            out[kind].append(
                {
                    "run_id": run.run_id,
                    "system": run.system,
                    "resolved": run.resolved,
                    "message": d.message,
                    "calls": calls,
                }
            )
    return {k: out[k] for k in sorted(out) if out[k]}


def _same_as_before(run: Run, i: int) -> bool | None:
    c = run.calls[i]
    for prev in reversed(run.calls[:i]):
        if prev.args_hash == c.args_hash and prev.tool == c.tool:
            return prev.outcome is not None and prev.outcome == c.outcome
    return None


# --- the table and the command -------------------------------------------------------------


def _cell(pair: dict[str, int]) -> str:
    return f"{pair['resolved']}/{pair['failed']}"


def table(report: dict[str, Any]) -> str:
    """The short table: a row per source and config, then overall, then per detector."""
    names = list(report["configs"])
    w = max(len(n) for n in names)
    head = f"{'source':<44} {'config':<{w}}  runs  resolved  flagged  warned  blocked  aborted"
    head += "  saved calls      harmful"
    lines = [
        f"quality on {report['corpus']['path']}: {report['corpus']['runs']} runs "
        "(sources and licences: the JSON's corpus)",
        "flagged/warned/blocked/aborted: resolved runs/failed runs; saved calls: in failed runs, from the first stop",
        "",
        head,
    ]
    sources = sorted(report["configs"][names[0]]["sources"]) + ["overall"]
    for src in sources:
        for i, name in enumerate(names):
            r = report["configs"][name]
            t = r["overall"] if src == "overall" else r["sources"][src]
            label = (src if len(src) <= 44 else src[:43] + "…") if i == 0 else ""
            saved = f"{t['calls_saved']}/{t['failed_run_calls']} ({t['calls_saved_percent']}%)"
            lines.append(
                f"{label:<44} {name:<{w}}  {t['runs']:>4}  {t['resolved']:>8}  {_cell(t['flagged']):>7}  "
                f"{_cell(t['warned']):>6}  {_cell(t['blocked']):>7}  {_cell(t['aborted']):>7}  {saved:>15}  "
                f"{t['harmful_blocks']:>7}"
            )
    lines += ["", f"{'detector (overall)':<44} {'config':<{w}}  flagged  blocked  blocks  saved calls  harmful"]
    dets = sorted({d for r in report["configs"].values() for d in r["overall"]["by_detector"]})
    for det in dets:
        label = det
        for name in names:
            t = report["configs"][name]["overall"]["by_detector"].get(det)
            if t is None:
                continue
            lines.append(
                f"{label:<44} {name:<{w}}  {_cell(t['flagged']):>7}  {_cell(t['blocked']):>7}  "
                f"{t['blocks']:>6}  {t['calls_saved']:>11}  {t['harmful_blocks']:>7}"
            )
            label = ""
    return "\n".join(lines)


def example_text(report: dict[str, Any]) -> str:
    out = []
    for name, r in report["configs"].items():
        for kind, runs in (r.get("examples") or {}).items():
            for ex in runs:
                out.append(f"\n[{name}] {kind}: {ex['run_id']} ({ex['system']})\n  message: {ex['message']}")
                for c in ex["calls"]:
                    mark = ">>" if c["flag"] else "  "
                    fail = " FAILED" if c["failed"] else ""
                    same = {True: " (same as before)", False: " (changed)", None: ""}[
                        c["same_outcome_as_previous_identical_call"]
                    ]
                    out.append(f"  {mark} {c['seq']:>4} {c['tool']} {c['params']}")
                    flag = f"   [{c['flag']}]" if c["flag"] else ""
                    out.append(f"            -> {c['outcome']}{fail}{same}{flag}")
    return "\n".join(out)


def config_name(path: Path) -> str:
    """How a config is named in the report: "recommended" for the default, else its file's stem."""
    return "recommended" if path.resolve() == RECOMMENDED.resolve() else path.name.split(".")[0]


def load(path: Path) -> DetectionConfig:
    cfg = load_config(path.read_bytes(), str(path))
    for w in cfg.warnings:
        print(f"{path}: warning: {w}", file=sys.stderr)
    return cfg


def main(argv: Iterable[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.quality", description=__doc__.split("\n\n")[0])
    ap.add_argument("--corpus", type=Path, default=CORPUS, help="a folder of events.jsonl(.gz) and labels.json")
    ap.add_argument("--config", type=Path, default=RECOMMENDED, help="the config judged (default: %(default)s)")
    ap.add_argument("--against", type=Path, help="a second config, judged side by side")
    ap.add_argument("--examples", type=int, default=0, metavar="N", help="the first N flagged runs of each kind")
    shown_as = ap.add_mutually_exclusive_group()
    shown_as.add_argument("--json-only", action="store_true", help="print no table")
    shown_as.add_argument("--table-only", action="store_true", help="print no JSON")
    args = ap.parse_args(list(argv) if argv is not None else None)
    corpus = load_corpus(args.corpus)
    configs = {config_name(args.config): args.config}
    if args.against is not None:
        name = config_name(args.against)
        configs[name if name not in configs else f"{name} (against)"] = args.against
    report: dict[str, Any] = {
        "benchmark": "quality",
        "corpus": {
            "path": corpus.source,
            "runs": len(corpus.runs),
            "events": len(corpus.events),
            "attribution": corpus.attribution,
        },
        "configs": {},
    }
    for name, path in configs.items():
        cfg = load(path)
        figures, by_run = judge(corpus, cfg)
        entry = {"path": str(path), "config_hash": cfg.global_config.config_hash, **figures}
        if args.examples > 0:
            entry["examples"] = examples(corpus, by_run, args.examples)
        report["configs"][name] = entry
    if not args.json_only:
        print(table(report), file=sys.stderr)
        if args.examples > 0:
            print(example_text(report), file=sys.stderr)
    if not args.table_only:
        print(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
