"""Canonical JSON: JavaScript numbers, UTF-16 key order, surrogates; fast path == exact path."""

import json

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from detectors.canonical import canon, canon_exact, digest, js_float_literal, js_number

_wire = msgspec.json.Decoder(float_hook=js_float_literal)


@pytest.mark.parametrize(
    "x, js",
    [
        (1.0, "1"),
        (-0.0, "0"),
        (1e21, "1e+21"),
        (1e-7, "1e-7"),
        (1e20, "100000000000000000000"),
        (0.000001, "0.000001"),
        (123.456, "123.456"),
        (-2.5, "-2.5"),
        (1.5e-7, "1.5e-7"),
        (5e-324, "5e-324"),
        (2.0**53 + 1, "9007199254740992"),
        (0.1 + 0.2, "0.30000000000000004"),
    ],
)
def test_numbers_are_written_as_javascript_writes_them(x, js):
    assert js_number(x) == js


def test_objects_sort_by_utf16_code_units_and_drop_lone_surrogates():
    # U+1F600 is D83D DE00 in UTF-16, so it sorts before U+FFFF (unlike code point order).
    assert canon_exact({"\uffff": 1, "\U0001f600": 2, "a": "x\ud800y"}) == (
        '{"a":"xy","\U0001f600":2,"\uffff":1}'.encode()
    )
    assert canon({"\uffff": 1, "\U0001f600": 2}) == canon_exact({"\uffff": 1, "\U0001f600": 2})


def test_integers_beyond_2_53_round_like_doubles():
    assert canon(_wire.decode(b"[9007199254740993]")) == b"[9007199254740992]"


def test_same_call_written_differently_has_one_digest():
    a = _wire.decode('{"b": 1.0, "a": "\u00e9"}'.encode())
    b = _wire.decode(b'{"a": "\\u00e9", "b": 1}')
    assert digest(a) == digest(b)
    assert digest(msgspec.UNSET) != digest(None) != digest({})


_chars = st.characters(blacklist_categories=("Cs",))  # msgspec refuses lone surrogates; see below
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=_chars),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(alphabet=_chars, max_size=4), kids, max_size=4),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_fast_path_on_wire_values_equals_the_exact_reference(v):
    assert canon(_wire.decode(json.dumps(v).encode())) == canon_exact(v)


def test_lone_surrogates_in_an_event_decode_through_the_fallback_and_hash_without_them():
    from detectors import decode_event
    from detectors.fingerprint import call_signature

    ev = decode_event(
        b'{"type":"tool_call","run_id":"r","seq":0,"gateway_id":"g","tool_name":"read",'
        b'"params":{"p":"a\\ud800b","n":2.50}}'
    )
    assert call_signature("read", ev.params) == call_signature("read", _wire.decode(b'{"n":2.5,"p":"ab"}'))
