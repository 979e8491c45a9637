"""`loopwarden spend`, `stop --lift` of a spend cap, `stop --list`, and the spend alerts'
Slack text, without a broker: the rows made from the spend stage's states and the fleet
topic's signals (sorting, percent, time left, lifted), the board of the latest states,
the report and its text, the lift's record and alert, the command line.
(tests/integration/test_spend_ops.py runs them on a real broker and worker.)"""

from __future__ import annotations

import json

import msgspec
import pytest

from detectors import DetectionConfig
from detectors.fleet import SpendCapSignal, StopOrder, encode_fleet_record
from detectors.spend import SpendCount, SpendState, encode_spend_state
from streams import cli
from streams.admin import alerts, fleet_topic
from streams.admin.fleet_topic import FleetLedger
from streams.admin.spend import (
    READ_BEFORE_MS,
    SpendBoard,
    SpendRead,
    duration,
    read_from,
    report,
    spend_rows,
    spend_signals,
    table_topic,
    tables_among,
    text_lines,
)
from streams.kafka.errors import SettingsError
from streams.kafka.settings import build

HOUR = 3_600_000
W0 = 1_780_002_000_000  # a whole hour since the epoch
NOW = W0 + 20 * 60_000  # 20 minutes into that hour's window


def state(cap: str, key: str, calls: int = 0, cost: int = 0, tokens: int = 0, **kw) -> SpendState:
    ceilings = kw.pop("ceilings", (None, None, 10))
    start = kw.pop("start", W0)
    signal = kw.pop("signal", None)
    count = SpendCount(tokens, cost, calls, signal is not None)
    return SpendState(cap, key, start, kw.pop("window_ms", HOUR), ceilings, count, signal=signal, **kw)


def signal(cap: str, key: str, used: int = 10, ceiling: int = 10, **kw) -> SpendCapSignal:
    start = kw.pop("start", W0)
    fields = {"from_ts": start + 60_000, "until_ts": start + HOUR, "unit": "calls"} | kw
    return SpendCapSignal(
        id=f"{cap}:{key}:{start}", cap=cap, key=key, window_start=start, window_end=start + HOUR,
        used=used, ceiling=ceiling, **fields,
    )  # fmt: skip


def caps(*entries: dict) -> DetectionConfig:
    return DetectionConfig({"loopwarden": {"fleet": {"spendCaps": list(entries)}}})


# -- the rows -----------------------------------------------------------------------------------


def test_reached_keys_come_first_then_the_fullest_with_percent_and_time_left():
    reached = signal("calls", "bob", used=10, ceiling=10)
    lifted = signal("calls", "dan", used=10, ceiling=10, until_ts=NOW - 1000)
    states = [
        state("calls", "alice", calls=7),
        state("calls", "bob", calls=12, signal=reached.id),
        state("calls", "carol", calls=3),
        state("calls", "dan", calls=10, signal=lifted.id),
    ]
    rows = spend_rows(states, [reached, lifted], NOW)
    assert [(r["key"], r["reached"], r["paused"], r["lifted"]) for r in rows] == [
        ("bob", True, True, False),
        ("dan", True, False, True),  # lifted: reached, but no longer pausing
        ("alice", False, False, False),
        ("carol", False, False, False),
    ]
    bob = rows[0]
    assert bob["kinds"] == [{"unit": "calls", "used": 12, "ceiling": 10, "percent": 120.0}]
    assert (bob["percent"], bob["unit"], bob["signal"], bob["reached_at"]) == (120.0, "calls", reached.id, W0 + 60_000)
    assert bob["paused_until"] == W0 + HOUR and bob["time_left_s"] == 40 * 60.0
    assert (rows[1]["lifted_at"], rows[1]["paused_until"]) == (NOW - 1000, NOW - 1000)
    assert rows[2]["percent"] == 70.0 and rows[2]["signal"] is None and rows[2]["reached_at"] is None


def test_every_kind_with_a_ceiling_is_shown_and_the_fullest_orders_the_row():
    st = state("mix", "", tokens=500, cost=1_500_000, calls=1, ceilings=(1000, 2_000_000, None))
    (row,) = spend_rows([st], [], NOW)
    assert row["kinds"] == [
        {"unit": "tokens", "used": 500, "ceiling": 1000, "percent": 50.0},
        {"unit": "cost", "used": 1_500_000, "ceiling": 2_000_000, "percent": 75.0},
    ]
    assert (row["percent"], row["unit"], row["reached"]) == (75.0, "cost", False)


