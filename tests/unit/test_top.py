"""`loopwarden top` without a broker: the aggregation (time passed in) and the rendering."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from rich.console import Console

from detectors.fleet import Breaker, StopOrder, encode_fleet_record
from detectors.policy import POLICY_NAMES
from detectors.rules import NAMES
from detectors.wire import Decision
from streams.kafka.errors import SettingsError
from streams.times import parse_from
from streams.tools.top import TopState, dead_letter_reason, metrics_url, parse_lags
from streams.tools.topview import DETECTOR_SHORT, cut_middle, plain_line, render, run_columns

T0 = 1_700_000_000.0


def dec(
    run: str,
    seq: int,
    action: str = "allow",
    detector: str | None = None,
    *,
    gw: str = "gw-1",
    agent: str | None = "main",
    tool: str = "read",
    level: str | None = None,
    count: int | None = None,
    message: str | None = None,
    paired: str | None = None,
    event_id: str | None = None,
) -> Decision:
    if level is None:
        level = "none" if detector is None else ("critical" if action in ("block", "abort") else "warning")
    return Decision(
        run_id=run,
        seq=seq,
        gateway_id=gw,
        agent_id=agent,
        tool_call_id=None,
        tool_name=tool,
        ts=None,
        event_id=event_id or f"{run}:{seq}",
        action=action,
        level=level,
        detector=detector,
        count=count,
        message=message,
        warning_key=None,
        paired_tool_name=paired,
        args_hash=None,
        config_hash="c",
    )


def test_counts_by_action_detector_and_gateway():
    s = TopState(start=T0)
    s.add(dec("r1", 1), T0 + 1)
    s.add(dec("r1", 2, "warn", "generic_repeat", count=10), T0 + 2)
    s.add(dec("r1", 3, "allow", "generic_repeat", count=11), T0 + 3)  # suppressed repeat of the warning
    s.add(dec("r2", 1, "block", "ping_pong", gw="gw-2", count=20), T0 + 4)
    s.add(dec("r3", 1, "abort", "compaction_loop_persisted", gw="gw-2"), T0 + 5)
    snap = s.snapshot(T0 + 6)
    assert snap["decisions"] == 5
    assert snap["actions"] == {"abort": 1, "allow": 2, "block": 1, "warn": 1}
    assert snap["detectors"] == {"compaction_loop_persisted": 1, "generic_repeat": 2, "ping_pong": 1}
    assert snap["detector_actions"]["generic_repeat"] == {"allow": 1, "warn": 1, "block": 0, "abort": 0}
    assert snap["gateways"]["gw-1"]["decisions"] == 3 and snap["gateways"]["gw-1"]["blocks"] == 0
    assert snap["gateways"]["gw-2"]["decisions"] == 2 and snap["gateways"]["gw-2"]["blocks"] == 1


def test_a_decision_published_again_is_counted_once():
    s = TopState(start=T0)
    d = dec("r1", 7, "block", "generic_repeat", count=20)
    s.add(d, T0 + 1)
    s.add(d, T0 + 2)
    snap = s.snapshot(T0 + 3)
    assert snap["decisions"] == 1 and snap["duplicates"] == 1 and snap["actions"]["block"] == 1


def test_undecodable_records_are_counted_not_fatal():
    s = TopState(start=T0)
    assert not s.add_record(b"{not json", T0)
    assert s.add_record(
        b'{"run_id":"r","seq":1,"gateway_id":"g","agent_id":null,"tool_call_id":null,'
        b'"tool_name":"t","ts":null,"event_id":"r:1","action":"allow","level":"none",'
        b'"detector":null,"count":null,"message":null,"warning_key":null,'
        b'"paired_tool_name":null,"args_hash":null,"config_hash":"c"}',
        T0,
    )
    snap = s.snapshot(T0 + 1)
    assert snap["undecodable"] == 1 and snap["decisions"] == 1


def test_looping_runs_latest_flag_per_run_newest_first():
    s = TopState(start=T0)
    s.add(dec("a", 1, "warn", "generic_repeat", count=10, tool="read"), T0 + 1)
    s.add(dec("b", 1, "warn", "ping_pong", gw="gw-2", agent="x", tool="ls", paired="cat", count=10), T0 + 2)
    s.add(dec("a", 2, "block", "generic_repeat", count=20, tool="read", message="stop"), T0 + 3)
    s.add(dec("c", 1, "warn", "known_poll_no_progress", count=10), T0 + 4)
    s.add(dec("c", 2), T0 + 5)  # c moved on: nothing detected any more
    runs = s.snapshot(T0 + 6)["looping_runs"]
    assert [r["run_id"] for r in runs] == ["a", "b"]
    a = runs[0]
    assert (a["action"], a["detector"], a["count"], a["tool_name"], a["gateway_id"], a["agent_id"], a["message"]) == (
        "block",
        "generic_repeat",
        20,
        "read",
        "gw-1",
        "main",
        "stop",
    )
    assert a["age_s"] == 3.0 and a["looping_for_s"] == 2.0
    assert runs[1]["paired_tool_name"] == "cat"


def test_suppressed_repeats_keep_a_run_listed_and_update_its_count():
    s = TopState(start=T0, forget_after=60)
    s.add(dec("a", 1, "warn", "generic_repeat", count=10), T0)
    s.add(dec("b", 1, "warn", "generic_repeat", count=10), T0 + 1)
    s.add(dec("a", 2, "allow", "generic_repeat", count=15), T0 + 50)
    runs = s.snapshot(T0 + 70)["looping_runs"]  # b was last flagged 69 s ago: forgotten
    assert [(r["run_id"], r["action"], r["count"]) for r in runs] == [("a", "warn", 15)]


def test_an_older_decision_published_again_does_not_reopen_a_run():
    s = TopState(start=T0)
    s.add(dec("a", 5, "warn", "generic_repeat", count=10), T0)
    s.add(dec("a", 6), T0 + 1)  # moved on
    s.add(dec("a", 7, "block", "generic_repeat", count=20), T0 + 2)
    s.add(dec("a", 6), T0 + 3)  # seq 6 again (dropped as a duplicate anyway)
    s.add(dec("a", 3, "warn", "ping_pong", count=9, event_id="not-seen-before"), T0 + 4)
    runs = s.snapshot(T0 + 5)["looping_runs"]
    assert [(r["run_id"], r["action"], r["seq"]) for r in runs] == [("a", "block", 7)]


def test_rates_per_second_and_per_minute():
    s = TopState(start=T0)
    for i in range(100):  # 100 allows over the first 10 s, 10 per second
        s.add(dec(f"n{i}", 1), T0 + i * 0.1)
    s.add(dec("b0", 1, "block", "generic_repeat", gw="gw-2", count=20), T0 + 5)
    snap = s.snapshot(T0 + 10)
    assert snap["window_s"] == {"rate": 10.0, "minute": 10.0}  # observed for 10 s only
    assert snap["per_second"]["allow"] == pytest.approx(10.0)
    assert snap["per_second"]["total"] == pytest.approx(10.1)
    assert snap["per_minute_by_detector"]["generic_repeat"] == {"warn": 0, "block": pytest.approx(6.0), "abort": 0}
    for i in range(1, 6):  # 5 more blocks, one every 10 s
        s.add(dec(f"b{i}", 1, "block", "generic_repeat", gw="gw-2", count=20), T0 + 5 + i * 10)
    later = s.snapshot(T0 + 60)
    assert later["window_s"] == {"rate": 10.0, "minute": 60.0}
    assert later["per_second"]["allow"] == 0
    assert later["per_second"]["block"] == pytest.approx(0.1)
    assert later["per_minute_by_detector"]["generic_repeat"]["block"] == pytest.approx(6.0)
    assert later["gateways"]["gw-2"]["blocks_per_min"] == pytest.approx(6.0)
    assert later["gateways"]["gw-1"]["calls_per_s"] == 0
    gone = s.snapshot(T0 + 1000)
    assert gone["per_minute_by_detector"] == {} and gone["actions"]["allow"] == 100


def test_history_read_at_once_keeps_memory_bounded():
    s = TopState(start=None)
    for i in range(5000):  # an hour and more of history, one decision a second
        s.add(dec(f"n{i}", 1), T0 + i)
    assert len(s._buckets) <= 140
    snap = s.snapshot(T0 + 5000)
    assert snap["decisions"] == 5000 and snap["per_second"]["allow"] == pytest.approx(0.9, abs=0.11)


def test_dead_letters_and_worker_lag():
    s = TopState(start=T0)
    assert s.snapshot(T0)["dead_letters"] is None  # the topic is not read: unknown, not zero
    s.watch_dead_letters()
    assert s.snapshot(T0)["dead_letters"]["total"] == 0
    s.add_dead_letter("missing_key", T0 + 1)
    s.add_dead_letter("missing_key", T0 + 2)
    s.add_dead_letter("decode", T0 + 3)
    s.set_worker("http://w1/metrics", {0: 5, 1: 7}, T0 + 3)
    s.set_worker("http://w2/metrics", None, T0 + 3, error="connection refused")
    snap = s.snapshot(T0 + 60)
    assert snap["dead_letters"]["total"] == 3
    assert snap["dead_letters"]["by_reason"] == {"decode": 1, "missing_key": 2}
    assert snap["dead_letters"]["per_minute"] == pytest.approx(3.0)
    assert snap["workers"][0] == {
        "url": "http://w1/metrics",
        "reachable": True,
        "lag": 12,
        "partitions": {"0": 5, "1": 7},
        "error": None,
        "age_s": 57.0,
    }
    assert snap["workers"][1]["reachable"] is False and snap["workers"][1]["lag"] is None


def test_parse_from():
    now = T0
    assert parse_from(None, now) == "now"
    assert parse_from("now", now) == "now"
    assert parse_from("beginning", now) == "beginning"
    assert parse_from("-10m", now) == now - 600
    assert parse_from("-30s", now) == now - 30
    assert parse_from("2h", now) == now - 7200
    assert parse_from("-1d", now) == now - 86400
    assert parse_from("2024-05-01T12:00:00Z", now) == datetime(2024, 5, 1, 12, tzinfo=UTC).timestamp()
    assert parse_from("2024-05-01T14:00:00+02:00", now) == datetime(2024, 5, 1, 12, tzinfo=UTC).timestamp()
    assert parse_from("2024-05-01T12:00:00", now) == datetime(2024, 5, 1, 12).timestamp()  # local time
    with pytest.raises(SettingsError, match="--from"):
        parse_from("yesterday", now)


def test_helpers():
    text = (
        "# HELP loopwarden_consumer_lag Events not yet folded\n# TYPE loopwarden_consumer_lag gauge\n"
        'loopwarden_consumer_lag{partition="0"} 3.0\nloopwarden_consumer_lag{partition="5"} 0.0\n'
        '# TYPE loopwarden_dead_letters_total counter\nloopwarden_dead_letters_total{reason="x"} 2.0\n'
    )
    assert parse_lags(text) == {0: 3, 5: 0}
    assert parse_lags("") == {}
    assert metrics_url("127.0.0.1:6066") == "http://127.0.0.1:6066/metrics"
    assert metrics_url("http://w:6066") == "http://w:6066/metrics"
    assert metrics_url("https://w/x/metrics") == "https://w/x/metrics"
    assert (
        dead_letter_reason([("loopwarden.source.topic", b"t"), ("loopwarden.error", b"missing_key")]) == "missing_key"
    )
    assert dead_letter_reason(None) == "unknown"
    assert cut_middle("run-0123456789abcdef", 9) == "run-…cdef"


# --- rendering ---------------------------------------------------------------------------

LONG_TOOLS = ["browser.navigate_and_extract_text", "read", "filesystem.search_files_recursively", "exec"]
DETECTORS = list(DETECTOR_SHORT)


def fleet_snapshot(long: bool = True) -> dict:
    """Long names (uuid run ids, long tool, gateway and agent names, long messages), or
    (long=False) the names of a small fleet."""
    s = TopState(start=T0)
    t = T0
    for i in range(12):
        det = DETECTORS[i % len(DETECTORS)]
        action = ("warn", "block", "abort")[i % 3]
        run = f"run-{i:02d}7f3c2a-1b4d-4e8a-9c1d-2f6b8a0e4c{i:02d}" if long else f"sim-1-g{i % 4}-s{i}-r0"
        gw = f"gateway-eu-west-1a-production-{i % 4:02d}" if long else f"gw-{i % 4}"
        agent = "research-assistant-v2" if long else "main"
        tool = LONG_TOOLS[i % 4] if long else ("read", "exec", "ls", "fetch")[i % 4]
        for j in range(5):
            t += 0.2
            s.add(dec(run, j, gw=gw, agent=agent, tool=tool), t)
        s.add(
            dec(
                run,
                9,
                action,
                det,
                gw=gw,
                agent=agent,
                tool=tool,
                count=10 + i,
                paired="write" if det == "ping_pong" else None,
                message="Tool call loop detected: the same call was made 20 times with identical arguments "
                "and no progress; stop retrying and report the failure to the user.",
            ),
            t,
        )
    s.watch_dead_letters()
    s.add_dead_letter("missing_key", t)
    s.set_worker("http://127.0.0.1:6066/metrics", {0: 4, 1: 0}, t)
    return {"topic": "loopwarden.decisions", "watching": True, **s.snapshot(t + 1)}


def rendered(snap: dict, width: int, height: int | None = None) -> list[str]:
    c = Console(record=True, width=width, force_terminal=True, color_system="truecolor", file=io.StringIO())
    c.print(render(snap, width, height))
    return c.export_text().splitlines()


def run_rows(lines: list[str]) -> list[str]:
    i = next(n for n, ln in enumerate(lines) if ln.startswith("looping now:"))
    assert lines[i + 1].split()[:4] == ["action", "detector", "tool", "run"]
    return lines[i + 2 :]


@pytest.mark.parametrize("width", [80, 160])
def test_every_looping_row_shows_action_detector_tool_and_run(width):
    snap = fleet_snapshot()
    runs = snap["looping_runs"]
    assert len(runs) == 12
    lines = rendered(snap, width)
    assert all(len(ln) <= width for ln in lines), max(lines, key=len)
    rows = run_rows(lines)
    assert len(rows) == len(runs)
    for r, row in zip(runs, rows, strict=True):
        cells = row.split()
        assert cells[0] == r["action"]
        assert cells[1] in (r["detector"], DETECTOR_SHORT[r["detector"]])
        tool, run = cells[2], cells[3]
        whole_tool = r["tool_name"] + (f"/{r['paired_tool_name']}" if r["paired_tool_name"] else "")
        if tool.endswith("…"):  # cut at its end: at least 8 characters of it are there
            assert len(tool) >= 9 and whole_tool.startswith(tool[:-1])
        else:
            assert tool == whole_tool
        if "…" in run:  # cut in the middle: both ends are there
            head, tail = run.split("…")
            assert r["run_id"].startswith(head) and r["run_id"].endswith(tail) and len(head) >= 5 and len(tail) >= 5
        else:
            assert run == r["run_id"]
        assert str(r["count"]) in cells  # the count fits at both widths


@pytest.mark.parametrize("long", [True, False])
def test_at_160_columns_the_rows_are_whole(long):
    snap = fleet_snapshot(long)
    lines = rendered(snap, 160)
    rows = run_rows(lines)
    for r, row in zip(snap["looping_runs"], rows, strict=False):
        tool = r["tool_name"] + (f"/{r['paired_tool_name']}" if r["paired_tool_name"] else "")
        for whole in (r["action"], r["detector"], tool, r["run_id"]):
            assert whole in row
        if long:  # the message yields to the required columns
            assert "message" not in lines[lines.index(rows[0]) - 1]
        else:  # everything is whole, and the message takes the rest of the width
            assert f" {r['gateway_id']} {r['agent_id']} Tool call loop detected" in " ".join(row.split())
            assert len(row) == 160 and row.endswith("…")


def test_at_80_columns_the_least_important_columns_go_first():
    lines = rendered(fleet_snapshot(), 80)
    head = next(lines[n + 1] for n, ln in enumerate(lines) if ln.startswith("looping now:")).split()
    assert head[:4] == ["action", "detector", "tool", "run"]
    assert "message" not in head and "agent" not in head


@pytest.mark.parametrize("width", [50, 60, 70, 80, 100, 120, 160, 200])
def test_columns_fit_at_any_width(width):
    snap = fleet_snapshot()
    cols = run_columns(
        [
            {k: str(v) for k, v in r.items()}
            | {
                "tool": r["tool_name"],
                "run": r["run_id"],
                "gateway": r["gateway_id"],
                "agent": r["agent_id"],
                "age": "1s",
            }
            for r in snap["looping_runs"]
        ],
        width,
    )
    keys = [c.key for c, _ in cols]
    assert keys[:4] == ["action", "detector", "tool", "run"]
    assert sum(w for _, w in cols) + len(cols) - 1 <= width
    assert all(w >= 4 for c, w in cols if c.keep == 0) and all(w >= 1 for _, w in cols)
    lines = rendered(snap, width)
    assert all(len(ln) <= width for ln in lines)


def test_dropping_order_is_message_agent_gateway():
    rows = [
        {
            "action": "block",
            "detector": "generic_repeat",
            "tool": "read_file",
            "run": "run-123456",
            "count": "20",
            "age": "1s",
            "gateway": "gateway-01",
            "agent": "agent-0001",
            "message": "m" * 40,
        }
    ]

    def keys(w):
        return [c.key for c, _ in run_columns(rows, w)]

    assert "message" in keys(120)
    widths = range(40, 121)
    first_with = {k: next(w for w in widths if k in keys(w)) for k in ("count", "gateway", "agent", "message")}
    assert first_with["count"] <= first_with["gateway"] <= first_with["agent"] <= first_with["message"]


def test_the_view_fits_a_24_line_terminal_and_says_how_many_runs_are_not_shown():
    snap = fleet_snapshot()
    lines = rendered(snap, 80, 24)
    assert len(lines) <= 24
    assert any("not shown" in ln for ln in lines)


def test_the_header_lines_and_sections():
    snap = fleet_snapshot()
    text = "\n".join(rendered(snap, 80))
    assert "loopwarden top  loopwarden.decisions" in text
    assert "decisions/s" in text and "block" in text and "abort" in text
    assert "warn/min" in text and "blocks/min" in text and "calls/s" in text
    assert "lag 4 (1/1 workers reachable)" in text
    assert "dead letters" in text and "missing_key 1" in text
    empty = "\n".join(rendered({"topic": "p.decisions", "watching": False, **TopState(start=T0).snapshot(T0)}, 80))
    assert "waiting for p.decisions" in empty and "looping now: 0 runs" in empty


def test_plain_line():
    line = plain_line(fleet_snapshot())
    assert "decisions 72, per s" in line and "looping 12" in line and "latest:" in line


def test_every_detector_has_a_short_label():
    """A detector added to the registry gets a label in `top` too (its name would fit
    worse); a label for a name no detector has is a leftover."""
    assert set(DETECTOR_SHORT) == set(NAMES) | set(POLICY_NAMES)


def test_shadow_decisions_are_counted_apart_from_enforced_ones():
    import msgspec

    s = TopState(start=T0)
    s.add(dec("enf", 1, "block", "generic_repeat"), T0 + 1)
    shadow = msgspec.structs.replace(
        dec("sh", 1, "allow", "generic_repeat", level="critical"), enforced=False, shadow_action="block"
    )
    s.add(shadow, T0 + 2)
    s.add(msgspec.structs.replace(dec("sh", 2), enforced=False, shadow_action="allow"), T0 + 3)
    snap = s.snapshot(T0 + 10)
    assert snap["actions"]["block"] == 1 and snap["actions"]["allow"] == 2  # what was published
    assert snap["shadow"]["decisions"] == 2
    assert snap["shadow"]["would_have"] == {"allow": 1, "warn": 0, "block": 1, "abort": 0}
    assert snap["shadow"]["by_detector"] == {"generic_repeat": 1}
    assert [r["run_id"] for r in snap["looping_runs"]] == ["enf"]  # a shadow run is not looping on the gateway
    text = "\n".join(rendered(snap, 120))
    assert "shadow (not enforced): 2 decisions" in text and "blocked 1" in text


def test_runs_closest_to_their_budget_come_first():
    import msgspec

    s = TopState(start=T0)

    def budget(run: str, seq: int, action: str, count: int, key: str) -> Decision:
        return msgspec.structs.replace(dec(run, seq, action, "run_budget", count=count), warning_key=key)

    s.add(budget("a", 1, "warn", 81, "budget:tokens:80"), T0 + 1)
    s.add(budget("b", 1, "warn", 96, "budget:cost:95"), T0 + 2)
    s.add(budget("c", 1, "abort", 7, "budget:calls"), T0 + 3)
    s.add(dec("c", 2, "abort", "run_budget"), T0 + 4)  # a call after the abort: no key, the row stays
    rows = s.snapshot(T0 + 5)["budget_runs"]
    assert [(r["run_id"], r["percent"], r["kind"], r["stopped"]) for r in rows] == [
        ("c", 100, "calls", True),
        ("b", 96, "cost", False),
        ("a", 81, "tokens", False),
    ]
    assert "closest to budget: c stopped calls, b 96% cost, a 81% tokens" in "\n".join(
        rendered(s.snapshot(T0 + 5), 200)
    )


def test_open_breakers_and_stop_orders_from_the_fleet_topic():
    s = TopState(start=T0)
    assert s.snapshot(T0)["fleet"] is None  # not read: unknown, not none
    ledger = s.watch_fleet()
    ms = int(T0 * 1000)
    b = Breaker(
        id="t:o:1",
        tool_name="http_get",
        outcome="o",
        from_ts=ms - 10,
        until_ts=ms + 60_000,
        runs=20,
        gateways=4,
        window_ms=1,
    )
    old = Breaker(
        id="t:o:0", tool_name="old", outcome="o", from_ts=ms - 99, until_ts=ms - 50, runs=20, gateways=4, window_ms=1
    )
    order = StopOrder(id="s1", agent_id="batch", from_ts=ms - 5, until_ts=None, reason="runaway spend")
    ended = StopOrder(id="s0", run_id="r", from_ts=ms - 9, until_ts=ms - 1, reason="x")
    for rec in (b, old, order, ended):
        ledger.add(rec.id.encode(), encode_fleet_record(rec), (), "test")
    ledger.add(b"bad", b"{", (), "test")
    fleet = s.snapshot(T0)["fleet"]
    assert [x["id"] for x in fleet["open_breakers"]] == ["t:o:1"]
    assert [(o["id"], o["target"], o["pending"]) for o in fleet["stop_orders"]] == [("s1", "agent batch", False)]
    assert fleet["skipped"] == 1
    text = "\n".join(rendered(s.snapshot(T0), 200))
    assert "breaker open: http_get until" in text and "stop order s1: agent batch in force: runaway spend" in text


def spend_snapshot(paused: int = 1, near: int = 3, long: bool = False) -> dict:
    """A fleet snapshot (`fleet_snapshot`) whose spend stage's tables hold keys near their
    cap, `paused` of them reached and pausing, read as top reads them."""
    from detectors.fleet import SpendCapSignal
    from detectors.spend import SpendCount, SpendState, encode_spend_state

    s = TopState(start=T0)
    snap_at = T0 + 1
    hour = 3_600_000
    start = int(T0 * 1000) // hour * hour
    board, ledger = s.policy.watch_spend(), s.watch_fleet()
    cap = "agent-hourly-cost-and-calls-ceiling" if long else "hourly"
    for i in range(paused + near):
        key = f"research-assistant-{i}-production-eu-west" if long else f"agent-{i}"
        reached = i < paused
        sig = f"{cap}:{key}:{start}" if reached else None
        calls = 120 + i if reached else 90 - 10 * i
        st = SpendState(cap, key, start, hour, (None, None, 100), SpendCount(0, 0, calls, reached), signal=sig)
        board.add(key.encode(), encode_spend_state(st), int(snap_at * 1000))
        if reached:
            rec = SpendCapSignal(
                id=sig, cap=cap, key=key, window_start=start, window_end=start + hour, from_ts=start + 1,
                until_ts=start + hour, unit="calls", used=100, ceiling=100,
            )  # fmt: skip
            ledger.add(rec.id.encode(), encode_fleet_record(rec), (), "test")
    base = fleet_snapshot()
    spend = s.snapshot(snap_at)
    return base | {"spend_caps": spend["spend_caps"], "fleet": spend["fleet"]}


def test_the_keys_nearest_their_spend_cap_reached_first():
    assert TopState(start=T0).snapshot(T0)["spend_caps"] is None  # no table read: unknown, not none
    snap = spend_snapshot(paused=2, near=3)
    rows = snap["spend_caps"]
    assert [(r["key"], r["reached"], r["paused"], r["percent"]) for r in rows] == [
        ("agent-1", True, True, 121.0),
        ("agent-0", True, True, 120.0),
        ("agent-2", False, False, 70.0),
        ("agent-3", False, False, 60.0),
        ("agent-4", False, False, 50.0),
    ]
    assert rows[0]["signal"].startswith("hourly:agent-1:") and rows[0]["time_left_s"] > 0
    text = "\n".join(rendered(snap, 200))
    assert "spend cap reached, paused: hourly agent-1 (121% calls) until " in text
    assert "nearest to spend cap: hourly agent-2 70% calls, hourly agent-3 60% calls, hourly agent-4 50% calls" in text
    assert "spend caps reached: hourly:agent-1:" in plain_line(snap)


@pytest.mark.parametrize("width", [50, 80, 160])
def test_spend_caps_take_two_lines_at_most_and_the_view_still_fits(width):
    snap = spend_snapshot(paused=4, near=6, long=True)
    lines = rendered(snap, width, 24)
    assert len(lines) <= 24 and all(len(ln) <= width for ln in lines)
    assert sum(ln.startswith(("spend cap reached", "nearest to spend cap")) for ln in lines) == 2
    assert any("not shown" in ln for ln in lines)
