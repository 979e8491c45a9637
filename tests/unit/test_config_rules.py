"""`loopwarden.rules` (semantics.md section 12): merged per agent field by field, checked
after merging, each off unless `enabled` is true; the hashed shape gains `rules` only
when one is on."""

from __future__ import annotations

import copy

from detectors import DetectionConfig, digest
from detectors.config import Rules
from tests.config_shapes import default_shape

ON = {"tools": {"loopDetection": {"enabled": True}}}


def doc(rules: object = None, agents: list | None = None) -> dict:
    d = copy.deepcopy(ON)
    if rules is not None:
        d["loopwarden"] = {"rules": rules}
    if agents is not None:
        d["agents"] = {"list": agents}
    return d


def rules_of(c: DetectionConfig, agent: str | None = None) -> tuple:
    cfg = c.for_agent(agent) if agent else c.global_config
    names = tuple(d.name for d in cfg.call_detectors if d.name in ("failure_repeat", "cycle"))
    return cfg.progress_aware, cfg.consecutive, cfg.max_period, cfg.laps, names


def test_defaults_are_off_with_the_spec_numbers():
    c = DetectionConfig(doc())
    assert rules_of(c) == (False, 3, 6, 3, ())
    assert c.warnings == ()


def test_an_agent_sets_only_what_it_changes_nested_objects_too():
    glob = {"progressAware": True, "failureRepeat": {"enabled": True, "consecutive": 5}, "cycles": {"enabled": True}}
    c = DetectionConfig(
        doc(
            glob,
            [
                {"id": "a", "loopwarden": {"rules": {"failureRepeat": {"consecutive": 4}}}},
                {"id": "b", "loopwarden": {"rules": {"cycles": {"enabled": False}, "progressAware": False}}},
                {"id": "c"},
            ],
        )
    )
    assert rules_of(c, "a") == (True, 4, 6, 3, ("failure_repeat", "cycle"))
    assert rules_of(c, "b") == (False, 5, 6, 3, ("failure_repeat",))
    assert rules_of(c, "c") == rules_of(c) == (True, 5, 6, 3, ("failure_repeat", "cycle"))
    assert c.warnings == ()


def test_only_true_turns_a_rule_on_and_bad_values_are_named_once():
    c = DetectionConfig(
        doc(
            {"progressAware": 1, "failureRepeat": {"enabled": "true", "consecutive": 0}, "cycles": True},
            [{"id": "a", "loopwarden": {"rules": {"cycles": {"enabled": True, "laps": 2.5, "maxPeriod": 4.0}}}}],
        )
    )
    assert rules_of(c) == (False, 3, 6, 3, ())
    assert rules_of(c, "a") == (False, 3, 4, 3, ("cycle",))
    assert c.warnings == (
        "loopwarden.rules.progressAware: 1 is not true or false; off",
        "loopwarden.rules.failureRepeat.enabled: 'true' is not true or false; off",
        "loopwarden.rules.failureRepeat.consecutive: 0 is not a positive integer; using the default 3",
        "loopwarden.rules.cycles: not an object; ignored",
        "agents.list[0].loopwarden.rules.cycles.laps: 2.5 is not a positive integer; using the default 3",
    )


def test_rules_that_are_not_an_object_are_ignored_with_a_warning():
    c = DetectionConfig(doc("on", [{"id": "a", "loopwarden": {"rules": [1]}}]))
    assert rules_of(c) == rules_of(c, "a") == (False, 3, 6, 3, ())
    assert c.warnings == (
        "loopwarden.rules: not an object; ignored",
        "agents.list[0].loopwarden.rules: not an object; ignored",
    )


def test_the_hash_gains_rules_only_when_one_is_on():
    plain = DetectionConfig(ON).global_config
    off = DetectionConfig(doc({"failureRepeat": {"enabled": False, "consecutive": 9}})).global_config
    assert off.config_hash == plain.config_hash  # a config without rules on keeps its hash
    on = DetectionConfig(doc({"cycles": {"enabled": True, "laps": 4}})).global_config
    assert on.config_hash != plain.config_hash
    # The shape of wire-format.md: the plain shape with `loopwarden.rules` as resolved.
    shape = default_shape()
    assert digest(shape) == plain.config_hash
    shape["loopwarden"]["rules"] = {
        "progressAware": False,
        "failureRepeat": {"enabled": False, "consecutive": 3},
        "cycles": {"enabled": True, "maxPeriod": 6, "laps": 4},
    }
    assert digest(shape) == on.config_hash
    assert Rules(cycles=True, laps=4).shape() == shape["loopwarden"]["rules"]


def test_rules_per_agent_are_no_longer_named_as_top_level_only():
    c = DetectionConfig(doc(agents=[{"id": "a", "loopwarden": {"rules": {"progressAware": True}, "fleet": {}}}]))
    assert c.warnings == (
        "agents.list[0].loopwarden.fleet: read only at the top level (per agent: budgets, enforce, rules)",
    )
    assert rules_of(c, "a")[0] is True
