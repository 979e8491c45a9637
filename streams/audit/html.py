"""The audit's `--html` report: one self-contained page (inline CSS, an inline SVG chart, a few lines
of inline JS) that opens from disk with no server and no network.

`render(report)` takes the report dict the audit builds and returns the page. Every string from the
data is escaped; the page's Content-Security-Policy allows only its own style and script (by hash),
so nothing in the data can load or run anything even if it slipped through. Every leaf of
`report["summary"]` is shown in an element with `data-key="<dotted key>"` (`events`,
`by_action.block`, `what_if.newly_warned`, ...) whose text is exactly that value as JSON (a string
as itself), so a test can compare the page with the `--json` summary.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
from datetime import UTC, datetime
from html import escape
from typing import Any

ACTIONS = ("allow", "warn", "block", "abort")
PROBLEMS = ("mismatched", "missing", "unexpected", "conflicting")
CHART_MAX_BARS = 480  # more minutes than this are summed into wider bars
OPEN_RUNS = 3  # the first few flagged runs show their timelines unfolded

LABELS = {
    "events": "events read",
    "runs": "runs",
    "partial_runs": "partial runs (start not found)",
    "decisions_recorded": "decisions recorded",
    "decisions_replayed": "decisions replayed",
    "matched": "matched",
    "mismatched": "mismatched",
    "missing": "missing (never published)",
    "unexpected": "unexpected (no such event)",
    "conflicting": "conflicting (recorded twice)",
    "seconds": "seconds",
    "events_per_s": "events per second",
}
WHAT_IF_LABELS = {
    "config_hash": "config",
    "newly_warned": "newly warned",
    "newly_blocked": "newly blocked",
    "no_longer_warned": "no longer warned",
    "no_longer_blocked": "no longer blocked",
    "aborts_gained": "aborts gained",
    "aborts_lost": "aborts lost",
}

BUDGET_LABELS = {
    "warnings": "budget warnings",
    "aborts": "runs aborted by a budget",
    "aborts_on_usage": "of them on a usage event",
    "calls_after_abort": "calls after the abort",
    "not_enforced": "of all these, not enforced",
}
SHADOW_LABELS = {
    "decisions": "decisions not enforced",
    "runs": "runs not enforced",
    "held_out_runs": "of them held out (the others in shadow mode)",
}
WOULD_LABELS = {
    "runs": "runs that would have been stopped",
    "ended_by_themselves": "of them ended by themselves",
    "calls_after": "calls after",
    "tokens_after": "tokens after",
}

CSS = """
:root{--fg:#1d232a;--muted:#5e6873;--line:#d9dee3;--bg:#fff;--soft:#f4f6f8;--warn:#c98a00;--block:#cc3a4b;
--abort:#5c1522;--allow:#2f7d4f;--bad:#fde8ea;--whatif:#fff4d6}
*{box-sizing:border-box}[hidden]{display:none!important}
body{margin:0 auto;max-width:1200px;padding:24px;font:14px/1.45 system-ui,sans-serif;color:var(--fg);
background:var(--bg)}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid var(--line)}
h3{font-size:14px;margin:16px 0 6px}code,pre,.num,.hash{font-family:ui-monospace,Menlo,Consolas,monospace}
.muted{color:var(--muted)}.verdict{padding:8px 12px;border-radius:4px;margin:12px 0;font-weight:600}
.verdict.ok{background:#e6f4ea}.verdict.bad{background:var(--bad)}
.stats{display:grid;grid-template-columns:repeat(auto-fill,minmax(170px,1fr));gap:8px}
.stat{background:var(--soft);border-radius:4px;padding:8px 10px}
.stat .label{display:block;color:var(--muted);font-size:12px}
.stat .num{font-size:18px;overflow-wrap:anywhere}.stat.alert{background:var(--bad)}
.grid{display:grid;grid-template-columns:repeat(auto-fit,minmax(260px,1fr));gap:16px;align-items:start}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:3px 6px;border-bottom:1px solid var(--line);
vertical-align:top}th{font-weight:600;background:var(--soft)}td.n,th.n{text-align:right;font-variant-numeric:tabular-nums}
.scroll{max-height:420px;overflow:auto}.act{font-weight:600}.act-allow{color:var(--allow)}.act-warn{color:var(--warn)}
.act-block{color:var(--block)}.act-abort{color:var(--abort)}.msg{color:var(--muted);font-size:12px;overflow-wrap:anywhere}
.hash{color:var(--muted);font-size:11px}.badge{display:inline-block;padding:0 6px;border-radius:8px;font-size:12px;
background:var(--soft);margin-left:4px}.badge.mismatch,.badge.problem{background:var(--bad)}.badge.block{color:var(--block)}
.badge.abort{color:#fff;background:var(--abort)}.badge.what_if{background:var(--whatif)}
tr.problem{background:var(--bad)}td.diff{outline:2px solid var(--block);outline-offset:-2px}
td.whatif-diff{background:var(--whatif)}
details.run{border:1px solid var(--line);border-radius:4px;margin:6px 0;padding:4px 8px}
details.run summary{cursor:pointer}details.run table{margin:6px 0}.sw{display:inline-block;width:10px;height:10px;
margin:0 4px 0 12px}.sw-warn{background:var(--warn)}.sw-block{background:var(--block)}.sw-abort{background:var(--abort)}
svg.chart{width:100%;height:auto;background:var(--soft)}svg text{font-size:11px;fill:var(--muted)}
.bar-warn{fill:var(--warn)}.bar-block{fill:var(--block)}.bar-abort{fill:var(--abort)}.axis{stroke:#aab2bb}
pre{background:var(--soft);padding:8px;overflow:auto;max-height:360px;white-space:pre-wrap;overflow-wrap:anywhere}
.tools{margin:8px 0}.tools input{width:320px;padding:3px 6px}
"""

JS = """
(() => {
  "use strict";
  const runs = Array.from(document.querySelectorAll("details.run"));
  const filter = document.getElementById("run-filter");
  const shown = document.getElementById("runs-shown");
  const apply = () => {
    const q = filter ? filter.value.trim().toLowerCase() : "";
    let n = 0;
    for (const r of runs) {
      const hit = !q || r.dataset.search.includes(q);
      r.hidden = !hit;
      if (hit) n += 1;
    }
    if (shown) shown.textContent = String(n);
  };
  if (filter) filter.addEventListener("input", apply);
  for (const b of document.querySelectorAll("button[data-open]")) {
    b.addEventListener("click", () => {
      for (const r of runs) if (!r.hidden) r.open = b.dataset.open === "1";
    });
  }
  apply();
  document.documentElement.dataset.ready = "1";
})();
"""


def _csp_hash(source: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode() + "'"


CSP = (
    f"default-src 'none'; style-src {_csp_hash(CSS)}; script-src {_csp_hash(JS)}; "
    "img-src 'none'; base-uri 'none'; form-action 'none'"
)


def esc(value: Any) -> str:
    """Any value as HTML text, safe inside an element or a quoted attribute."""
    return escape(value if isinstance(value, str) else str(value), quote=True)


def value_text(value: Any) -> str:
    """A summary value exactly as its element shows it: the JSON text, a string as itself."""
    return value if isinstance(value, str) else json.dumps(value)


def _keyed(tag: str, key: str, value: Any, cls: str = "num") -> str:
    return f'<{tag} class="{cls}" data-key="{esc(key)}">{esc(value_text(value))}</{tag}>'


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _fmt_ts(ts: Any) -> tuple[str, str]:
    """(short, full) texts of a timestamp in ms since the epoch."""
    if not isinstance(ts, int | float) or isinstance(ts, bool):
        return "—", ""
    try:
        t = datetime.fromtimestamp(ts / 1000, UTC)
    except (OverflowError, OSError, ValueError):
        return esc(ts), ""
    return t.strftime("%Y-%m-%d %H:%M:%S.") + f"{t.microsecond // 1000:03d}", t.isoformat()


def _minute(text: Any) -> int | None:
    """Seconds since the epoch of a per-minute bucket's label, or None when it is unreadable."""
    if not isinstance(text, str):
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return int(t.timestamp()) // 60 * 60


# ---------------------------------------------------------------- sections


def _header(report: dict[str, Any]) -> str:
    r = report.get("range") or {}
    s = report.get("summary") or {}
    topics = r.get("topics") or {}
    problems = sum(_int(s.get(k)) for k in PROBLEMS)
    if problems:
        parts = ", ".join(f"{_int(s.get(k))} {k}" for k in PROBLEMS if _int(s.get(k)))
        verdict = f'<p class="verdict bad">{problems} decisions differ from the replay: {esc(parts)}.</p>'
    else:
        verdict = (
            f'<p class="verdict ok">Every replayed decision matched the recorded one '
            f"({_int(s.get('matched'))} matched).</p>"
        )
    return (
        "<header><h1>loopwarden audit</h1>"
        f'<p class="muted">Events from <b>{esc(r.get("from") or "the beginning")}</b> to '
        f"<b>{esc(r.get('to') or 'the end')}</b>; runs looked back {esc(r.get('lookback_s', '—'))} s for "
        f"their start. Topics: events <code>{esc(topics.get('events', '—'))}</code>, decisions "
        f"<code>{esc(topics.get('decisions', '—'))}</code>. Generated at {esc(r.get('generated_at', '—'))}.</p>"
        f"{verdict}</header>"
    )


def _summary(summary: dict[str, Any]) -> str:
    cards, extra = [], []
    for key, value in summary.items():
        if key in ("by_action", "by_detector", "what_if", "budgets", "shadow"):
            continue
        if isinstance(value, dict):
            extra.append(_counts_table(key, key, value))
            continue
        alert = " alert" if key in PROBLEMS + ("partial_runs",) and _int(value) else ""
        cards.append(
            f'<div class="stat{alert}"><span class="label">{esc(LABELS.get(key, key))}</span>'
            f"{_keyed('span', key, value)}</div>"
        )
    return f'<section id="summary"><h2>Summary</h2><div class="stats">{"".join(cards)}</div>{"".join(extra)}</section>'


def _counts_table(title: str, prefix: str, counts: dict[str, Any], total: int | None = None) -> str:
    rows = []
    for name, n in counts.items():
        share = f"{100 * n / total:.1f}%" if total and isinstance(n, int | float) else ""
        rows.append(
            f'<tr><td>{esc(name)}</td>{_keyed("td", f"{prefix}.{name}", n, "n")}<td class="n muted">{share}</td></tr>'
        )
    body = "".join(rows) or '<tr><td colspan="3" class="muted">none</td></tr>'
    head = '<tr><th>name</th><th class="n">decisions</th><th></th></tr>'
    return f"<div><h3>{esc(title)}</h3><table>{head}{body}</table></div>"


def _action_table(title: str, what: str, table: dict[str, Any]) -> str:
    def weight(item: tuple[str, Any]) -> tuple[int | str, ...]:
        c = item[1] if isinstance(item[1], dict) else {}
        return tuple(-_int(c.get(a)) for a in ACTIONS[::-1]) + (item[0],)

    rows = []
    for name, c in sorted(table.items(), key=weight):
        c = c if isinstance(c, dict) else {}
        cells = "".join(f'<td class="n">{esc(_int(c.get(a)))}</td>' for a in ACTIONS)
        rows.append(f'<tr><td>{esc(name)}</td>{cells}<td class="n">{sum(_int(c.get(a)) for a in ACTIONS)}</td></tr>')
    head = "".join(f'<th class="n act act-{a}">{a}</th>' for a in ACTIONS)
    body = "".join(rows) or '<tr><td colspan="6" class="muted">none</td></tr>'
    return (
        f'<div><h3>{esc(title)}</h3><div class="scroll"><table><tr><th>{esc(what)}</th>{head}'
        f'<th class="n">total</th></tr>{body}</table></div></div>'
    )


def _decisions(report: dict[str, Any]) -> str:
    s = report.get("summary") or {}
    total = _int(s.get("decisions_replayed"))
    return (
        '<section id="decisions"><h2>Replayed decisions</h2><div class="grid">'
        + _counts_table("By action", "by_action", s.get("by_action") or {}, total)
        + _counts_table("By detector (not allowed)", "by_detector", s.get("by_detector") or {})
        + '</div><div class="grid">'
        + _action_table("By agent", "agent", report.get("by_agent") or {})
        + _action_table("By tool", "tool", report.get("by_tool") or {})
        + "</div></section>"
    )


def _what_if(summary: dict[str, Any]) -> str:
    w = summary.get("what_if")
    if not isinstance(w, dict):
        return (
            '<section id="what-if"><h2>What-if</h2><p class="muted">No what-if config was given '
            f"(what_if: {_keyed('span', 'what_if', w)}).</p></section>"
        )
    cards = "".join(
        f'<div class="stat"><span class="label">{esc(WHAT_IF_LABELS.get(k, k))}</span>'
        f"{_keyed('span', f'what_if.{k}', v)}</div>"
        for k, v in w.items()
    )
    return (
        '<section id="what-if"><h2>What-if</h2><p class="muted">Replayed under another config, '
        f'compared with what was decided.</p><div class="stats">{cards}</div></section>'
    )


def _cards(prefix: str, values: dict[str, Any], labels: dict[str, str]) -> str:
    """A card for each number of `values` (a dict of numbers: one card for each of them),
    under the data-key `prefix.key`."""
    cards = []
    for k, v in values.items():
        if isinstance(v, dict):
            cards.append(_cards(f"{prefix}.{k}", v, {n: f"{labels.get(k, k)}: {n}" for n in v}))
            continue
        cards.append(
            f'<div class="stat"><span class="label">{esc(labels.get(k, k))}</span>{_keyed("span", f"{prefix}.{k}", v)}'
            "</div>"
        )
    return "".join(cards)


def _panel(title: str, note: str, cards: str, *tables: str) -> str:
    grid = f'<div class="grid">{"".join(tables)}</div>' if tables else ""
    return f'<h3>{title}</h3><p class="muted">{note}</p><div class="stats">{cards}</div>{grid}'


def _policy(summary: dict[str, Any]) -> str:
    """Budgets, and the runs not enforced (shadow mode and holdout): what they would have
    been told, and what they did after the first call that would have been stopped."""
    b, sh = summary.get("budgets"), summary.get("shadow")
    parts = []
    if isinstance(b, dict):
        parts.append(
            _panel(
                "Budgets",
                "Decisions of the run budget (<code>run_budget</code>), by what they did or, not enforced, would "
                "have done.",
                _cards("budgets", {k: v for k, v in b.items() if not isinstance(v, dict)}, BUDGET_LABELS),
                _counts_table("By warning key", "budgets.by_key", b.get("by_key") or {}),
            )
        )
    if isinstance(sh, dict):
        would = sh.get("would_stop")
        parts.append(
            _panel(
                "Shadow and held-out runs",
                "Their decisions are published as allow, with <code>enforced: false</code>; what they would have "
                "been told:",
                _cards("shadow", {k: v for k, v in sh.items() if not isinstance(v, dict)}, SHADOW_LABELS),
                _counts_table("By shadow action", "shadow.by_shadow_action", sh.get("by_shadow_action") or {}),
                _counts_table("By detector (would not allow)", "shadow.by_detector", sh.get("by_detector") or {}),
            )
            + _panel(
                "After the first call that would have been blocked or aborted",
                "What those runs did from that point to their end: the tool calls they made and the tokens they "
                "used (median and 90th percentile over the runs), and how many ended by themselves (a run_end).",
                _cards("shadow.would_stop", would if isinstance(would, dict) else {}, WOULD_LABELS),
            )
        )
    body = "".join(parts) or '<p class="muted">Not in this report.</p>'
    return f'<section id="policy"><h2>Budgets and runs not enforced</h2>{body}</section>'


def _chart(points: list[Any]) -> str:
    parsed, unreadable = [], 0
    for p in points:
        t = _minute(p.get("minute")) if isinstance(p, dict) else None
        if t is None:
            unreadable += 1
            continue
        parsed.append((t, _int(p.get("warn")), _int(p.get("block")), _int(p.get("abort"))))
    note = f' <span class="muted">({unreadable} points with an unreadable minute left out)</span>' if unreadable else ""
    if not parsed:
        return (
            '<section id="per-minute"><h2>Warnings, blocks and aborts per minute</h2>'
            f'<p class="muted">No warnings, blocks or aborts.{note}</p></section>'
        )
    parsed.sort()
    first, last = parsed[0][0], parsed[-1][0]
    step, bars = _bars(parsed, first, last)
    top = _nice(max(sum(b) for b in bars))
    width, height, left, right, top_pad, bottom = 960, 240, 44, 8, 10, 26
    pw, ph = width - left - right, height - top_pad - bottom
    bw = pw / len(bars)
    gap = 1 if bw >= 4 else 0
    fmt = "%H:%M" if last - first < 86400 else "%m-%d %H:%M"
    out = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="warnings, blocks and aborts per {step} minute(s)">'
    ]
    for frac in (0, 0.5, 1):
        y = top_pad + ph * (1 - frac)
        out.append(
            f'<line class="axis" x1="{left}" x2="{width - right}" y1="{y:.1f}" y2="{y:.1f}"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" text-anchor="end">{_tick(top * frac)}</text>'
        )
    for i, (w, b, a) in enumerate(bars):
        if not w + b + a:
            continue
        t0 = first + i * step * 60
        label = datetime.fromtimestamp(t0, UTC).strftime("%Y-%m-%d %H:%M")
        x, y = left + i * bw, top_pad + ph
        rects = []
        for n, cls in ((a, "abort"), (b, "block"), (w, "warn")):  # abort at the bottom
            if n:
                h = ph * n / top
                y -= h
                rects.append(
                    f'<rect class="bar-{cls}" x="{x:.2f}" y="{y:.2f}" width="{max(bw - gap, 0.5):.2f}" '
                    f'height="{h:.2f}"/>'
                )
        out.append(f"<g><title>{label} UTC (+{step} min): {w} warn, {b} block, {a} abort</title>{''.join(rects)}</g>")
    out += _time_labels(len(bars), first, step, fmt, left, width - right, bw, height - 8)
    out.append("</svg>")
    start = datetime.fromtimestamp(first, UTC).strftime("%Y-%m-%d %H:%M")
    end = datetime.fromtimestamp(last, UTC).strftime("%Y-%m-%d %H:%M")
    legend = (
        '<p class="muted"><span class="sw sw-warn"></span>warn<span class="sw sw-block"></span>block'
        f'<span class="sw sw-abort"></span>abort — UTC, {start} to {end}, one bar per {step} minute(s), '
        f"{len(parsed)} minutes with any of them.{note}</p>"
    )
    return f'<section id="per-minute"><h2>Warnings, blocks and aborts per minute</h2>{"".join(out)}{legend}</section>'


def _time_labels(n: int, first: int, step: int, fmt: str, left: int, right: int, bw: float, y: int) -> list[str]:
    """Six times along the chart's axis, the first and the last at its ends."""
    out = []
    for k in range(6):
        i = round(k * (n - 1) / 5) if n > 1 else 0
        label = datetime.fromtimestamp(first + i * step * 60, UTC).strftime(fmt)
        anchor = "start" if k == 0 else "end" if k == 5 else "middle"
        x = left if k == 0 else right if k == 5 else left + (i + 0.5) * bw
        out.append(f'<text x="{x:.1f}" y="{y}" text-anchor="{anchor}">{label}</text>')
    return out


def _bars(parsed: list[tuple[int, int, int, int]], first: int, last: int) -> tuple[int, list[list[int]]]:
    """(minutes per bar, each bar's warn, block and abort): at most CHART_MAX_BARS."""
    span = (last - first) // 60 + 1
    step = max(1, math.ceil(span / CHART_MAX_BARS))
    bars = [[0, 0, 0] for _ in range(math.ceil(span / step))]
    for t, *counts in parsed:
        bucket = bars[(t - first) // 60 // step]
        for i, n in enumerate(counts):
            bucket[i] += n
    return step, bars


def _nice(n: int) -> int:
    """The smallest 1, 2 or 5 times a power of ten that is at least n (and at least 1)."""
    p = 1
    while True:
        for m in (1, 2, 5):
            if m * p >= n:
                return m * p
        p *= 10


def _tick(v: float) -> str:
    return str(int(v)) if v == int(v) else f"{v:g}"


def _decision_cell(d: Any, cls: str = "") -> str:
    attr = f' class="{cls}"' if cls else ""
    if not isinstance(d, dict):
        return f'<td{attr}><span class="muted">—</span></td>'
    action = d.get("action")
    kind = action if action in ACTIONS else "other"
    parts = [f'<span class="act act-{kind}">{esc(action)}</span>']
    if d.get("detector"):
        parts.append(f" {esc(d['detector'])}")
    if d.get("count") is not None:
        parts.append(f" ×{esc(d['count'])}")
    if d.get("message"):
        parts.append(f'<div class="msg">{esc(d["message"])}</div>')
    if d.get("config_hash"):
        h = str(d["config_hash"])
        parts.append(f'<div class="hash" title="{esc(h)}">{esc(h[:12])}</div>')
    return f"<td{attr}>{''.join(parts)}</td>"


def _verdict(d: Any) -> tuple[Any, Any]:
    return (d.get("action"), d.get("detector")) if isinstance(d, dict) else (None, None)


def _run(run: dict[str, Any], with_what_if: bool, is_open: bool) -> str:
    flags = [f for f in run.get("flags") or [] if isinstance(f, str)]
    badges = "".join(f'<span class="badge {esc(f)}">{esc(f)}</span>' for f in flags)
    if run.get("partial"):
        badges += '<span class="badge problem" title="its first event is not within the look-back">partial</span>'
    timeline = run.get("timeline") or []
    search = " ".join(str(run.get(k) or "") for k in ("run_id", "gateway_id", "agent_id")) + " " + " ".join(flags)
    rows = []
    for e in timeline:
        status = e.get("status")
        problem = status in PROBLEMS
        short, full = _fmt_ts(e.get("ts"))
        rec, rep, wif = e.get("recorded"), e.get("replayed"), e.get("what_if")
        cells = [
            f'<td class="n">{esc(e.get("seq", ""))}</td>',
            f'<td title="{esc(full)}">{esc(short)}</td>',
            f"<td>{esc(e.get('type', ''))}</td>",
            f"<td>{esc(e.get('tool_name') or '')}</td>",
            f"<td>{esc(status) if status else '<span class=muted>—</span>'}</td>",
            _decision_cell(rec, "diff" if problem else ""),
            _decision_cell(rep, "diff" if problem else ""),
        ]
        if with_what_if:
            base = rec if rec is not None else rep
            changed = wif is not None and _verdict(wif) != _verdict(base)
            cells.append(_decision_cell(wif, "whatif-diff" if changed else ""))
        rows.append(f"<tr{' class=problem' if problem else ''}>{''.join(cells)}</tr>")
    head = (
        "<tr><th class=n>seq</th><th>time (UTC)</th><th>event</th><th>tool</th><th>status</th>"
        "<th>recorded</th><th>replayed</th>" + ("<th>what-if</th>" if with_what_if else "") + "</tr>"
    )
    truncated = _int(run.get("truncated"))
    cut = f'<p class="muted">{truncated} earlier entries left out.</p>' if truncated else ""
    agent = run.get("agent_id")
    return (
        f'<details class="run" data-search="{esc(search.lower())}"{" open" if is_open else ""}>'
        f"<summary><code>{esc(run.get('run_id', ''))}</code>"
        f' <span class="muted">gateway</span> {esc(run.get("gateway_id", ""))} <span class="muted">agent</span> '
        f'{esc(agent if agent is not None else "(default)")} {badges} <span class="muted">{len(timeline)} entries'
        f'</span></summary>{cut}<div class="scroll"><table>{head}{"".join(rows)}</table></div></details>'
    )


def _runs(report: dict[str, Any]) -> str:
    runs = [r for r in report.get("runs") or [] if isinstance(r, dict)]
    if not runs:
        return (
            '<section id="runs"><h2>Flagged runs</h2><p class="muted">No run had a mismatch, a block or an '
            "abort.</p></section>"
        )
    with_what_if = isinstance((report.get("summary") or {}).get("what_if"), dict)
    tools = (
        '<div class="tools"><input id="run-filter" type="search" placeholder="filter by run, gateway, agent or '
        'flag" aria-label="filter runs"> <button type="button" data-open="1">open all</button> '
        '<button type="button" data-open="0">close all</button> <span class="muted"><span id="runs-shown">'
        f"{len(runs)}</span> of {len(runs)} shown</span></div>"
    )
    body = "".join(_run(r, with_what_if, i < OPEN_RUNS) for i, r in enumerate(runs))
    return (
        f'<section id="runs"><h2>Flagged runs</h2><p class="muted">Runs with a mismatch, a block or an abort: '
        f"their calls, results and verdicts, recorded beside replayed{' and what-if' if with_what_if else ''}."
        f"</p>{tools}{body}</section>"
    )


def _configs(configs: list[Any]) -> str:
    items = []
    for c in configs:
        if not isinstance(c, dict):
            continue
        agents = c.get("agents") or {}
        rows = "".join(f"<tr><td>{esc(a)}</td><td><code>{esc(h)}</code></td></tr>" for a, h in agents.items())
        table = f"<table><tr><th>agent</th><th>resolved config</th></tr>{rows}</table>" if rows else ""
        items.append(
            f'<article class="config"><h3><code>{esc(c.get("config_hash", ""))}</code></h3>'
            f'<p class="muted">from {esc(c.get("source", "—"))}</p>{table}<pre>{esc(c.get("text", ""))}</pre>'
            "</article>"
        )
    body = "".join(items) or '<p class="muted">No config recorded.</p>'
    return f'<section id="configs"><h2>Configs used</h2>{body}</section>'


def render(report: dict[str, Any]) -> str:
    """The whole page for one audit report: a dict with `summary` (the `--json` summary), `range`,
    `by_agent`, `by_tool`, `per_minute`, `runs` (the flagged runs with their timelines) and `configs`."""
    summary = report.get("summary") or {}
    r = report.get("range") or {}
    title = f"loopwarden audit {r.get('from') or ''} – {r.get('to') or ''}".strip()
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        + _header(report)
        + _summary(summary)
        + _decisions(report)
        + _what_if(summary)
        + _policy(summary)
        + _chart(report.get("per_minute") or [])
        + _runs(report)
        + _configs(report.get("configs") or [])
        + f"<script>{JS}</script></body></html>\n"
    )
