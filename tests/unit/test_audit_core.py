"""The audit's join without a broker (streams/audit/core.py): records in, counts out."""

from __future__ import annotations

import json
from collections import Counter

from detectors import DetectionConfig, decode_event, encode, replay
from detectors.policy import held_out
from streams.audit.core import Audit, ConfigBook, Msg
from streams.audit.join import Join
from streams.audit.options import Scope, Window
from streams.audit.report import Totals, report, summary
from streams.audit.timelines import MAX_RUNS

ON = {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 3, "criticalThreshold": 5}}}


def run_events(run="r", n=8, t0=1_000_000):
    out = []
    for i in range(n):
        out.append(
            {
                "type": "tool_call",
                "run_id": run,
                "seq": 2 * i,
                "gateway_id": "gw",
                "tool_name": "read",
                "tool_call_id": f"{run}{i}",
                "params": {"p": 1},
                "ts": t0 + 1000 * i,
            }
        )
        out.append(
            {
                "type": "tool_result",
                "run_id": run,
                "seq": 2 * i + 1,
                "gateway_id": "gw",
                "tool_name": "read",
                "tool_call_id": f"{run}{i}",
                "params": {"p": 1},
                "result": "x",
                "ts": t0 + 1000 * i + 500,
            }
        )
    return out


def decided(events, config=ON):
    return [
        json.loads(encode(d)) for d in replay([decode_event(json.dumps(e)) for e in events], DetectionConfig(config))
    ]


def msgs(items, key):
    return [Msg(0, i, x["ts"], x[key].encode(), json.dumps(x).encode()) for i, x in enumerate(items)]


def audit(**kw):
    return Audit(ConfigBook(DetectionConfig(ON)), Window(grace_ms=10_000), complete=lambda p: True, **kw)


def test_recorded_before_their_events_match_and_count_by_action():
    evs = run_events()
    ds = decided(evs)
    a = audit()
    a.recorded(msgs(ds, "gateway_id"))
    a.events(msgs(evs, "run_id"))
    a.finish()
    s = a.summary(1.0)
    assert s["matched"] == s["decisions_recorded"] == s["decisions_replayed"] == len(ds) == 8
    assert s["by_action"]["block"] == sum(d["action"] == "block" for d in ds) > 0
    assert a.clean()


def test_one_fold_runs_through_every_chunk_so_runs_go_on_from_chunk_to_chunk():
    evs = run_events("r1") + run_events("r2", t0=1_000_100)
    evs.sort(key=lambda e: e["ts"])
    lower = DetectionConfig({"tools": {"loopDetection": {"enabled": True, "warningThreshold": 2}}})
    summaries = []
    for size in (len(evs), 1, 3):
        a = audit(what_if=lower)
        a.recorded(msgs(decided(run_events("r1")) + decided(run_events("r2", t0=1_000_100)), "gateway_id"))
        events = msgs(evs, "run_id")
        for i in range(0, len(events), size):
            a.events(events[i : i + size])
        a.finish()
        summaries.append(a.summary(1.0))
    whole, *chunked = summaries
    assert whole["matched"] == len(evs) // 2 and whole["by_action"]["block"] > 0  # the runs' repeats were seen
    assert whole["what_if"]["newly_blocked"] + whole["what_if"]["newly_warned"] > 0
    assert all(c == whole for c in chunked)


def test_a_recorded_decision_keeps_the_config_its_verdict_names_looked_up_once_per_verdict():
    asked = []

    def named(h):
        asked.append(h)
        return f"config {h}"

    j = Join(10_000, named=named)
    ds = decided(run_events(n=4))
    for i, d in enumerate(ds):
        j.offer(Msg(0, i, d["ts"], b"gw", json.dumps(d).encode()))
    held = [j.find("r", d["seq"]) for d in ds]
    assert [r.config for r in held] == [f"config {d['config_hash']}" for d in ds]
    assert len(asked) == len({(d["action"], d["count"], d["message"]) for d in ds}) < len(ds)  # once per verdict
    small = Join(10_000, named=named)
    small.verdicts.limit = 2  # the configs kept by verdict are bounded as the verdicts are
    for i, d in enumerate(decided(run_events("q", n=8))):
        small.offer(Msg(0, i, d["ts"], b"gw", json.dumps(d).encode()))
        assert small.find("q", d["seq"]).config == f"config {d['config_hash']}"
        assert len(small._configs) <= 2


