"""The rendering of a `loopwarden top` snapshot (streams/tools/top.py) for a terminal.

`render(snapshot, width, height)` returns a rich renderable no wider than `width`. The
table of looping runs never loses the columns that matter: action, detector, tool and
run are in every row at any width from about 50 columns. When the width is short, the
run id is cut in the middle, the tool at its end, the detector named by a short name
(the detector table above gives the full ones), and the least important columns go
first: message, then agent, then gateway, then age, then count. When there is more
width, the columns grow to their full content and the message takes the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Group, JustifyMethod, RenderableType
    from rich.table import Table

ACTION_STYLE = {"allow": "green", "warn": "yellow", "block": "red", "abort": "bold red"}
DETECTOR_SHORT = {
    "generic_repeat": "repeat",
    "known_poll_no_progress": "poll",
    "ping_pong": "pingpong",
    "unknown_tool_repeat": "no-tool",
    "global_circuit_breaker": "breaker",
    "failure_repeat": "failing",
    "cycle": "cycle",
    "compaction_loop_persisted": "compaction",
    "run_budget": "budget",
    "fleet_tool_breaker": "fleet",
    "operator_stop": "stopped",
    "fleet_spend_cap": "spendcap",
}
ELLIPSIS = "…"


def cut_end(s: str, w: int) -> str:
    """s in at most w cells, cut at its end."""
    if len(s) <= w:
        return s
    return s[:w] if w <= 1 else s[: w - 1] + ELLIPSIS


def cut_middle(s: str, w: int) -> str:
    """s in at most w cells, its middle replaced by an ellipsis (ids differ at both ends)."""
    if len(s) <= w:
        return s
    if w <= 2:
        return s[:w]
    head = (w - 1) // 2
    tail = w - 1 - head
    return s[:head] + ELLIPSIS + s[len(s) - tail :]


def short_detector(name: str, w: int) -> str:
    if len(name) <= w:
        return name
    return cut_end(DETECTOR_SHORT.get(name, name), w)


def fmt_rate(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if x < 10:
        return f"{x:.1f}"
    return f"{x:,.0f}"


def fmt_age(s: float) -> str:
    if s < 60:
        return f"{s:.0f}s"
    if s < 3600:
        return f"{s / 60:.0f}m"
    return f"{s / 3600:.0f}h"


# --- the table of looping runs -------------------------------------------------------------


@dataclass
class Col:
    key: str
    header: str
    keep: int  # 0: always shown; higher: dropped sooner when the width is short
    min: int  # narrowest it is shown at (required columns: when even the comfortable widths do not fit)
    cap: int  # widest it grows to (the message: whatever is left)
    comfy: int = 0  # required columns: the width they get before any optional column is added
    cut: str = "end"  # end, middle or detector
    justify: JustifyMethod = "left"


def _cells(r: dict[str, Any]) -> dict[str, str]:
    tool = r.get("tool_name") or ""
    if r.get("paired_tool_name"):
        tool = f"{tool}/{r['paired_tool_name']}"
    return {
        "action": r.get("action") or "",
        "detector": r.get("detector") or "",
        "tool": tool,
        "run": r.get("run_id") or "",
        "count": "" if r.get("count") is None else str(r["count"]),
        "age": fmt_age(r.get("age_s") or 0.0),
        "gateway": r.get("gateway_id") or "",
        "agent": r.get("agent_id") or "",
        "message": (r.get("message") or "").replace("\n", " "),
    }


def _shrink(widths: dict[str, int], over: int, floor: dict[str, int]) -> int:
    """Too narrow: shrink run and tool alike, down to `floor`, while `over` > 0; what is
    still over then."""
    while over > 0:
        keys = [k for k in ("run", "tool") if widths[k] > floor.get(k, widths[k])]
        if not keys:
            break
        for k in keys:
            if over > 0:
                widths[k] -= 1
                over -= 1
    return over


def run_columns(rows: list[dict[str, str]], width: int) -> list[tuple[Col, int]]:
    """The columns shown at `width` and their widths (one space between columns).

    First the required columns (action, detector, tool, run) at comfortable widths (or
    less, down to their minimums, when even that does not fit); then count, age, gateway,
    agent and message, in that order, each if its minimum still fits; then the columns
    grow to their content, the run id first, and the message takes what is left. The
    message is left out when it would keep a required column from its whole content."""
    # the detector column is never narrower than the short names of the detectors shown
    det_short = max([8] + [min(12, len(DETECTOR_SHORT.get(r["detector"], r["detector"]))) for r in rows])
    cols = [
        Col("action", "action", 0, 6, 6, 6),
        Col("detector", "detector", 0, det_short, 25, det_short, "detector"),
        Col("tool", "tool", 0, 8, 60, 16),
        Col("run", "run", 0, 11, 40, 20, "middle"),
        Col("count", "n", 1, 6, 6, justify="right"),
        Col("age", "age", 2, 4, 4, justify="right"),
        Col("gateway", "gateway", 3, 10, 24),
        Col("agent", "agent", 4, 10, 20),
        Col("message", "message", 5, 16, 10_000),
    ]
    nat = {c.key: min(c.cap, max([len(c.header)] + [len(r[c.key]) for r in rows])) for c in cols}
    required = [c.key for c in cols if c.keep == 0]

    def layout(skip: set[str]) -> tuple[list[Col], dict[str, int]]:
        # a column whose content is narrower than its minimum needs no more than that
        widths = {c.key: min(c.comfy or c.min, nat[c.key]) for c in cols}
        shown = [c for c in cols if c.keep == 0]
        over = sum(widths[c.key] for c in shown) + len(shown) - 1 - width
        for floor in ({c.key: min(c.min, nat[c.key]) for c in cols}, {"tool": 4, "run": 4}):
            over = _shrink(widths, over, floor)
        used = sum(widths[c.key] for c in shown) + len(shown) - 1
        for c in sorted((c for c in cols if c.keep > 0), key=lambda c: c.keep):
            if c.key in skip or not any(r[c.key] for r in rows):
                continue  # nothing to show (no agent ids, no messages)
            if used + 1 + widths[c.key] <= width:
                shown.append(c)
                used += 1 + widths[c.key]
        spare = width - used
        for key in ("run", "detector", "tool", "gateway", "agent", "message"):
            if spare > 0 and any(c.key == key for c in shown):
                grow = max(0, min(spare, nat[key] - widths[key]))
                widths[key] += grow
                spare -= grow
        return shown, widths

    shown, widths = layout(set())
    if any(c.key == "message" for c in shown) and any(widths[k] < nat[k] for k in required):
        shown, widths = layout({"message"})  # the message yields before a required column is cut
    order = [c.key for c in cols]
    shown.sort(key=lambda c: order.index(c.key))
    return [(c, widths[c.key]) for c in shown]


def runs_table(runs: list[dict[str, Any]], width: int) -> Table:
    from rich.table import Table
    from rich.text import Text

    rows = [_cells(r) for r in runs]
    cols = run_columns(rows, width)
    t = Table(
        box=None,
        padding=(0, 1, 0, 0),
        pad_edge=False,
        show_edge=False,
        expand=False,
        header_style="bold",
        collapse_padding=True,
    )
    for c, w in cols:
        t.add_column(
            c.header if len(c.header) <= w else c.header[:w],
            width=w,
            min_width=w,
            max_width=w,
            no_wrap=True,
            overflow="crop",
            justify=c.justify,
        )
    for r in rows:
        cells = []
        for c, w in cols:
            v = r[c.key]
            if c.cut == "middle":
                v = cut_middle(v, w)
            elif c.cut == "detector":
                v = short_detector(v, w)
            else:
                v = cut_end(v, w)
            style = ACTION_STYLE.get(v, "") if c.key == "action" else ("dim" if c.key == "message" else "")
            cells.append(Text(v, style=style))
        t.add_row(*cells)
    return t


# --- the other sections ----------------------------------------------------------------------


def _detector_table(snap: dict[str, Any], width: int, cap: int | None = None) -> Table | None:
    """The detectors by total, most first; past `cap` rows, the rest summed in one."""
    from rich.table import Table

    per_min = snap.get("per_minute_by_detector") or {}
    totals = snap.get("detectors") or {}
    names = sorted(set(totals) | set(per_min), key=lambda d: (-totals.get(d, 0), d))
    if not names:
        return None
    rest: list[str] = []
    if cap is not None and len(names) > cap:
        names, rest = names[: cap - 1], names[cap - 1 :]
    name_w = min(25, max(len(n) for n in names))
    if width < name_w + 38:
        name_w = max(8, min(name_w, width - 38))
    t = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, header_style="bold")
    t.add_column("detector", width=name_w, no_wrap=True, overflow="crop")
    for h in ("warn/min", "block/min", "abort/min", "total"):
        t.add_column(h, justify="right", no_wrap=True)
    for d in names:
        m = per_min.get(d) or {}
        t.add_row(
            short_detector(d, name_w),
            fmt_rate(m.get("warn", 0.0)),
            fmt_rate(m.get("block", 0.0)),
            fmt_rate(m.get("abort", 0.0)),
            f"{totals.get(d, 0):,}",
        )
    if rest:
        rates = [sum((per_min.get(d) or {}).get(a, 0.0) for d in rest) for a in ("warn", "block", "abort")]
        t.add_row(
            cut_end(f"{len(rest)} others", name_w),
            *(fmt_rate(r) for r in rates),
            f"{sum(totals.get(d, 0) for d in rest):,}",
        )
    return t


def _gateway_table(snap: dict[str, Any], width: int, cap: int) -> tuple[Table | None, int]:
    from rich.table import Table

    gws = snap.get("gateways") or {}
    if not gws:
        return None, 0
    names = sorted(gws, key=lambda g: (-gws[g]["calls_per_s"], -gws[g]["decisions"], g))
    name_w = max(7, min(max(len(g) for g in names), max(8, width - 36)))
    t = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, header_style="bold")
    t.add_column("gateway", width=name_w, no_wrap=True, overflow="crop")
    for h in ("calls/s", "blocks/min", "decisions"):
        t.add_column(h, justify="right", no_wrap=True)
    for g in names[:cap]:
        v = gws[g]
        t.add_row(cut_end(g, name_w), fmt_rate(v["calls_per_s"]), fmt_rate(v["blocks_per_min"]), f"{v['decisions']:,}")
    more = len(names) - cap
    if more > 0:
        t.add_row(f"… {more} more", "", "", "", style="dim")
    return t, min(len(names), cap) + (1 if more > 0 else 0)


def _workers_line(snap: dict[str, Any]) -> str:
    workers = snap.get("workers") or []
    if workers:
        up = [w for w in workers if w["reachable"]]
        lag = f"lag {sum(w['lag'] for w in up):,}" if up else "lag -"
        parts = [f"{lag} ({len(up)}/{len(workers)} workers reachable)"]
        if len(up) > 1:
            parts.append(" ".join(f"{w['url'].split('://')[-1].split('/')[0]}:{w['lag']}" for w in up))
    else:
        parts = ["lag - (no --worker-metrics)"]
    dl = snap.get("dead_letters")
    if dl is None:
        parts.append("dead letters - (no dead-letter topic)")
    else:
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(dl["by_reason"].items(), key=lambda kv: -kv[1]))
        parts.append(
            f"dead letters {fmt_rate(dl['per_minute'])}/min ({dl['total']:,} seen{': ' + reasons if reasons else ''})"
        )
    return "  ·  ".join(parts)


def policy_lines(snap: dict[str, Any]) -> list[str]:
    """Shadow decisions (apart from enforced ones), the runs closest to their budget, and
    the fleet's open breakers and stop orders: a line each, only what there is."""
    out = []
    sh = snap.get("shadow") or {}
    if sh.get("decisions"):
        would = sh["would_have"]
        pm = sh.get("per_minute") or {}
        out.append(
            f"shadow (not enforced): {sh['decisions']:,} decisions; would have warned {would.get('warn', 0):,}, "
            f"blocked {would.get('block', 0):,}, aborted {would.get('abort', 0):,} "
            f"({fmt_rate(pm.get('block', 0.0))} blocks/min)"
        )
    budget = snap.get("budget_runs") or []
    if budget:
        rows = ", ".join(
            f"{r['run_id']} {'stopped' if r['stopped'] else str(r['percent']) + '%'} {r['kind']}" for r in budget[:5]
        )
        out.append(f"closest to budget: {rows}")
    fleet = snap.get("fleet") or {}
    for b in fleet.get("open_breakers") or []:
        until = time.strftime("%H:%M:%S", time.localtime(b["until_ts"] / 1000))
        out.append(f"breaker open: {b['tool_name']} until {until} ({b['runs']} runs, {b['gateways']} gateways)")
    for o in fleet.get("stop_orders") or []:
        state = "pending" if o["pending"] else "in force"
        out.append(f"stop order {o['id']}: {o['target']} {state}: {o['reason']}")
    return out + spend_lines(snap.get("spend_caps") or [])


