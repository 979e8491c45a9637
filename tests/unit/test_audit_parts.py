"""The audit's parts, each alone and without a broker: the options, the join, the tally,
what-if and the timelines (streams/audit/). tests/unit/test_audit_core.py tests them
wired together."""

from __future__ import annotations

import argparse
import json
import pickle

import pytest

from detectors import DetectionConfig, Folded, SetAside, decode_event, fold, replay
from detectors.wire import Decision, Usage, decode_decision, encode
from streams.audit.join import Join, Recorded, Verdicts, whole
from streams.audit.options import AuditOptions, Scope, Window
from streams.audit.shadow import Shadow, ShadowCounts, nearest_rank
from streams.audit.tally import Tally
from streams.audit.timelines import Timelines
from streams.audit.whatif import WhatIf, WhatIfCounts, changes
from streams.kafka.compat import Msg
from streams.kafka.errors import SettingsError
from tests.unit.test_audit_core import ON, decided, run_events


def decision(**kw) -> Decision:
    d = decided(run_events(n=1))[0]
    return decode_decision(json.dumps({**d, **kw}))


def rec_msg(d: Decision, t: int, offset: int = 0) -> Msg:
    from detectors import encode

    return Msg(0, offset, t, d.gateway_id.encode(), encode(d))


# -- options ---------------------------------------------------------------------------


def args(**kw) -> argparse.Namespace:
    base = dict(
        start=None,
        end=None,
        lookback="24h",
        grace="5m",
        run=None,
        gateway=None,
        config=None,
        worker_config=None,
        jobs=None,
        json=False,
        diff=None,
        html=None,
    )
    return argparse.Namespace(**{**base, **kw})


def test_options_are_parsed_once_into_milliseconds_and_tuples():
    now = 1_800_000_000.0
    o = AuditOptions.from_args(
        args(start="-2h", end="now", lookback="30m", grace="90s", run=["r1"], gateway=["g"], worker_config=["w.json"]),
        now,
    )
    assert (o.from_ms, o.to_ms) == (int((now - 7200) * 1000), int(now * 1000))
    assert (o.lookback_ms, o.grace_ms, o.scan_start_ms) == (1_800_000, 90_000, o.from_ms - 1_800_000)
    assert (o.runs, o.gateways, o.worker_configs) == (("r1",), ("g",), ("w.json",))
    assert o.window == Window(o.from_ms, o.to_ms, o.scan_start_ms, 90_000)
    assert o.scope() == Scope(frozenset({"r1"}), frozenset({"g"}), None, True)
    with pytest.raises(AttributeError):
        o.grace_ms = 1  # type: ignore[misc]  # frozen


def test_options_without_a_range_read_everything():
    o = AuditOptions.from_args(args(start="beginning"), 0.0)
    assert o.from_ms is o.to_ms is o.scan_start_ms is None
    assert o.window.low < -(10**15) and o.window.high > 10**15


@pytest.mark.parametrize(
    "kw, says",
    [
        (dict(start="-1h", end="-2h"), "is before --from"),
        (dict(start="yesterday"), "--from 'yesterday'"),
        (dict(grace="soon"), "--grace 'soon'"),
    ],
)
def test_bad_options_are_named(kw, says):
    with pytest.raises(SettingsError, match=says):
        AuditOptions.from_args(args(**kw), 1_800_000_000.0)


# -- the join ----------------------------------------------------------------------------


def held(d):
    """What the join keeps of a recorded decision: its shared verdict and a hash of it."""
    return Verdicts().of(d), whole(d)


def settle(j: Join, eid: tuple[str, int], ms: int) -> Recorded | None:
    """The audit's step for a folded event that made a decision: what the join holds for
    it is looked up (as the replay's config is chosen), then settled."""
    rec = j.find(*eid)
    j.settle(rec, eid[0], eid[1], ms, decided=True)
    return rec


def folded(j: Join, eid: tuple[str, int]) -> bool:
    """The join still remembers the event as folded."""
    return eid[1] in j.done.get(eid[0], {})


def test_a_recorded_decision_waits_by_event_id_until_its_event_is_settled():
    d = decision()
    j = Join(grace_ms=1000)
    assert j.offer(rec_msg(d, 5000)) is None
    got = j.find(d.run_id, d.seq)  # looked up, it stays
    assert (got.decision, got.whole) == held(d) and got.eid == (d.run_id, d.seq)
    rec = settle(j, (d.run_id, d.seq), 5001)
    assert rec is got and not j.pending
    assert settle(j, (d.run_id, d.seq), 5001) is None  # taken once