def test_a_second_verdict_after_the_event_was_folded_turns_a_match_into_a_conflict():
    evs = run_events()
    ds = decided(evs)
    a = audit()
    a.recorded(msgs(ds, "gateway_id"))
    a.events(msgs(evs, "run_id"))
    again = dict(ds[0], action="block", level="critical", detector="generic_repeat", count=9)
    a.recorded([Msg(0, 99, ds[0]["ts"] + 2000, b"gw", json.dumps(again).encode())])
    a.recorded([Msg(0, 100, ds[1]["ts"] + 2000, b"gw", json.dumps(ds[1]).encode())])  # the same again: a duplicate
    a.finish()
    s = a.summary(1.0)
    assert (s["matched"], s["conflicting"], s["duplicates"]) == (len(ds) - 1, 1, 1)
    assert not a.clean()


def test_a_decision_whose_event_never_comes_is_unexpected_once_the_grace_has_passed():
    evs = run_events()
    ghost = dict(decided(evs)[0], run_id="ghost", event_id="ghost:0")
    a = audit()
    a.recorded([Msg(0, 0, ghost["ts"], b"gw", json.dumps(ghost).encode())])
    a.expire(ghost["ts"] + 5_000)
    assert a.summary(1.0)["unexpected"] == 0  # still within the grace period
    a.expire(ghost["ts"] + 10_001)
    assert a.summary(1.0)["unexpected"] == 1 and not a.join.pending


def test_events_without_recorded_decisions_are_missing():
    evs = run_events(n=3)
    a = audit()
    a.events(msgs(evs, "run_id"))
    a.finish()
    s = a.summary(1.0)
    assert s["missing"] == s["decisions_replayed"] == 3 and s["decisions_recorded"] == 0


def test_a_run_first_seen_less_than_an_idle_timeout_after_the_scan_start_is_partial():
    evs = run_events(t0=50_000)
    ds = decided(evs)
    a = Audit(ConfigBook(DetectionConfig(ON)), Window(from_ms=0, scan_start_ms=0, grace_ms=10_000))
    a.recorded(msgs(ds, "gateway_id"))
    a.events(msgs(evs, "run_id"))
    a.finish()
    s = a.summary(1.0)
    assert s["partial_runs"] == 1 and s["matched"] == 0  # its earlier events may lie before the scan


def _fleet():
    """Four runs with a mix of verdicts, and their decisions with one of each fault: a
    mismatch (another action), an unexpected decision, a missing one, a conflict."""
    evs = [e for i, run in enumerate(("ra", "rb", "rc", "rd")) for e in run_events(run, 6 + i, 1_000_000 + i)]
    evs.sort(key=lambda e: e["ts"])
    ds = decided(evs)
    blocked = next(d for d in ds if d["run_id"] == "rb" and d["action"] == "block")
    ds.append({**blocked, "action": "allow"})  # a conflict
    ds[0] = {**ds[0], "action": "warn"}  # a mismatch
    ds.pop(3)  # a missing decision
    ds.append({**ds[1], "event_id": "rc:999", "seq": 999})  # an unexpected one
    return evs, ds


def _sharded(evs, ds, owned):
    """One shard: every decision offered, only the owned runs' events folded (as a
    shard reads only its partitions)."""
    a = audit(scope=Scope(owns=lambda run_id: run_id in owned), timelines=True)
    a.recorded(msgs(ds, "gateway_id"))
    a.events(msgs([e for e in evs if e["run_id"] in owned], "run_id"))
    a.finish()
    return a


