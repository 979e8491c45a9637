"""The audit's HTML report without a browser: every summary value under its data-key, hostile strings
escaped, nothing loaded from anywhere, the per-minute chart bounded and faithful, the timelines'
highlights. tests/integration/test_audit_html_browser.py opens the same sample in Chromium."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from datetime import UTC, datetime, timedelta
from html.parser import HTMLParser

from streams.audit.html import CHART_MAX_BARS, render

HOSTILE = """</script><img src=x onerror="window.__pwned=1"><script>window.__pwned=2</script>"'&<u>x"""
T0_MS = 1_796_058_000_000  # 2026-11-30T17:00:00Z


def verdict(
    action: str,
    detector: str | None = None,
    count: int | None = None,
    message: str | None = None,
    config_hash: str = "c0ffee00c0ffee00c0ffee00",
) -> dict:
    return {"action": action, "detector": detector, "count": count, "message": message, "config_hash": config_hash}


def entry(
    seq: int,
    status: str | None,
    recorded: dict | None,
    replayed: dict | None,
    what_if: dict | None = None,
    type_: str = "tool_call",
    tool: str | None = "read",
) -> dict:
    return {
        "seq": seq,
        "ts": T0_MS + seq * 1000,
        "type": type_,
        "tool_name": tool,
        "status": status,
        "recorded": recorded,
        "replayed": replayed,
        "what_if": what_if,
    }


def sample_report(*, what_if: bool = True, runs: bool = True, minutes: int = 3000) -> dict:
    """A report as `loopwarden audit --html` builds it, with a hostile string in every free-text place
    and `minutes` per-minute points (every third minute missing)."""
    t0 = datetime(2026, 11, 30, 17, 0, tzinfo=UTC)
    per_minute = [
        {
            "minute": (t0 + timedelta(minutes=i)).strftime("%Y-%m-%dT%H:%MZ"),
            "warn": i % 7,
            "block": int(i % 5 == 0),
            "abort": int(i % 97 == 0),
        }
        for i in range(minutes)
        if i % 3 != 2
    ]
    summary = {
        "events": 120_345,
        "runs": 812,
        "partial_runs": 3,
        "decisions_recorded": 60_170,
        "decisions_replayed": 60_171,
        "matched": 60_160,
        "mismatched": 4,
        "missing": 2,
        "unexpected": 1,
        "conflicting": 1,
        "by_action": {"allow": 59_000, "warn": 1_000, "block": 160, "abort": 11},
        "by_detector": {"generic_repeat": 900, "ping_pong": 250, HOSTILE: 21},
        "what_if": (
            {
                "config_hash": "deadbeef" + HOSTILE,
                "newly_warned": 40,
                "newly_blocked": 7,
                "no_longer_warned": 2,
                "no_longer_blocked": 0,
                "aborts_gained": 1,
                "aborts_lost": 0,
            }
            if what_if
            else None
        ),
        "budgets": {
            "warnings": 31,
            "aborts": 4,
            "aborts_on_usage": 3,
            "calls_after_abort": 9,
            "not_enforced": 6,
            "by_key": {"budget:tokens": 4, "budget:tokens:80": 20, "budget:calls:95": 11},
        },
        "shadow": {
            "decisions": 480,
            "runs": 17,
            "held_out_runs": 12,
            "by_shadow_action": {"allow": 400, "warn": 50, "block": 22, "abort": 8},
            "by_detector": {"ping_pong": 52, HOSTILE: 28},
            "would_stop": {
                "runs": 7,
                "ended_by_themselves": 5,
                "calls_after": {"median": 12, "p90": 41},
                "tokens_after": {"median": 23_456, "p90": 98_765},
            },
        },
        "seconds": 12.3456789,
        "events_per_s": 9748.123456789,
    }
    flagged = [
        {
            "run_id": "run-" + HOSTILE,
            "gateway_id": "gw-" + HOSTILE,
            "agent_id": HOSTILE,
            "partial": False,
            "flags": ["mismatch", "block", "what_if"],
            "truncated": 0,
            "timeline": [
                entry(1, "matched", verdict("allow"), verdict("allow"), verdict("allow")),
                entry(2, None, None, None, type_="tool_result"),
                entry(
                    3,
                    "mismatched",
                    verdict("warn", "generic_repeat", 3, "said " + HOSTILE),
                    verdict("block", "generic_repeat", 3, "replayed " + HOSTILE),
                    verdict("block", "generic_repeat", 3, "what-if " + HOSTILE),
                    tool=HOSTILE,
                ),
                entry(4, "missing", None, verdict("block", "ping_pong", 4), verdict("block", "ping_pong", 4)),
                entry(5, "matched", verdict("allow"), verdict("allow"), verdict("warn", "generic_repeat", 2)),
            ],
        },
        {
            "run_id": "run-abort",
            "gateway_id": "gw-2",
            "agent_id": None,
            "partial": True,
            "flags": ["abort"],
            "truncated": 250,
            "timeline": [
                entry(
                    251,
                    "matched",
                    verdict("abort", "compaction_loop_persisted", 2),
                    verdict("abort", "compaction_loop_persisted", 2),
                    None,
                    type_="compaction_retry",
                ),
                entry(252, None, None, None, type_="run_end", tool=None),
            ],
        },
    ]
    return {
        "summary": summary,
        "range": {
            "from": "2026-11-30T17:00:00Z",
            "to": None,
            "lookback_s": 86400.0,
            "topics": {"events": "loopwarden.events", "decisions": HOSTILE},
            "generated_at": "2026-11-30T18:00:00Z",
        },
        "by_agent": {
            "(default)": {"allow": 100, "warn": 1, "block": 0, "abort": 1},
            HOSTILE: {"allow": 5, "warn": 2, "block": 1, "abort": 0},
        },
        "by_tool": {
            "read": {"allow": 50, "warn": 1, "block": 0, "abort": 0},
            HOSTILE: {"allow": 1, "warn": 0, "block": 3, "abort": 0},
        },
        "per_minute": per_minute,
        "runs": flagged if runs else [],
        "configs": [
            {
                "config_hash": "c0ffee00c0ffee00c0ffee00",
                "source": "config/" + HOSTILE,
                "text": "{\n  // " + HOSTILE + "\n  loopwarden: {warnAt: 3},\n}\n",
                "agents": {"(default)": "c0ffee00", HOSTILE: "abad1dea"},
            }
        ],
    }