def test_the_join_keeps_a_shared_verdict_and_a_hash_not_the_decision():
    j = Join(grace_ms=1000)
    a, b = decision(seq=0, event_id="r:0"), decision(seq=1, event_id="r:1")
    warned = decision(seq=2, event_id="r:2", action="warn", level="warning", detector="generic_repeat", count=10)
    for i, d in enumerate((a, b, warned)):
        j.offer(rec_msg(d, 5000 + i))
    ra, rb, rw = (j.find("r", s) for s in (0, 1, 2))
    assert ra.decision is rb.decision  # two allows under one config: one verdict object
    assert rw.decision is not ra.decision and rw.decision.detector == "generic_repeat"
    assert ra.whole != rb.whole  # the whole decisions differ (their seq and event_id)
    # The hash is the canonical encoding's: a decision decoded from other bytes hashes alike.
    assert whole(decode_decision(json.dumps(json.loads(encode(a)), indent=1))) == ra.whole


def test_the_fingerprint_tells_decisions_apart_by_any_field_not_by_their_bytes():
    import msgspec

    d = decision(action="warn", level="warning", detector="generic_repeat", count=10, message="m")
    base = whole(d)
    # Another value in any one field, of the field's type, is another fingerprint.
    other = {
        "run_id": "q",
        "seq": d.seq + 1,
        "gateway_id": "gw2",
        "agent_id": "a",
        "tool_call_id": "c2",
        "tool_name": None,
        "ts": d.ts + 1,
        "event_id": "q:0",
        "action": "block",
        "level": "critical",
        "detector": None,
        "count": 11,
        "message": None,
        "warning_key": "k",
        "paired_tool_name": "p",
        "args_hash": None,
        "config_hash": "c" * 64,
        "fleet_signal": "breaker:x",
        "enforced": False,
        "shadow_action": "block",
        "degraded": True,
    }
    assert set(other) == set(Decision.__struct_fields__)
    for name, value in other.items():
        assert whole(msgspec.structs.replace(d, **{name: value})) != base, name
    # Integers whose hashes collide are told apart: hash(-1) == hash(-2), and an int's
    # hash wraps at 2**61 - 1; None against the int that is its hash.
    assert hash(msgspec.structs.replace(d, ts=-1)) == hash(msgspec.structs.replace(d, ts=-2))
    assert whole(msgspec.structs.replace(d, ts=-1)) != whole(msgspec.structs.replace(d, ts=-2))
    wrap = (1 << 61) - 1
    assert whole(msgspec.structs.replace(d, count=1)) != whole(msgspec.structs.replace(d, count=1 + wrap))
    assert whole(msgspec.structs.replace(d, count=None)) != whole(msgspec.structs.replace(d, count=hash(None)))
    assert whole(msgspec.structs.replace(d, ts=-1)) == whole(msgspec.structs.replace(d, ts=-1))
    # The same decision written otherwise is the same: other spacing and key order, or
    # an older worker's, without the fields added since (read with their defaults).
    raw = json.loads(encode(d))
    assert whole(decode_decision(json.dumps(dict(reversed(raw.items())), indent=2))) == base
    older = {k: v for k, v in raw.items() if k not in ("fleet_signal", "enforced", "shadow_action")}
    assert whole(decode_decision(json.dumps(older))) == base


def test_a_fold_that_does_not_encode_decides_as_one_that_does():
    from streams.tools.trace import CONFIG, generate

    lines = generate(3000)
    lines[10:10] = [b"{", b"", b'{"type": "tool_call"}', json.dumps({"type": "nope", "run_id": "x"}).encode()]
    config = DetectionConfig(CONFIG)

    def results(encode: bool) -> list:
        source = ((i, None, line) for i, line in enumerate(lines))
        return list(fold(source, config, keyed=False, encode=encode))

    written, compared = results(True), results(False)
    assert len(written) == len(compared) == len(lines)
    decided = 0
    for a, b in zip(written, compared, strict=True):
        assert type(a) is type(b) and a.position == b.position
        if type(a) is Folded:
            assert a.decisions == b.decisions and b.encoded == []
            assert a.encoded == [encode(x) for x in a.decisions]
            decided += len(a.decisions)
        else:
            assert a.error.reason == b.error.reason
    assert decided > 1000 and sum(type(a) is SetAside for a in written) == 4