def test_only_the_windows_holding_now_and_with_caps_only_theirs_with_their_per():
    old = state("calls", "alice", calls=9, start=W0 - HOUR)  # last hour's window
    future = state("calls", "alice", calls=1, start=W0 + HOUR)  # a gateway clock ahead
    other = state("gone", "alice", calls=9)  # a cap the config no longer has
    now_state = state("calls", "alice", calls=2)
    assert [r["window_start"] for r in spend_rows([old, future, now_state, other], [], NOW)] == [W0, W0]
    cfg = caps({"id": "calls", "toolCalls": 10})
    rows = spend_rows([old, future, now_state, other], [], NOW, cfg.spend_caps)
    assert [(r["cap"], r["per"], r["key"]) for r in rows] == [("calls", "agent", "alice")]


def test_a_signal_whose_key_has_no_state_is_a_row_of_its_own():
    # the table's state was not read (an expired changelog, a stage elsewhere): the fleet
    # topic's record still says the key is paused, with what it used when reached
    s = signal("calls", "eve", used=10, ceiling=10)
    (row,) = spend_rows([], [s], NOW)
    assert (row["key"], row["reached"], row["paused"], row["signal"]) == ("eve", True, True, s.id)
    assert row["kinds"] == [{"unit": "calls", "used": 10, "ceiling": 10, "percent": 100.0}]
    assert spend_rows([], [signal("calls", "eve", start=W0 - HOUR)], NOW) == []  # an ended window


def test_a_fleet_view_gives_each_signal_with_its_earliest_end():
    s = signal("calls", "bob")
    ledger = FleetLedger()
    lift = msgspec.structs.replace(s, until_ts=NOW - 5)
    for rec in (s, lift, s):  # published again by the stage after the lift: the lift stands
        ledger.add(rec.id.encode(), encode_fleet_record(rec), (), "test")
    assert [x.until_ts for x in spend_signals(ledger.view)] == [NOW - 5]


# -- the board of the latest states ---------------------------------------------------------------


def test_the_board_keeps_each_keys_latest_state_and_forgets_ended_windows_and_tombstones():
    b = SpendBoard()
    k1, k2, k3 = b'["calls:a",[1,2]]', b'["calls:b",[1,2]]', b'["calls:c",[1,2]]'
    b.add(k1, encode_spend_state(state("calls", "a", calls=1)), NOW)
    b.add(k1, encode_spend_state(state("calls", "a", calls=4)), NOW)
    b.add(k2, encode_spend_state(state("calls", "b", calls=2)), NOW)
    b.add(k2, None, NOW)  # a tombstone
    b.add(k3, encode_spend_state(state("calls", "c", calls=2, start=W0 - HOUR)), NOW)  # ended
    b.add(b"junk", b"\xc1not msgpack", NOW)
    assert [(s.key, s.count.calls) for s in b.states(NOW)] == [("a", 4)]
    assert b.skipped == 1
    assert b.states(W0 + HOUR) == []  # the window ended meanwhile


def test_a_bounded_board_keeps_the_keys_nearest_their_cap_exactly():
    # a key's count only grows within a window, so keeping the nearest so far keeps the
    # nearest at the end, whatever order the states come in
    b = SpendBoard(limit=3)
    final = {f"k{i}": (i * 7) % 11 for i in range(40)}
    for step in range(1, 12):
        for k, calls in final.items():
            if calls >= step:
                b.add(k.encode(), encode_spend_state(state("calls", k, calls=step)), NOW)
    b.add(b"k99", encode_spend_state(state("calls", "k99", calls=1, signal="calls:k99:1")), NOW)  # reached
    kept = sorted(((s.signal is not None, s.count.calls), s.key) for s in b.states(NOW))
    assert len(kept) == 3 and kept[-1][1] == "k99"
    assert [c for (_, c), _ in kept[:2]] == [10, 10]


# -- the tables, the report, the text ----------------------------------------------------------------


def test_the_tables_are_the_spend_stages_changelogs_of_these_topics():
    s = build({"topic_prefix": "prod."}, env={})
    assert table_topic(s, 60_000) == "prod.worker-spend-60000-changelog"
    names = [
        "prod.worker-spend-60000-changelog",
        "prod.worker-spend-3600000-changelog",
        "prod.worker-spend-anomaly-changelog",  # the anomaly watch's: not a cap's
        "prod.worker-runs-changelog",
        "staging.worker-spend-60000-changelog",  # another prefix
        "prod.worker-spend-0-changelog",
    ]
    assert tables_among(names, s) == {60_000: names[0], 3_600_000: names[1]}
    assert read_from(HOUR, NOW) == W0 - READ_BEFORE_MS


