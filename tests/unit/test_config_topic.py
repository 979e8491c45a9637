"""A config's id on the config topic (streams/admin/config_topic.py): the parsed document's digest,
so the same config in JSON or JSON5 is one id and another config another; and what a
reader makes of each kind of record."""

import json

import pytest

from detectors import ConfigError
from streams.admin.config_topic import CURRENT, SOURCE_HEADER, ConfigHistory, config_id

JSON5 = b"""// the example's shape, with comments, unquoted keys and trailing commas
{
  tools: { loopDetection: { enabled: true, warningThreshold: 3, criticalThreshold: 5.0, }, },
  agents: { list: [ { id: 'main', default: true, }, ], },
}
"""
JSON = json.dumps(
    {
        "agents": {"list": [{"default": True, "id": "main"}]},
        "tools": {"loopDetection": {"criticalThreshold": 5, "enabled": True, "warningThreshold": 3}},
    },
    indent=2,
).encode()


def test_the_same_document_in_json_and_json5_has_one_id():
    assert config_id(JSON5) == config_id(JSON)
    assert config_id(JSON) == config_id(b" " + JSON + b"\n")
    assert len(config_id(JSON)) == 64 and int(config_id(JSON), 16) >= 0


def test_another_document_has_another_id():
    other = JSON.replace(b'"warningThreshold": 3', b'"warningThreshold": 4')
    assert other != JSON
    assert config_id(other) != config_id(JSON)
    # The document counts, not only what it resolves to: an unknown field changes the id.
    assert config_id(b'{"x": 1}') != config_id(b"{}")


def test_text_that_is_not_json5_has_no_id():
    with pytest.raises(ConfigError, match="not valid JSON"):
        config_id(b"{tools: ")
    with pytest.raises(ConfigError, match="not UTF-8"):
        config_id(b'{"a": "\xff"}')


def test_a_history_takes_configs_and_the_current_record_and_skips_what_it_cannot_read(caplog):
    h = ConfigHistory()
    cid = config_id(JSON5)
    h.add(cid.encode(), JSON5, [(SOURCE_HEADER, b"examples/a.json5")])
    assert h.current is None and h.current_config() is None
    h.add(CURRENT, json.dumps({"config": cid}).encode())
    assert h.current == cid and h.sources[cid] == "examples/a.json5"
    assert h.configs[cid][0] == JSON5 and h.current_config().for_agent(None).warning == 3
    # Unreadable records are skipped with a warning and change nothing.
    h.add(b"0" * 64, JSON)  # a key that is not the text's id
    h.add(cid.encode(), b"{not json")
    h.add(CURRENT, b"[1]")
    h.add(None, JSON)
    assert list(h.configs) == [cid] and h.configs[cid][0] == JSON5 and h.current == cid
    assert caplog.text.count("skipping an unreadable record") == 4
    # Tombstones remove.
    h.add(CURRENT, None)
    assert h.current is None
    h.add(cid.encode(), None)
    assert h.configs == {}


def _fold(events: list[dict], before, after, switch_at: int):
    """Decisions of one run folded under `before`, then under `after` from seq `switch_at`
    on, as a worker that switches configs between two batches decides them."""
    from detectors.ingest import Folded, fold

    source = [(i, e["run_id"].encode(), json.dumps(e).encode()) for i, e in enumerate(events)]
    out = []
    for f in fold(source, before, config_for=lambda ev: after if ev.seq >= switch_at else before):
        assert isinstance(f, Folded)
        out.append((f.decisions, f.after))
    return out


def _cfg(**fields):
    from detectors import load_config

    return load_config(json.dumps({"tools": {"loopDetection": {"enabled": True, **fields}}}))


def test_a_switch_keeps_the_history_and_cuts_it_at_the_next_append():
    # What streams/admin/config_topic.py says of a run across a switch (semantics.md section 3).
    before = _cfg(historySize=30, warningThreshold=20, criticalThreshold=40, globalCircuitBreakerThreshold=50)
    after = _cfg(historySize=3, warningThreshold=2, criticalThreshold=30, globalCircuitBreakerThreshold=50)
    calls = [
        {"type": "tool_call", "run_id": "r", "seq": i, "gateway_id": "g", "tool_name": "read", "params": {}}
        for i in range(12)
    ]
    got = _fold(calls, before, after, switch_at=10)
    assert [len(state.history) for _, state in got] == [*range(1, 11), 3, 3]
    (d10,), (d11,) = got[10][0], got[11][0]
    # Judged over the ten records kept from before the switch, then cut to three.
    assert (d10.action, d10.count, d10.config_hash) == ("warn", 10, after.for_agent(None).config_hash)
    # The warning memory is kept too: bucket 0 is below the bucket already shown.
    assert (d11.action, d11.level, d11.count) == ("allow", "warning", 3)
    assert all(d.action == "allow" and d.level == "none" for ds, _ in got[:10] for d in ds)


def test_a_switch_keeps_an_armed_guard_which_aborts_at_the_new_window():
    before, after = _cfg(postCompactionGuard={"windowSize": 5}), _cfg(postCompactionGuard={"windowSize": 2})
    result = {
        "type": "tool_result",
        "run_id": "r",
        "gateway_id": "g",
        "tool_name": "read",
        "params": {},
        "result": {"content": [{"type": "text", "text": "same"}]},
    }
    events = [
        {"type": "compaction_retry", "run_id": "r", "seq": 0, "gateway_id": "g"},
        {**result, "seq": 1},
        {**result, "seq": 2},
    ]
    got = _fold(events, before, after, switch_at=2)
    assert got[0][1].guard_left == 5 and got[1][1].guard_left == 4  # armed with the old window
    (abort,) = got[2][0]  # the outcome before the switch counts toward the new window of 2
    assert (abort.action, abort.detector, abort.count) == ("abort", "compaction_loop_persisted", 2)