def test_a_second_record_is_a_duplicate_a_conflict_or_late():
    d = decision()
    j = Join(grace_ms=1000)
    j.offer(rec_msg(d, 5000))
    j.offer(rec_msg(d, 5001, 1))
    assert j.counts["duplicates"] == 1
    other = decision(action="block", level="critical", detector="generic_repeat", count=9)
    assert j.offer(rec_msg(other, 5002, 2)) is None  # not counted yet: a conflict, found when settled
    rec = settle(j, (d.run_id, d.seq), 5003)
    assert rec.conflict
    # Settled and counted, then recorded with another verdict: handed back to be counted again.
    d2 = decision(seq=2, event_id="r:2")
    j.offer(rec_msg(d2, 6000))
    counted = settle(j, ("r", 2), 6001)
    again = j.offer(rec_msg(decision(seq=2, event_id="r:2", action="warn"), 6002))
    assert again is counted and again.conflict
    # An event folded with nothing recorded, its decision recorded after: late.
    settle(j, ("r", 4), 6003)
    assert j.offer(rec_msg(decision(seq=4, event_id="r:4"), 6004)) is None
    assert j.counts["late"] == 1 and j.find("r", 4) is None


def test_decisions_expire_a_grace_period_after_the_horizon_and_the_rest_at_the_end():
    j = Join(grace_ms=1000)
    a, b = decision(seq=0, event_id="r:0"), decision(seq=2, event_id="r:2")
    j.offer(rec_msg(a, 1000))
    j.offer(rec_msg(b, 3000))
    assert j.expire(1900) == []
    assert [r.eid for r in j.expire(2001)] == [("r", 0)]
    assert [r.eid for r in j.finish()] == [("r", 2)] and not j.pending
    # Folded ids are forgotten a second grace period later: a record then is new again.
    settle(j, ("r", 6), 10_000)
    j.expire(11_500)
    assert folded(j, ("r", 6))
    j.expire(12_001)
    assert not folded(j, ("r", 6)) and not j.done


def test_a_settled_decision_expires_by_its_events_time_and_does_not_hold_up_an_older_one():
    j = Join(grace_ms=1000)
    first, second = decision(seq=0, event_id="r:0"), decision(seq=2, event_id="r:2")
    j.offer(rec_msg(first, 1000))
    j.offer(rec_msg(second, 1500))
    rec = settle(j, ("r", 0), 9000)  # its event came late: its time is now 9000
    assert rec.time == 9000
    # The settled one, first in order, does not keep the waiting one from expiring.
    assert [r.eid for r in j.expire(2600)] == [("r", 2)]
    j.expire(10_900)
    assert folded(j, ("r", 0))  # kept a second grace period after its event's time
    j.expire(11_001)
    assert not folded(j, ("r", 0)) and not j.done


def test_the_decisions_of_a_run_are_held_together_and_share_its_id():
    j = Join(grace_ms=1000)
    for s in range(3):
        j.offer(rec_msg(decision(seq=s, event_id=f"r:{s}"), 5000 + s))
    j.offer(rec_msg(decision(run_id="q", seq=0, event_id="q:0"), 5003))
    assert sorted(j.pending) == ["q", "r"] and sorted(j.pending["r"]) == [0, 1, 2]
    (key,) = (k for k in j.pending if k == "r")
    assert {id(rec.run_id) for rec in j.pending["r"].values()} == {id(key)}  # one string for the run
    settle(j, ("q", 0), 5004)
    assert sorted(j.pending) == ["r"]  # a run with nothing left waiting leaves the table


def test_the_join_keeps_only_its_scope_and_the_first_shard_counts_unreadable_records():
    d = decision()
    for scope, kept in (
        (Scope(gateways=frozenset({"other"})), False),
        (Scope(runs=frozenset({"other"})), False),
        (Scope(owns=lambda run_id: run_id != d.run_id), False),
        (Scope(gateways=frozenset({d.gateway_id}), runs=frozenset({d.run_id})), True),
    ):
        j = Join(1000, scope)
        j.offer(rec_msg(d, 0))
        assert bool(j.pending) is kept, scope
    bad = Msg(0, 0, 0, b"gw", b"{not json")
    first, second = Join(1000), Join(1000, Scope(first=False))
    first.offer(bad)
    second.offer(bad)
    assert (first.counts["unreadable_decisions"], second.counts["unreadable_decisions"]) == (1, 0)


# -- the tally ---------------------------------------------------------------------------