def summary_leaves(summary: dict, prefix: str = "") -> dict[str, str]:
    """Each leaf of the summary under its dotted key, as the text the page must show (JSON; a string as is)."""
    out: dict[str, str] = {}
    for key, value in summary.items():
        if isinstance(value, dict):
            out.update(summary_leaves(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value if isinstance(value, str) else json.dumps(value)
    return out


class Page(HTMLParser):
    """The parts of a page these tests look at: tags with their attributes, data-key texts, text, scripts, styles."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.keyed: list[tuple[str, str]] = []
        self.text: list[str] = []
        self.scripts: list[str] = []
        self.styles: list[str] = []
        self._open_key: tuple[str, str, list[str]] | None = None
        self._raw: list[str] | None = None
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append((tag, a))
        if "data-key" in a:
            assert self._open_key is None, "data-key elements do not nest"
            self._open_key = (tag, a["data-key"], [])
        if tag in ("script", "style"):
            self._raw = []

    def handle_endtag(self, tag):
        if self._open_key and tag == self._open_key[0]:
            self.keyed.append((self._open_key[1], "".join(self._open_key[2])))
            self._open_key = None
        if tag in ("script", "style") and self._raw is not None:
            (self.scripts if tag == "script" else self.styles).append("".join(self._raw))
            self._raw = None

    def handle_data(self, data):
        if self._raw is not None:
            self._raw.append(data)
            return
        self.text.append(data)
        if self._open_key:
            self._open_key[2].append(data)


def test_every_summary_value_is_shown_once_under_its_data_key():
    report = sample_report()
    page = Page(render(report))
    expected = summary_leaves(report["summary"])
    assert len(expected) == 12 + 4 + 3 + 7 + 5 + 3 + 3 + 4 + 2 + 6
    assert sorted(page.keyed) == sorted(expected.items())
    assert dict(page.keyed)["seconds"] == "12.3456789"
    assert dict(page.keyed)["what_if.newly_blocked"] == "7"
    assert dict(page.keyed)["shadow.would_stop.tokens_after.p90"] == "98765"
    assert dict(page.keyed)["budgets.by_key.budget:calls:95"] == "11"


def test_budgets_and_runs_not_enforced_have_a_section_of_their_own():
    report = sample_report()
    html = render(report)
    section = html.split('<section id="policy">')[1].split("</section>")[0]
    page = Page(section)
    keys = dict(page.keyed)
    assert {k for k in keys if k.split(".")[0] in ("budgets", "shadow")} == set(keys)
    assert keys["shadow.by_detector." + HOSTILE] == "28" and HOSTILE not in section
    text = "".join(page.text)
    for label in ("runs that would have been stopped", "of them ended by themselves", "tokens after: p90"):
        assert label in text, label
    # No runs would have been stopped: the spreads are null, shown as such.
    report["summary"]["shadow"]["would_stop"] = {
        "runs": 0,
        "ended_by_themselves": 0,
        "calls_after": {"median": None, "p90": None},
        "tokens_after": {"median": None, "p90": None},
    }
    page = Page(render(report))
    assert dict(page.keyed)["shadow.would_stop.calls_after.median"] == "null"
    assert sorted(page.keyed) == sorted(summary_leaves(report["summary"]).items())


def test_what_if_null_and_no_runs():
    report = sample_report(what_if=False, runs=False)
    html = render(report)
    page = Page(html)
    assert dict(page.keyed)["what_if"] == "null"
    assert sorted(page.keyed) == sorted(summary_leaves(report["summary"]).items())
    assert "No run had a mismatch, a block or an abort." in html
    assert "what-if</th>" not in html and 'class="run"' not in html


def test_an_empty_report_still_renders():
    page = Page(render({"summary": {"events": 0, "runs": 0, "what_if": None, "by_action": {}}}))
    assert dict(page.keyed) == {"events": "0", "runs": "0", "what_if": "null"}
    assert "No warnings, blocks or aborts." in "".join(page.text)


def test_hostile_strings_are_text_not_markup():
    html = render(sample_report())
    assert HOSTILE not in html
    assert "<img" not in html and "onerror=" not in html.replace("onerror=&quot;", "")
    page = Page(html)
    assert [t for t, _ in page.tags].count("script") == 1  # ours, at the end
    assert not any(t in ("img", "u") for t, _ in page.tags)
    assert "window.__pwned" not in page.scripts[0]
    text = "".join(page.text)
    for shown in ("run-" + HOSTILE, "said " + HOSTILE, "  // " + HOSTILE, "config/" + HOSTILE):
        assert shown in text, shown
    # In attributes too: the detector's data-key and the run's filter text come back whole.
    assert ("by_detector." + HOSTILE, "21") in page.keyed
    assert any(a.get("data-search", "").startswith("run-" + HOSTILE.lower()) for _, a in page.tags)


def test_nothing_is_loaded_from_anywhere():
    html = render(sample_report())
    page = Page(html)
    for tag, attrs in page.tags:
        assert tag not in ("link", "img", "iframe", "object", "embed", "base", "audio", "video", "source"), tag
        for name in ("src", "href", "srcset", "xlink:href", "action", "poster", "data", "background"):
            assert name not in attrs, (tag, name, attrs[name])
    assert not re.search(r"url\(|@import|https?://", "".join(page.styles + page.scripts), re.I)
    assert not re.search(r"fetch\(|XMLHttpRequest|WebSocket|import\(", page.scripts[0])
    assert "http://" not in html.replace(HOSTILE, "") and "https://" not in html


def test_the_csp_allows_exactly_the_inline_style_and_script():
    html = render(sample_report())
    page = Page(html)
    csp = next(a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy")
    assert "default-src 'none'" in csp

    def h(s: str) -> str:
        return "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"

    assert re.search(r"style-src ([^;]+)", csp).group(1) == h(page.styles[0])
    assert re.search(r"script-src ([^;]+)", csp).group(1) == h(page.scripts[0])


BAR = re.compile(r"<title>([^<]*) UTC \(\+\d+ min\): (\d+) warn, (\d+) block, (\d+) abort</title>")


def bars(html: str) -> list[tuple[str, int, int, int]]:
    return [(m[0], int(m[1]), int(m[2]), int(m[3])) for m in BAR.findall(html)]


def test_thousands_of_minutes_are_summed_into_a_bounded_chart():
    report = sample_report(minutes=6000)
    html = render(report)
    drawn = bars(html)
    assert 0 < len(drawn) <= CHART_MAX_BARS
    pm = report["per_minute"]
    assert len(pm) == 4000
    for i, action in ((1, "warn"), (2, "block"), (3, "abort")):
        assert sum(b[i] for b in drawn) == sum(p[action] for p in pm), action
    assert "one bar per 13 minute(s)" in html  # 6000 minutes / 480 bars, rounded up
    assert len(html) < 1_000_000


def test_a_short_range_has_one_bar_per_minute_with_gaps_left_empty():
    report = sample_report(minutes=30)
    drawn = bars(render(report))
    nonempty = [p for p in report["per_minute"] if p["warn"] + p["block"] + p["abort"]]
    assert [b[0] for b in drawn] == [p["minute"].replace("T", " ").rstrip("Z") for p in nonempty]
    assert [b[1:] for b in drawn] == [(p["warn"], p["block"], p["abort"]) for p in nonempty]


def test_unreadable_minutes_are_left_out_and_counted():
    report = sample_report(minutes=3)
    report["per_minute"].append({"minute": HOSTILE, "warn": 1, "block": 0, "abort": 0})
    html = render(report)
    assert "(1 points with an unreadable minute left out)" in html
    assert [b[1:] for b in bars(html)] == [(0, 1, 1), (1, 0, 0)]


def rows(html: str) -> list[str]:
    return re.findall(r"<tr[^>]*>.*?</tr>", html.split('id="runs"')[1], re.S)


def test_timeline_rows_highlight_mismatches_and_what_if_changes():
    html = render(sample_report())
    timeline = [r for r in rows(html) if '<td class="n">' in r]
    by_seq = {int(re.search(r'<td class="n">(\d+)</td>', r).group(1)): r for r in timeline}
    assert set(by_seq) == {1, 2, 3, 4, 5, 251, 252}
    assert [s for s, r in by_seq.items() if r.startswith("<tr class=problem>")] == [3, 4]
    assert by_seq[3].count('<td class="diff">') == 2
    # What-if cells are marked where they differ from what was decided (or replayed when nothing was recorded).
    assert [s for s, r in by_seq.items() if "whatif-diff" in r] == [3, 5]
    assert "what-if</th>" in html
    assert "250 earlier entries left out." in html
    assert 'class="badge problem"' in html  # the partial run


def test_render_is_deterministic():
    assert render(sample_report()) == render(sample_report())
