"""What the spend stage keeps per cap, key and window (detectors.spend.SpendState): its
encoding, the source offsets it counted once, and the marks it warns of."""

from __future__ import annotations

import msgspec

from detectors.spend import SpendCount, SpendState, decode_spend_state, encode_spend_state, new_marks


def state(**kw: object) -> SpendState:
    base = SpendState(cap="c", key="a", window_start=0, window_ms=60_000, ceilings=(None, 1_000_000, 100))
    return msgspec.structs.replace(base, **kw)


def test_it_round_trips_and_counts_each_source_offset_once():
    s = state(count=SpendCount(calls=3), seen={0: 41, 5: 7}, signal="c:a:0", marks=(0, 80, 0))
    assert decode_spend_state(encode_spend_state(s)) == s
    assert s.counted(0, 41) and s.counted(0, 3) and not s.counted(0, 42)
    assert s.counted(5, 7) and not s.counted(1, 0)  # a partition not seen yet: nothing counted


def test_marks_once_each_the_highest_first_reached():
    assert new_marks(state(count=SpendCount(calls=79))) == []
    assert new_marks(state(count=SpendCount(calls=80))) == [("calls", 80, 80, 80, 100)]
    assert new_marks(state(count=SpendCount(calls=96), marks=(0, 0, 80))) == [("calls", 95, 96, 96, 100)]
    assert new_marks(state(count=SpendCount(calls=99), marks=(0, 0, 95))) == []
    jump = new_marks(state(count=SpendCount(cost_micros=990_000, calls=85)))  # both kinds, in order
    assert jump == [("cost", 95, 99, 990_000, 1_000_000), ("calls", 80, 85, 85, 100)]
    assert new_marks(state(count=SpendCount(tokens=10**9))) == []  # no tokens ceiling