def test_the_tally_counts_each_pair_by_what_it_came_to():
    t = Tally()
    d = decision()
    block = decision(action="block", level="critical", detector="generic_repeat", count=5)
    t.add(["matched", "mismatched"], [d, block])
    t.flagged(block, 61_000)
    t.add(["missing", "unexpected", "conflicting"], [block, d])
    t.flagged(block, 120_000)
    t.recount_as_conflict("matched")
    assert (t.c["matched"], t.c["conflicting"], t.c["decisions_recorded"]) == (0, 2, 4)
    assert t.by(2) == {"allow": 2, "warn": 0, "block": 2, "abort": 0}
    assert t.by(1) == {"read": {"allow": 2, "warn": 0, "block": 2, "abort": 0}}
    assert dict(t.by_detector) == {"generic_repeat": 2}
    assert {k: dict(v) for k, v in t.per_minute.items()} == {1: {"block": 1}, 2: {"block": 1}}
    assert not t.clean()


def test_tallies_add_up_and_travel_between_processes():
    a, b = Tally(), Tally()
    d = decision()
    a.add(["matched"], [d])
    a.run_ids.add("r1")
    b.add(["missing"], [d])
    b.run_ids.add("r2")
    b.misrouted = 1
    b = pickle.loads(pickle.dumps(b))
    a.merge(b)
    assert (a.c["matched"], a.c["missing"], a.misrouted, a.run_ids) == (1, 1, 1, {"r1", "r2"})
    assert a.by(2)["allow"] == 2


# -- what-if -------------------------------------------------------------------------------


def test_changes_name_every_way_a_verdict_moves():
    assert changes("allow", "allow") == []
    assert changes("allow", "warn") == ["newly_warned"]
    assert changes("warn", "block") == ["newly_blocked", "no_longer_warned"]
    assert changes("block", "abort") == ["no_longer_blocked", "aborts_gained"]
    assert changes("abort", None) == ["aborts_lost"]


def test_the_what_if_fold_pairs_each_result_with_the_first_folds():
    evs = run_events(n=8)
    lower = DetectionConfig({"tools": {"loopDetection": {"enabled": True, "warningThreshold": 2}}})
    w = WhatIf(lower)
    msgs = [(i, e["run_id"].encode(), json.dumps(e).encode()) for i, e in enumerate(evs)]
    msgs.insert(3, (99, b"r", b"not json"))  # set aside by both folds
    first = list(fold(iter(msgs), DetectionConfig(ON)))
    seen, got = [], []
    for g in w.fold(iter(first)):
        f = g.position
        seen.append(f)
        assert type(g) is type(f) and (type(f) is SetAside or g.event == f.event)
        d = w.decision(g)
        if type(f) is Folded and d is not None:
            got.append(d)
            w.compare(f.decisions[0] if f.decisions else None, d)
    assert seen == first
    want = replay([decode_event(json.dumps(e)) for e in evs], lower)
    assert got == want
    expect = sum(
        len(changes(a.action, b.action))
        for a, b in zip(replay([decode_event(json.dumps(e)) for e in evs], DetectionConfig(ON)), want, strict=True)
    )
    assert sum(w.counts.changes.values()) == expect > 0
    c = WhatIfCounts()
    c.merge(pickle.loads(pickle.dumps(w.counts)))
    assert c.summary(lower)["config_hash"] == lower.for_agent(None).config_hash
    assert sum(c.summary(lower)[k] for k in c.changes) == expect


# -- the timelines -----------------------------------------------------------------------------


def test_timelines_keep_the_last_entries_and_report_only_flagged_runs():
    evs = [decode_event(json.dumps(e)) for e in run_events(n=3)]
    ok, block = decision(), decision(action="block", level="critical", detector="generic_repeat", count=5)
    t = Timelines(what_if=False, max_runs=1, length=4)
    t.start("r", "gw", None, False)
    for ev in evs:
        t.add(ev, "matched" if ev.seq % 2 == 0 else None, ok, ok, None, False)
    t.close("r")
    assert t.flagged == []  # nothing to show: all matched and allowed
    t.start("r", "gw", None, False)
    for ev in evs:
        t.add(ev, "matched" if ev.seq % 2 == 0 else None, ok, block if ev.seq == 4 else ok, None, ev.seq == 2)
    t.start("r2", "gw", "agent", True)
    t.add(decode_event(json.dumps(run_events("r2", n=1)[0])), "missing", None, ok, None, False)
    t.finish()
    (run,) = t.flagged  # max_runs: the second flagged run is left out
    assert run["flags"] == ["block", "what_if"] and run["truncated"] == 2
    assert [e["seq"] for e in run["timeline"]] == [2, 3, 4, 5]
    assert run["timeline"][2]["replayed"]["action"] == "block" and run["timeline"][2]["what_if"] is None
    assert not t.open


