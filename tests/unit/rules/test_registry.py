"""The registry: one ordered list from which the switches, the names and each agent's detectors derive.

A new detector adds itself to the registry; these tests do not list every detector, they
pin what must not change: the first-match order of today's six, and the derivations."""

from __future__ import annotations

from detectors import DetectionConfig
from detectors.rules import BY_NAME, NAMES, REGISTRY, RULES, SWITCHES

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
            "loopwarden": {"rules": {"failureRepeat": {"enabled": True}, "cycles": {"enabled": True}}},
            "agents": {
                "list": [
                    {"id": "a", "tools": {"loopDetection": {"detectors": {"pingPong": False, "genericRepeat": False}}}},
                    {"id": "no-cycles", "loopwarden": {"rules": {"cycles": {"enabled": False}}}},
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
    assert names("no-cycles") == [n for n in NAMES if n != "cycle"]
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


def test_section_12_rules_sit_at_rules_2a_and_5a():
    """failure_repeat after the global breaker (rule 2) and before the known poll (rule 3);
    cycle after ping-pong (rule 5) and before the generic repeat (rules 7 and 8)."""
    order = list(NAMES)
    assert order.index("global_circuit_breaker") + 1 == order.index("failure_repeat")
    assert order.index("failure_repeat") + 1 == order.index("known_poll_no_progress")
    assert order.index("ping_pong") + 1 == order.index("cycle") == order.index("generic_repeat") - 1
    assert RULES == ("failureRepeat", "cycles")
    assert BY_NAME["failure_repeat"].switch is BY_NAME["cycle"].switch is None


def test_section_12_rules_are_off_unless_enabled_is_true():
    def names(doc: dict) -> list[str]:
        return [d.name for d in DetectionConfig(doc).global_config.call_detectors]

    on = {"tools": {"loopDetection": {"enabled": True}}}
    assert "failure_repeat" not in names(on) and "cycle" not in names(on)
    rules = {"failureRepeat": {"enabled": "yes"}, "cycles": {"enabled": True}}
    assert "cycle" in names({**on, "loopwarden": {"rules": rules}})
    assert "failure_repeat" not in names({**on, "loopwarden": {"rules": rules}})
    # enabled unset or false (section 1.5): no rolling detector at all, these neither
    assert names({"loopwarden": {"rules": rules}}) == []