def test_shards_that_own_disjoint_runs_add_up_to_the_whole_audit():
    evs, ds = _fleet()
    whole = audit(timelines=True)
    whole.recorded(msgs(ds, "gateway_id"))
    whole.events(msgs(evs, "run_id"))
    whole.finish()
    merged = Totals.empty()
    for owned in ({"ra", "rc"}, {"rb"}, {"rd"}):
        shard = _sharded(evs, ds, owned)
        assert shard.tally.misrouted == 0
        merged.merge(shard.totals(), MAX_RUNS)
    want, got = whole.summary(1.0), summary(merged, None, 1.0)
    assert want == got
    assert want["mismatched"] == want["missing"] == want["unexpected"] == want["conflicting"] == 1
    assert want["runs"] == 4 and want["matched"] > 0
    report_want, report_got = whole.report(1.0, {}), report(merged, None, whole.configs.listed, 1.0, {})
    assert sorted(r["run_id"] for r in report_got["runs"]) == sorted(r["run_id"] for r in report_want["runs"])
    assert report_got["per_minute"] == report_want["per_minute"]
    assert report_got["by_agent"] == report_want["by_agent"] and report_got["by_tool"] == report_want["by_tool"]
    assert merged.clean() is whole.clean() is False


def test_a_shard_counts_runs_whose_events_are_on_its_partitions_but_not_its_own():
    evs, ds = _fleet()
    a = audit(scope=Scope(owns=lambda run_id: run_id != "rb"))
    a.recorded(msgs(ds, "gateway_id"))
    a.events(msgs(evs, "run_id"))  # rb's events too: they were not where its run_id hashes to
    a.finish()
    assert a.tally.misrouted == 1
    assert a.summary(1.0)["missing"] > 1  # rb's decisions were left to another shard


def test_events_without_a_decision_are_replayed_under_the_config_their_run_was_last_decided_under():
    """A compaction_retry right after a run's first call has no decision of its own: it
    is replayed under the config the call's recorded decision names (which arms the
    post-compaction guard), not under the current config (which does not)."""
    guarded = {"tools": {"loopDetection": {"enabled": True}}}
    evs = run_events(n=2)
    retry = {"type": "compaction_retry", "run_id": "r", "seq": 2, "gateway_id": "gw", "ts": evs[1]["ts"] + 10}
    evs = evs[:2] + [retry] + [dict(e, seq=e["seq"] + 1) for e in run_events(n=5)[2:]]
    ds = decided(evs, guarded)
    assert any(d["detector"] == "compaction_loop_persisted" for d in ds)
    book = ConfigBook(DetectionConfig({"tools": {"loopDetection": {"enabled": False}}}))
    book.add(DetectionConfig(guarded), "pinned", None)
    a = Audit(book, Window(grace_ms=10_000), complete=lambda p: True)
    a.recorded(msgs(ds, "gateway_id"))
    a.events(msgs(evs, "run_id"))
    a.finish()
    s = a.summary(1.0)
    assert s["matched"] == len(ds) and a.clean()


def test_decisions_under_an_unknown_config_are_counted_once_each():
    evs = run_events(n=4)
    ds = [dict(d, config_hash="f" * 64) for d in decided(evs)]
    a = audit()
    a.recorded(msgs(ds, "gateway_id"))
    a.events(msgs(evs, "run_id"))
    a.finish()
    assert a.summary(1.0)["unknown_configs"] == {"f" * 64: len(ds)}