# -- budgets and runs not enforced -------------------------------------------------------------


def test_nearest_rank():
    assert nearest_rank([], 50) is None
    assert nearest_rank([7], 90) == 7
    assert nearest_rank([4, 1, 3, 2], 50) == 2  # the lower middle: a value some run had
    assert [nearest_rank(list(range(1, 11)), p) for p in (50, 90, 100)] == [5, 9, 10]


def usage_event(seq: int, tokens: int, run: str = "r") -> Usage:
    return decode_event(
        json.dumps(
            {"type": "usage", "run_id": run, "seq": seq, "gateway_id": "gw", "input_tokens": tokens, "output_tokens": 1}
        )
    )


def test_a_run_not_enforced_is_followed_from_its_first_would_be_stop_to_its_end():
    evs = [decode_event(json.dumps(e)) for e in run_events(n=4)]  # seq 0..7
    trial = DetectionConfig({"agents": {"list": [{"id": "trial", "loopwarden": {"enforce": False}}]}})
    sh = Shadow(lambda h: trial)
    told = decision(enforced=False, action="allow", shadow_action="allow")
    sh.decision(evs[0], told)
    assert not sh.watching
    sh.decision(evs[2], decision(enforced=False, action="allow", shadow_action="block", detector="generic_repeat"))
    for ev in (evs[3], usage_event(9, 99), evs[4], evs[6]):
        sh.event(ev)
    sh.decision(evs[4], decision(enforced=False, action="allow", shadow_action="abort", detector="generic_repeat"))
    sh.event(decode_event(json.dumps({"type": "run_end", "run_id": "r", "seq": 10, "gateway_id": "gw"})))
    # Another run, held out (its agent enforces), stopped by a usage event's budget abort; it never ends.
    spent = decision(
        run_id="h",
        enforced=False,
        action="allow",
        shadow_action="abort",
        detector="run_budget",
        tool_name=None,
        warning_key="budget:tokens",
        agent_id="main",
    )
    sh.decision(usage_event(0, 10, "h"), spent)
    sh.event(decode_event(json.dumps(dict(run_events("h", n=1)[0], seq=1))))
    sh.finish()
    s = sh.counts.summary()
    assert s["shadow"]["would_stop"] == {
        "runs": 2,
        "ended_by_themselves": 1,
        "calls_after": {"median": 1, "p90": 2},
        "tokens_after": {"median": 0, "p90": 100},
    }
    assert s["shadow"]["by_shadow_action"] == {"allow": 1, "warn": 0, "block": 1, "abort": 2}
    assert s["shadow"]["by_detector"] == {"generic_repeat": 2, "run_budget": 1}
    assert (s["shadow"]["runs"], s["shadow"]["held_out_runs"]) == (2, 1)
    assert s["budgets"]["aborts"] == s["budgets"]["aborts_on_usage"] == s["budgets"]["not_enforced"] == 1


def test_budget_decisions_are_counted_by_what_they_do():
    sh = Shadow(lambda h: None)
    ev = decode_event(json.dumps(run_events(n=1)[0]))
    for kw in (
        dict(action="warn", warning_key="budget:tokens:80"),
        dict(action="warn", warning_key="budget:tokens:95"),
        dict(action="abort", warning_key="budget:calls"),
        dict(action="abort", warning_key=None),  # a call after the abort
        dict(action="allow", enforced=False, shadow_action="warn", warning_key="budget:cost:80"),
    ):
        sh.decision(ev, decision(detector="run_budget", level="warning", **kw))
    sh.finish()
    b = sh.counts.summary()["budgets"]
    assert b == {
        "warnings": 3,
        "aborts": 1,
        "aborts_on_usage": 0,
        "calls_after_abort": 1,
        "not_enforced": 1,
        "by_key": {"budget:calls": 1, "budget:cost:80": 1, "budget:tokens:80": 1, "budget:tokens:95": 1},
    }
    assert sh.counts.summary()["shadow"]["decisions"] == 1 and not sh.watching
    merged = ShadowCounts()
    merged.merge(pickle.loads(pickle.dumps(sh.counts)))
    merged.merge(sh.counts)
    assert merged.summary()["budgets"]["warnings"] == 6
