"""The registry: one ordered list from which the switches, the names and each agent's detectors derive."""

from __future__ import annotations

from detectors import DetectionConfig
from detectors.rules import NAMES, REGISTRY, SWITCHES


def test_first_match_order_and_names():
    assert NAMES == ("unknown_tool_repeat", "global_circuit_breaker", "known_poll_no_progress", "ping_pong",
                     "generic_repeat", "compaction_loop_persisted")


def test_config_switches_derive_from_the_registry():
    assert SWITCHES == ("genericRepeat", "knownPollNoProgress", "pingPong")
    assert {d.name: d.switch for d in REGISTRY if d.switch} == {
        "known_poll_no_progress": "knownPollNoProgress", "ping_pong": "pingPong", "generic_repeat": "genericRepeat"}


def test_each_agent_holds_the_detectors_switched_on_for_it_in_order():
    c = DetectionConfig({
        "tools": {"loopDetection": {"enabled": True}},
        "agents": {"list": [
            {"id": "a", "tools": {"loopDetection": {"detectors": {"pingPong": False, "genericRepeat": False}}}},
            {"id": "unset", "tools": {"loopDetection": {"enabled": None}}},
            {"id": "off", "tools": {"loopDetection": {"enabled": False}}},
        ]},
    })
    names = lambda cfg: [d.name for d in cfg.call_detectors + cfg.result_detectors]  # noqa: E731
    assert names(c.global_config) == list(NAMES)
    assert names(c.for_agent("a")) == ["unknown_tool_repeat", "global_circuit_breaker", "known_poll_no_progress",
                                       "compaction_loop_persisted"]
    assert names(c.for_agent("unset")) == ["compaction_loop_persisted"]
    assert names(c.for_agent("off")) == []


def test_a_switch_that_is_not_a_boolean_is_named_and_stays_on():
    c = DetectionConfig({"tools": {"loopDetection": {"enabled": True, "detectors": {"pingPong": "no", "other": 1}}}})
    assert c.warnings == ("tools.loopDetection.detectors.pingPong: 'no' is not true or false; using true",)
    assert c.global_config.switched_on("pingPong")
