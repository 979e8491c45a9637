"""Config: global + per-agent merge, default agent, fallback, clamping, warnings."""

import pytest

from detectors import ConfigError, DetectionConfig, load_config


def test_agent_inherits_what_it_does_not_set():
    c = DetectionConfig(
        {
            "tools": {"loopDetection": {"enabled": True, "historySize": 40, "detectors": {"pingPong": True}}},
            "agents": {
                "list": [
                    {
                        "id": "Safe",
                        "tools": {
                            "loopDetection": {
                                "warningThreshold": 8,
                                "criticalThreshold": 16,
                                "detectors": {"pingPong": False},
                            }
                        },
                    }
                ]
            },
        }
    )
    safe = c.for_agent("  sAFE ")
    assert (safe.enabled, safe.history_size, safe.warning, safe.critical) == (True, 40, 8, 16)
    assert (safe.switched_on("pingPong"), safe.switched_on("genericRepeat")) == (False, True)
    assert c.for_agent("other") == c.global_config
    assert safe.config_hash != c.global_config.config_hash


@pytest.mark.parametrize(
    "entries, expected",
    [
        ([{"id": "a"}, {"id": "main", "tools": {"loopDetection": {"historySize": 7}}}], 7),
        (
            [
                {"id": "a", "tools": {"loopDetection": {"historySize": 5}}},
                {"id": "b", "default": True, "tools": {"loopDetection": {"historySize": 6}}},
            ],
            6,
        ),
        ([{"id": "x", "tools": {"loopDetection": {"historySize": 4}}}, {"id": "y"}], 4),
        ([], 30),
    ],
)
def test_event_without_agent_takes_the_default_agent(entries, expected):
    assert DetectionConfig({"agents": {"list": entries}}).for_agent(None).history_size == expected


def test_bad_numbers_fall_back_to_builtin_defaults_not_to_the_global_value():
    c = DetectionConfig(
        {
            "tools": {"loopDetection": {"warningThreshold": 5, "historySize": 0}},
            "agents": {"list": [{"id": "a", "tools": {"loopDetection": {"warningThreshold": -3}}}]},
        }
    )
    assert c.global_config.warning == 5 and c.global_config.history_size == 30
    assert c.for_agent("a").warning == 10
    assert any("historySize" in w and w.startswith("tools.") for w in c.warnings)
    assert any(w.startswith("agents.list[0].tools.loopDetection.warningThreshold") for w in c.warnings)
    assert sum("historySize" in w for w in c.warnings) == 1  # named once, not once per agent


def test_thresholds_are_clamped_in_order():
    doc = {"tools": {"loopDetection": {"warningThreshold": 25, "globalCircuitBreakerThreshold": 3}}}
    r = DetectionConfig(doc).global_config
    assert (r.warning, r.critical, r.global_breaker) == (25, 26, 27)


def test_enabled_has_three_states():
    unset = DetectionConfig({}).global_config
    off = DetectionConfig({"tools": {"loopDetection": {"enabled": False}}}).global_config
    on = DetectionConfig({"tools": {"loopDetection": {"enabled": True}}}).global_config
    assert (unset.rolling_detectors_on, unset.compaction_guard_on) == (False, True)
    assert (off.rolling_detectors_on, off.compaction_guard_on) == (False, False)
    assert (on.rolling_detectors_on, on.compaction_guard_on) == (True, True)
    assert len({unset.config_hash, off.config_hash, on.config_hash}) == 3


def test_json5_is_accepted_and_garbage_is_a_config_error():
    c = load_config("{tools: {loopDetection: {enabled: true, /* c */ warningThreshold: 8,}}}")
    assert c.global_config.warning == 8
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_config("{tools: ")
    with pytest.raises(ConfigError, match="must be an object"):
        load_config("[1]")


def test_agent_lookups_stay_right_past_the_lookup_memo():
    c = DetectionConfig({"agents": {"list": [{"id": "Safe", "tools": {"loopDetection": {"historySize": 7}}}]}})
    for i in range(5000):  # more spellings than the memo keeps
        assert c.for_agent(f"other-{i}") is c.global_config
    assert [c.for_agent(s).history_size for s in ("Safe", " safe", "SAFE ", "Safe")] == [7, 7, 7, 7]
    assert c.for_agent("safe-not") is c.global_config