def test_the_report_names_each_cap_and_says_when_there_are_no_caps_or_no_table():
    cfg = caps({"id": "calls", "toolCalls": 10}, {"id": "daily", "per": "all", "windowMs": 86_400_000, "costUsd": 5})
    read = SpendRead(tables={HOUR: "p.worker-spend-3600000-changelog", 86_400_000: None})
    for k, n in (("alice", 7), ("bob", 10)):
        read.board.add(k.encode(), encode_spend_state(state("calls", k, calls=n)), NOW)
    rep = report(cfg.spend_caps, read, NOW, "cfg.json5", limit=1)
    assert [(c["id"], c["keys"], c["table"]) for c in rep["caps"]] == [
        ("calls", 2, "p.worker-spend-3600000-changelog"),
        ("daily", 0, None),
    ]
    assert rep["caps"][1]["ceilings"] == {"tokens": None, "cost": 5_000_000, "calls": None}
    assert [r["key"] for r in rep["rows"]] == ["bob"] and rep["not_shown"] == 1
    assert len(rep["notes"]) == 1 and "no spend stage table for 86400000 ms windows (daily)" in rep["notes"][0]
    none = report((), SpendRead(), NOW, None)
    assert none["caps"] == [] and "no spend caps in the config" in none["notes"][0]
    text = "\n".join(text_lines(rep))
    assert "calls: per agent, 10 calls per 1h window (ends in 40m); 2 key(s) counted, 0 reached" in text
    assert "daily: per all, $5.00 per 24h window" in text
    assert "bob" in text and "10 of 10 calls" in text and "100.0%" in text
    assert "1 more key(s) not shown" in text


def test_a_reached_rows_text_says_paused_until_or_lifted():
    rs = signal("calls", "bob")
    read = SpendRead(tables={HOUR: "t"})
    read.board.add(b"b", encode_spend_state(state("calls", "bob", calls=10, signal=rs.id)), NOW)
    read.fleet.add(rs.id.encode(), encode_fleet_record(rs), (), "test")
    cfg = caps({"id": "calls", "toolCalls": 10})
    assert f"REACHED, paused until 2026-05-28T22:00:00Z [{rs.id}]" in "\n".join(
        text_lines(report(cfg.spend_caps, read, NOW, "c"))
    )
    lift = msgspec.structs.replace(rs, until_ts=NOW)
    read.fleet.add(rs.id.encode(), encode_fleet_record(lift), (), "test")
    assert f"reached, lifted at 2026-05-28T21:20:00Z [{rs.id}]" in "\n".join(
        text_lines(report(cfg.spend_caps, read, NOW + 1, "c"))
    )
    assert [duration(s) for s in (45, 125, 720, 3600, 11100)] == ["45s", "2m05s", "12m", "1h", "3h05m"]


# -- lifting a spend cap, and listing it ---------------------------------------------------------------


def test_a_lift_republishes_the_record_with_until_ts_now():
    s = signal("calls", "bob")
    lift = fleet_topic.lift_spend_cap(s, NOW)
    assert lift == msgspec.structs.replace(s, until_ts=NOW) and not lift.in_force(NOW) and lift.in_force(NOW - 1)
    with pytest.raises(SettingsError, match="window ended at 2026-05-28T22:00:00Z"):
        fleet_topic.lift_spend_cap(s, W0 + HOUR)
    with pytest.raises(SettingsError, match="lifted already, at 2026-05-28T21:20:00Z"):
        fleet_topic.lift_spend_cap(lift, NOW + 5)
    alert = fleet_topic.spend_lift_alert(lift, NOW, "oncall")
    assert (alert["kind"], alert["ts"], alert["subject"], alert["until_ts"], alert["issued_by"]) == (
        "spend_cap_lifted",
        NOW,
        s.id,
        NOW,
        "oncall",
    )
    assert alert["summary"].startswith("spend cap calls lifted for bob by oncall: its calls run again")
    assert {k: alert[k] for k in ("cap", "key", "window_start", "window_end", "unit", "used", "ceiling")} == {
        "cap": "calls",
        "key": "bob",
        "window_start": W0,
        "window_end": W0 + HOUR,
        "unit": "calls",
        "used": 10,
        "ceiling": 10,
    }