def offline_policy(events: list[dict], config_for_run) -> dict:
    """The audit's `budgets` and `shadow` summary, computed from `detectors.replay` alone:
    each run's events replayed under `config_for_run(run_id)` (a DetectionConfig), each
    run followed from its first decision not enforced whose shadow action is block or
    abort (the calls and tokens of its later events, and whether a run_end came)."""
    runs: dict[str, list] = {}
    for e in events:
        runs.setdefault(e["run_id"], []).append(decode_event(json.dumps(e)))
    budgets, keys, actions, detectors = Counter(), Counter(), Counter(), Counter()
    shadow_runs, held_out, after = set(), set(), []
    for run_id, evs in runs.items():
        config = config_for_run(run_id)
        decided = {d.seq: d for d in replay(evs, config)}
        point = None
        for i, ev in enumerate(evs):
            d = decided.get(ev.seq)
            if d is None:
                continue
            would = d.action if d.enforced else d.shadow_action
            if d.detector == "run_budget":
                if would == "warn":
                    budgets["warnings"] += 1
                elif d.warning_key is None:
                    budgets["calls_after_abort"] += 1
                else:
                    budgets["aborts"] += 1
                    budgets["aborts_on_usage"] += d.tool_name is None
                budgets["not_enforced"] += not d.enforced
                keys[d.warning_key] += d.warning_key is not None
            if d.enforced:
                continue
            shadow_runs.add(run_id)
            if config.for_agent(d.agent_id).enforce:
                held_out.add(run_id)
            actions[would] += 1
            if would != "allow":
                detectors[d.detector] += 1
            if point is None and would in ("block", "abort"):
                point = i
        if point is not None:
            rest = evs[point + 1 :]
            calls = sum(type(ev).__name__ == "ToolCall" for ev in rest)
            tokens = sum(ev.input_tokens + ev.output_tokens for ev in rest if type(ev).__name__ == "Usage")
            after.append((calls, tokens, any(type(ev).__name__ == "RunEnd" for ev in rest)))

    def rank(values, p):
        return sorted(values)[max(0, -(-p * len(values) // 100) - 1)] if values else None

    def spread(values):
        return {"median": rank(values, 50), "p90": rank(values, 90)}

    return {
        "budgets": {
            **{k: budgets[k] for k in ("warnings", "aborts", "aborts_on_usage", "calls_after_abort", "not_enforced")},
            "by_key": dict(sorted((k, n) for k, n in keys.items() if n)),
        },
        "shadow": {
            "decisions": sum(actions.values()),
            "runs": len(shadow_runs),
            "held_out_runs": len(held_out),
            "by_shadow_action": {a: actions[a] for a in ("allow", "warn", "block", "abort")},
            "by_detector": dict(sorted(detectors.items())),
            "would_stop": {
                "runs": len(after),
                "ended_by_themselves": sum(1 for *_, ended in after if ended),
                "calls_after": spread([c for c, _, _ in after]),
                "tokens_after": spread([t for _, t, _ in after]),
            },
        },
    }


def with_usage(evs: list[dict], tokens=(700, 90)) -> list[dict]:
    """The run's events with a usage event before each call (seqs renumbered)."""
    out = []
    for e in evs:
        if e["type"] == "tool_call":
            u = {"type": "usage", "run_id": e["run_id"], "gateway_id": e["gateway_id"], "ts": e["ts"] - 1}
            out.append({**u, "input_tokens": tokens[0], "output_tokens": tokens[1], "cost_usd": 0.001})
        out.append(dict(e))
    for i, e in enumerate(out):
        e["seq"] = i
    return out


def test_budgets_and_held_out_runs_are_counted_as_an_offline_replay_counts_them():
    held = [r for r in (f"run-{i}" for i in range(40)) if held_out(r, 50)][:3]
    kept = [r for r in (f"run-{i}" for i in range(40)) if not held_out(r, 50)][:2]
    config = {
        **ON,
        "agents": {"list": [{"id": "main", "default": True}, {"id": "trial", "loopwarden": {"enforce": False}}]},
        "loopwarden": {"holdoutPercent": 50, "budgets": {"runTokens": 5000}},
    }
    evs = []
    for k, run in enumerate(held + kept):
        run_evs = run_events(run, n=4 + 3 * k, t0=1_000_000 + k)
        if k % 2:  # every call different: no loop, so budget warnings are given
            run_evs = [dict(e, params={"p": e["seq"] // 2}) for e in run_evs]
        run_evs = with_usage(run_evs)
        if k == 1:  # never ends
            run_evs = run_evs[:-1] if run_evs[-1]["type"] == "run_end" else run_evs
        else:
            end = {"type": "run_end", "run_id": run, "seq": len(run_evs), "gateway_id": "gw"}
            run_evs.append({**end, "ts": run_evs[-1]["ts"] + 1})
        evs += run_evs
    evs += [dict(e, agent_id="trial") for e in with_usage(run_events(kept[0] + "-trial", n=7, t0=2_000_000))]
    ds = decided(evs, config)
    a = audit()
    a.configs.add(DetectionConfig(config), "pinned", None)
    a.recorded(msgs(ds, "gateway_id"))
    a.events(msgs(sorted(evs, key=lambda e: e["ts"]), "run_id"))
    a.finish()
    s = a.summary(1.0)
    want = offline_policy(evs, lambda run_id: DetectionConfig(config))
    assert {k: s[k] for k in ("budgets", "shadow")} == want
    assert want["budgets"]["aborts"] > 0 and want["budgets"]["warnings"] > 0
    w = want["shadow"]
    assert w["would_stop"]["runs"] >= 3 and 0 < w["would_stop"]["ended_by_themselves"] < w["would_stop"]["runs"]
    assert 0 < w["held_out_runs"] < w["runs"]  # the trial agent's run is in shadow mode
    assert s["matched"] == len(ds) and a.clean()


def test_one_config_looked_up_in_the_events_loop_counts_as_the_config_for_path_does():
    """With one config in the book, the fold runs without `config_for` and the audit
    looks each recorded decision up itself: the summary is the one the per-event
    callback gives (forced here by a second config in the book that no decision names),
    unknown configs and mismatches included."""
    evs = run_events("r1", n=9) + run_events("r2", n=6, t0=1_000_050)
    evs.sort(key=lambda e: e["ts"])
    ds = decided(evs)
    ds[1] = dict(ds[1], config_hash="f" * 64)  # a config not known here
    ds[3] = dict(ds[3], message="not what was decided")  # a mismatch
    summaries = []
    for second in (None, {"tools": {"loopDetection": {"enabled": True, "warningThreshold": 2}}}):
        book = ConfigBook(DetectionConfig(ON))
        if second is not None:
            book.add(DetectionConfig(second), "pinned", None)
        a = Audit(book, Window(grace_ms=10_000), complete=lambda p: True)
        a.recorded(msgs(ds, "gateway_id"))
        a.events(msgs(evs, "run_id"))
        assert a.replayer.one_config is (second is None)
        a.finish()
        summaries.append(a.summary(1.0))
    one, two = summaries
    assert one == two
    # (the decision naming an unknown config differs from its replay by that hash: a mismatch too)
    assert one["unknown_configs"] == {"f" * 64: 1} and one["mismatched"] == 2 and one["matched"] == len(ds) - 2


def test_a_config_added_to_the_book_after_the_events_began_is_refused():
    evs = run_events(n=4)
    a = audit()
    a.events(msgs(evs[:2], "run_id"))
    a.configs.add(DetectionConfig({"tools": {"loopDetection": {"enabled": False}}}), "late", None)
    try:
        a.events(msgs(evs[2:], "run_id"))
    except RuntimeError as exc:
        assert "after its events began" in str(exc)
    else:
        raise AssertionError("a config added mid-audit was taken silently")


def test_section_12_decisions_are_audited_like_any_and_counted_by_detector():
    rules = {"tools": {"loopDetection": {"enabled": True}}}
    rules["loopwarden"] = {"rules": {"progressAware": True, "failureRepeat": {"enabled": True}}}
    evs = run_events("ok") + [dict(e, run_id="bad", result=None, error="boom") for e in run_events("bad", n=5)]
    for e in evs:
        if e["run_id"] == "bad" and e["type"] == "tool_result":
            del e["result"]
    ds = decided(evs, rules)
    a = Audit(ConfigBook(DetectionConfig(rules)), Window(grace_ms=10_000), complete=lambda p: True)
    a.recorded(msgs(ds, "gateway_id"))
    a.events(msgs(evs, "run_id"))
    a.finish()
    s = a.summary(1.0)
    assert s["matched"] == len(ds) and a.clean()
    assert s["by_detector"] == {"failure_repeat": 2}  # the 4th and 5th calls of run bad; run ok never warned
