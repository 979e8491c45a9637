"""A config's id on the config topic (streams/configs.py): the parsed document's digest,
so the same config in JSON or JSON5 is one id and another config another; and what a
reader makes of each kind of record."""

import json

import pytest

from detectors import ConfigError
from streams.configs import CURRENT, SOURCE_HEADER, ConfigHistory, config_id

JSON5 = b"""// the example's shape, with comments, unquoted keys and trailing commas
{
  tools: { loopDetection: { enabled: true, warningThreshold: 3, criticalThreshold: 5.0, }, },
  agents: { list: [ { id: 'main', default: true, }, ], },
}
"""
JSON = json.dumps({"agents": {"list": [{"default": True, "id": "main"}]},
                   "tools": {"loopDetection": {"criticalThreshold": 5, "enabled": True, "warningThreshold": 3}}},
                  indent=2).encode()


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