def test_stop_list_shows_spend_caps_with_their_state_as_the_view_applies_them():
    ledger = FleetLedger()
    reached, old = signal("calls", "bob"), signal("calls", "old", start=W0 - HOUR)
    lifted = signal("calls", "dan")
    order = StopOrder(id="stop-1", agent_id="batch", from_ts=NOW - 9, reason="runaway")
    for rec in (reached, old, lifted, msgspec.structs.replace(lifted, until_ts=NOW - 1), lifted, order):
        ledger.add(rec.id.encode(), encode_fleet_record(rec), (), "test")
    rows = fleet_topic.listing(ledger, NOW)
    assert [(r["id"], r["state"], r.get("lifted")) for r in rows] == [
        (reached.id, "in force", False),
        (old.id, "ended", False),
        (lifted.id, "lifted", True),  # republished after the lift: still lifted
        ("stop-1", "in force", None),
    ]
    lines = [fleet_topic.list_line(r) for r in rows]
    ends = "window ends 2026-05-28T22:00:00Z"
    assert lines[0] == f"spend_cap {reached.id}  cap=calls key=bob  in force  10 of 10 calls, {ends}"
    assert lines[3] == "stop      stop-1  agent_id=batch  in force  runaway"


# -- the alerts' Slack text ------------------------------------------------------------------------------


def test_the_spend_alerts_slack_text_is_said_from_their_fields():
    s = signal("hourly", "alice", used=21_000_000, ceiling=20_000_000, unit="cost")
    reached = {"kind": "spend_cap_reached", "ts": s.from_ts, "subject": s.id, "summary": "x"}
    reached |= {k: getattr(s, k) for k in ("cap", "key", "window_start", "window_end", "unit", "used", "ceiling")}
    reached |= {"from_ts": s.from_ts, "until_ts": s.until_ts}
    text = json.loads(alerts.body(reached, "slack"))["text"]
    assert text == (
        ":double_vertical_bar: *spend_cap_reached* spend cap hourly for alice reached ($21.00 of $20.00): its calls "
        f"are paused until 2026-05-28T22:00:00Z, the window's end. Lift it: `loopwarden stop --lift {s.id}`"
    )
    warning = {"kind": "spend_cap_warning", "subject": s.id, "summary": "x", "cap": "hourly", "key": ""}
    warning |= {"unit": "calls", "used": 80, "ceiling": 100, "percent": 80, "mark": 80}
    assert alerts.slack_text(warning) == (
        ":money_with_wings: *spend_cap_warning* spend cap hourly for all: 80% of its calls ceiling used "
        "(80 of 100 calls) in this window"
    )
    lifted = fleet_topic.spend_lift_alert(fleet_topic.lift_spend_cap(s, NOW), NOW, None)
    assert alerts.slack_text(lifted) == (
        ":arrow_forward: *spend_cap_lifted* spend cap hourly for alice lifted: its calls run again "
        "($21.00 of $20.00 in the window ending 2026-05-28T22:00:00Z)"
    )
    anomaly = {"kind": "spend_anomaly", "subject": "anomaly:a:1", "summary": "x", "agent_id": "a", "unit": "cost"}
    anomaly |= {"used": 9_000_000, "median": 1_000_000.0, "factor": 3.0, "windows": 24, "window_start": 1}
    assert alerts.slack_text(anomaly) == (
        ":chart_with_upwards_trend: *spend_anomaly* agent a spent $9.00 in this window, above 3 times the median "
        "of its previous 24 windows ($1.00)"
    )
    # an alert whose fields are not as written falls back on its subject and summary
    assert alerts.slack_text(reached | {"used": "lots"}) == f":double_vertical_bar: *spend_cap_reached* {s.id}: x"
    assert alerts.slack_text({"kind": "breaker_opened", "subject": "t", "summary": "s"}).startswith(
        ":rotating_light: *breaker_opened* t: s"
    )


# -- the command line -----------------------------------------------------------------------------------------


def parsed(*argv: str):
    return cli.build_parser().parse_args(list(argv))


def test_the_spend_command_and_stop_lift_on_the_command_line():
    a = parsed("spend", "--config", "c.json5", "--limit", "5", "--json", "--topic-prefix", "p.")
    assert (a.func, a.config, a.limit, a.json, a.topic_prefix) == (cli.cmd_spend, "c.json5", 5, True, "p.")
    a = parsed("spend")
    assert (a.config, a.limit, a.json) == (None, None, False)
    with pytest.raises(SystemExit):
        parsed("spend", "--limit", "0")
    a = parsed("stop", "--lift", "hourly:alice:1780002000000")
    assert (a.func, a.lift, a.list) == (cli.cmd_stop, "hourly:alice:1780002000000", False)
    with pytest.raises(SystemExit):  # a lift names nothing else
        parsed("stop", "--lift", "x", "--agent", "a")
