"""The registry: one ordered list from which the switches, the names and each agent's detectors derive.

A new detector adds itself to the registry; these tests do not list every detector, they
pin what must not change: the first-match order of today's six, and the derivations."""

from __future__ import annotations

from detectors import DetectionConfig
from detectors.rules import BY_NAME, NAMES, REGISTRY, SWITCHES

TODAY = (
    "unknown_tool_repeat",
    "global_circuit_breaker",
    "known_poll_no_progress",
    "ping_pong",
    "generic_repeat",
    "compaction_loop_persisted",
)


def test_first_match_order_of_todays_detectors():
    assert tuple(n for n in NAMES if n in TODAY) == TODAY
    assert len(set(NAMES)) == len(NAMES)


def test_config_switches_derive_from_the_registry():
    assert SWITCHES == tuple(sorted(d.switch for d in REGISTRY if d.switch is not None))
    assert {"genericRepeat", "knownPollNoProgress", "pingPong"} <= set(SWITCHES)
    switches = {d.name: d.switch for d in REGISTRY}
    assert (switches["known_poll_no_progress"], switches["ping_pong"], switches["generic_repeat"]) == (
        "knownPollNoProgress",
        "pingPong",
        "genericRepeat",
    )
    assert switches["unknown_tool_repeat"] is switches["global_circuit_breaker"] is None
    assert switches["compaction_loop_persisted"] is None


def test_each_agent_holds_the_detectors_switched_on_for_it_in_order():
    c = DetectionConfig(
        {
            "tools": {"loopDetection": {"enabled": True}},
            "agents": {
                "list": [
                    {"id": "a", "tools": {"loopDetection": {"detectors": {"pingPong": False, "genericRepeat": False}}}},
                    {"id": "unset", "tools": {"loopDetection": {"enabled": None}}},
                    {"id": "off", "tools": {"loopDetection": {"enabled": False}}},
                ]
            },
        }
    )

    def names(agent_id: str | None) -> list[str]:
        cfg = c.for_agent(agent_id) if agent_id else c.global_config
        return [d.name for d in cfg.call_detectors + cfg.result_detectors]

    assert names(None) == list(NAMES)
    assert names("a") == [n for n in NAMES if n not in ("ping_pong", "generic_repeat")]
    assert names("unset") == [d.name for d in REGISTRY if d.judges == "tool_result"]
    assert names("off") == []
    new_call = [d.name for d in c.global_config.new_call_detectors]
    assert new_call == [d.name for d in REGISTRY if d.judges == "tool_call" and not d.repeats_only]
    assert "unknown_tool_repeat" in new_call and "ping_pong" not in new_call
    # A new call after an entry naming no missing tool: only the detectors needing neither
    # a repeat nor an unknown-tool streak are asked (unknown_tool_repeat needs a streak).
    plain = [d.name for d in c.global_config.plain_call_detectors]
    assert plain == [n for n in new_call if not BY_NAME[n].streak_only]
    assert "unknown_tool_repeat" not in plain and "ping_pong" not in plain


def test_a_switch_that_is_not_a_boolean_is_named_and_stays_on():
    c = DetectionConfig({"tools": {"loopDetection": {"enabled": True, "detectors": {"pingPong": "no", "other": 1}}}})
    assert c.warnings == ("tools.loopDetection.detectors.pingPong: 'no' is not true or false; using true",)
    assert c.global_config.switched_on("pingPong")
