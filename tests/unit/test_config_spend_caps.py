"""`loopwarden.fleet.spendCaps` (semantics.md section 11): each entry checked at load,
a bad one named in one warning and ignored, and the valid ones in the hashed shape
only when there is one (wire-format.md, "Config file")."""

from __future__ import annotations

from detectors import DetectionConfig
from detectors.canonical import digest
from tests.config_shapes import default_shape

HOUR = 3_600_000
ON = {"tools": {"loopDetection": {"enabled": True}}}


def caps_config(*caps: dict, **more) -> dict:
    loopwarden = {"fleet": {"spendCaps": list(caps)}, **more.pop("loopwarden", {})}
    return {**ON, "loopwarden": loopwarden, **more}


def test_each_bad_entry_is_named_in_one_warning_and_ignored():
    cfg = DetectionConfig(
        caps_config(
            {"id": "ok", "toolCalls": 5},
            7,  # not an object
            {"toolCalls": 5},  # no id
            {"id": "   ", "toolCalls": 5},  # blank id
            {"id": " ok ", "tokens": 9},  # id taken (ids compare trimmed)
            {"id": "p", "per": "team", "tokens": 9},
            {"id": "q", "agents": "writer", "tokens": 9},
            {"id": "r", "agents": ["writer", 3], "tokens": 9},
            {"id": "s"},  # no ceiling at all
            {"id": "t", "tokens": 0, "costUsd": 0.0000004, "toolCalls": 1.5},  # none valid
            {"id": "u", "agents": [], "tokens": 9},
        )
    )
    assert [c.id for c in cfg.spend_caps] == ["ok"]
    warnings = [w for w in cfg.warnings if "spendCaps" in w]
    assert len(warnings) == 10, warnings
    for i in range(1, 11):
        assert sum(w.startswith(f"loopwarden.fleet.spendCaps[{i}]") for w in warnings) == 1, i
    assert all(w.endswith("entry ignored") for w in warnings)
    named = {i: next(w for w in warnings if w.startswith(f"loopwarden.fleet.spendCaps[{i}]")) for i in range(1, 11)}
    assert "taken by an earlier entry" in named[4] and "'ok'" in named[4]
    assert "per 'team'" in named[5]
    assert "no valid ceiling" in named[8] and "tokens: 0" in named[9] and "toolCalls: 1.5" in named[9]


def test_ids_are_trimmed_and_case_sensitive_and_the_first_valid_entry_wins():
    cfg = DetectionConfig(
        caps_config(
            {"id": " dup ", "per": "nobody", "tokens": 1},  # invalid: does not take the id
            {"id": "dup", "tokens": 2},
            {"id": "Dup", "tokens": 3},  # another id: case counts
            {"id": "dup ", "tokens": 4},
        )
    )
    assert [(c.id, c.tokens) for c in cfg.spend_caps] == [("dup", 2), ("Dup", 3)]


def test_a_kept_entry_falls_back_on_its_window_and_drops_a_bad_ceiling_with_a_warning_each():
    cfg = DetectionConfig(caps_config({"id": "c", "windowMs": -5, "tokens": "many", "costUsd": 2, "per": None}))
    (cap,) = cfg.spend_caps
    assert (cap.per, cap.window_ms, cap.tokens, cap.cost, cap.calls, cap.cost_usd) == (
        "agent",
        HOUR,
        None,
        2_000_000,
        None,
        2,
    )
    warnings = [w for w in cfg.warnings if "spendCaps" in w]
    assert len(warnings) == 2
    assert any("[0] ('c').windowMs: -5" in w and "3600000" in w for w in warnings)
    assert any("[0] ('c').tokens: 'many'" in w and "no ceiling" in w for w in warnings)
    # null is absent: no warning
    quiet = DetectionConfig(caps_config({"id": "c", "windowMs": None, "agents": None, "toolCalls": 2.0}))
    assert not quiet.warnings and quiet.spend_caps[0].calls == 2 and quiet.spend_caps[0].agents is None


def test_agents_are_trimmed_and_lower_cased_and_caps_are_read_only_at_the_top_level():
    doc = caps_config({"id": "g", "per": "all", "agents": [" Writer", "SEO "], "costUsd": 1})
    doc["agents"] = {"list": [{"id": "x", "loopwarden": {"fleet": {"spendCaps": [{"id": "y", "tokens": 1}]}}}]}
    cfg = DetectionConfig(doc)
    assert [c.agents for c in cfg.spend_caps] == [("writer", "seo")]
    assert any("agents.list[0].loopwarden.fleet" in w and "top level" in w for w in cfg.warnings)
    assert cfg.for_agent("x").spend_caps == cfg.spend_caps  # global: every agent's config holds them
    bad = DetectionConfig({"loopwarden": {"fleet": {"spendCaps": {"id": "a"}}}})
    assert bad.spend_caps == () and "loopwarden.fleet.spendCaps: not a list; ignored" in bad.warnings


def test_the_hashed_shape_gains_the_valid_caps_only_when_there_is_one():
    plain = DetectionConfig(ON).global_config.config_hash
    assert plain == digest(default_shape())
    # no valid cap: the hash is the one without caps
    for caps in ([], [{"id": "x"}], [{"id": "y", "per": "team", "tokens": 5}]):
        assert DetectionConfig(caps_config(*caps)).global_config.config_hash == plain, caps
    cfg = DetectionConfig(
        caps_config(
            {"id": " a ", "per": "gateway", "windowMs": 60000.0, "tokens": 100.0, "costUsd": 0.25, "toolCalls": 3},
            {"id": "bad"},  # ignored: not in the shape
            {"id": "b", "agents": ["W "], "costUsd": 1},
        )
    )
    expected = default_shape(
        [
            {
                "id": "a",
                "per": "gateway",
                "agents": None,
                "windowMs": 60000,
                "tokens": 100,
                "costUsd": 0.25,
                "toolCalls": 3,
            },
            {
                "id": "b",
                "per": "agent",
                "agents": ["w"],
                "windowMs": HOUR,
                "tokens": None,
                "costUsd": 1,
                "toolCalls": None,
            },
        ]
    )
    assert cfg.global_config.config_hash == digest(expected) != plain