def spend_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The spend caps (admin/spend.py's rows, reached first): a line for the keys paused
    now, a line for the others nearest to their cap; at most two lines, so the view keeps
    its height."""

    def who(r: dict[str, Any]) -> str:
        return f"{r['cap']} {r['key']}" if r["key"] else r["cap"]

    def paused(r: dict[str, Any]) -> str:
        until = time.strftime("%H:%M:%S", time.localtime(r["paused_until"] / 1000))
        return f"{who(r)} ({r['percent']:.0f}% {r['unit']}) until {until}"

    def near(r: dict[str, Any]) -> str:
        return f"{who(r)} {r['percent']:.0f}% {r['unit'] or ''}{' lifted' if r['lifted'] else ''}".rstrip()

    out = []
    if any(r["paused"] for r in rows):
        out.append("spend cap reached, paused: " + ", ".join(paused(r) for r in rows if r["paused"]))
    others = [r for r in rows if not r["paused"]][:5]
    if others:
        out.append("nearest to spend cap: " + ", ".join(near(r) for r in others))
    return out


def header_lines(snap: dict[str, Any]) -> tuple[str, list[tuple[str, str]]]:
    at = time.strftime("%H:%M:%S", time.localtime(snap.get("at") or 0))
    watching = snap.get("topic", "") if snap.get("watching", True) else f"waiting for {snap.get('topic', '')}"
    extra = f"  ({snap['duplicates']:,} repeated)" if snap.get("duplicates") else ""
    title = f"loopwarden top  {watching}  {at}  {snap.get('decisions', 0):,} decisions{extra}"
    ps = snap.get("per_second") or {}
    rates = [(f"decisions/s {fmt_rate(ps.get('total', 0.0))}", "bold")]
    rates += [(f"{a} {fmt_rate(ps.get(a, 0.0))}", ACTION_STYLE[a]) for a in ("allow", "warn", "block", "abort")]
    return title, rates


def render(snap: dict[str, Any], width: int, height: int | None = None) -> Group:
    """The whole view of one snapshot, at most `width` columns wide (and, when `height`
    is given, about that many lines: the looping runs get what the rest leaves)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    width = max(20, width)
    title, rates = header_lines(snap)
    parts: list[RenderableType] = [Text(title, style="bold", no_wrap=True, overflow="ellipsis")]
    line = Text(no_wrap=True, overflow="ellipsis")
    for i, (s, style) in enumerate(rates):
        line.append(("   " if i == 1 else "  ") if i else "")
        line.append(s, style=style)
    parts.append(line)
    roomy = height is None or height >= 32
    gap = [Text("")] if roomy else []
    lines = 2
    gw_cap = 20 if height is None else (3 if height < 32 else 8)

    det_cap = None if height is None else (5 if height < 32 else 10)
    det = _detector_table(snap, width if width < 120 else width // 2 - 2, det_cap)
    det_lines = 1 + len(det.rows) if det is not None else 1
    gw, gw_rows = _gateway_table(snap, width if width < 120 else width // 2 - 2, gw_cap)
    gw_lines = 1 + gw_rows if gw is not None else 1
    det_view = det if det is not None else Text("detections: none yet", style="dim")
    gw_view = gw if gw is not None else Text("gateways: no decisions yet", style="dim")
    if width >= 120:
        grid = Table.grid(padding=(0, 4))
        grid.add_column(max_width=width // 2 - 2)
        grid.add_column(max_width=width // 2 - 2)
        grid.add_row(det_view, gw_view)
        parts += gap + [grid]
        lines += max(det_lines, gw_lines)
    else:
        parts += gap + [det_view] + gap + [gw_view]
        lines += det_lines + gw_lines
    parts += gap + [Text(_workers_line(snap), no_wrap=True, overflow="ellipsis")]
    lines += 1 + (3 if roomy else 0) + 1
    extra = policy_lines(snap)
    parts += [Text(x, no_wrap=True, overflow="ellipsis", style="magenta") for x in extra]
    lines += len(extra)

    runs = snap.get("looping_runs") or []
    shown = runs
    if height is not None:
        room = max(3, height - lines - 3)  # the runs' title line, the table header, one spare
        shown = runs[:room]
    more = f", {len(runs) - len(shown)} not shown" if len(shown) < len(runs) else ""
    parts += [
        Text(
            f"looping now: {len(runs)} run{'s' if len(runs) != 1 else ''}{more} (newest first)",
            style="bold",
            no_wrap=True,
            overflow="ellipsis",
        )
    ]
    if shown:
        parts.append(runs_table(shown, width))
    return Group(*parts)


def plain_line(snap: dict[str, Any]) -> str:
    """One line a refresh, for a pipe or a log."""
    ps = snap.get("per_second") or {}
    at = time.strftime("%H:%M:%S", time.localtime(snap.get("at") or 0))
    runs = snap.get("looping_runs") or []
    latest = ""
    if runs:
        r = runs[0]
        latest = f"  latest: {r['action']} {r['detector']} {r['tool_name']} run {r['run_id']} gw {r['gateway_id']}"
    if not snap.get("watching", True):
        return f"{at} waiting for {snap.get('topic', 'the decisions topic')}"
    paused = [r for r in snap.get("spend_caps") or [] if r["paused"]]
    caps = f"  spend caps reached: {', '.join(r['signal'] for r in paused)}" if paused else ""
    return (
        f"{at} decisions {snap.get('decisions', 0)}, per s {fmt_rate(ps.get('total', 0.0))} "
        f"(allow {fmt_rate(ps.get('allow', 0.0))} "
        f"warn {fmt_rate(ps.get('warn', 0.0))} block {fmt_rate(ps.get('block', 0.0))} "
        f"abort {fmt_rate(ps.get('abort', 0.0))})  looping {len(runs)}{latest}{caps}"
    )
