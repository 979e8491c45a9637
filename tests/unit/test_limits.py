"""The input limits every reader shares (wire-format.md, "Bad input")."""

from __future__ import annotations

import json

import pytest

from detectors import ConfigError, DecodeError, decode_event, load_config
from detectors.wire import MAX_DEPTH, MAX_SAFE_INTEGER, nesting_depth

BASE = {"type": "tool_call", "run_id": "r", "seq": 0, "gateway_id": "g", "tool_name": "read"}


def with_params_depth(total: int) -> bytes:
    """An event whose JSON nests `total` levels (the event object is level 1)."""
    head = json.dumps(BASE)[:-1].encode() + b', "params": '
    return head + b"[" * (total - 1) + b"]" * (total - 1) + b"}"


def test_nesting_at_the_limit_decodes_and_one_more_is_a_decode_error():
    assert nesting_depth(with_params_depth(MAX_DEPTH)) == MAX_DEPTH
    assert decode_event(with_params_depth(MAX_DEPTH)).run_id == "r"
    with pytest.raises(DecodeError, match="nested 129 levels"):
        decode_event(with_params_depth(MAX_DEPTH + 1))
    with pytest.raises(DecodeError, match="nested 10000 levels"):
        decode_event(with_params_depth(10_000))


def test_brackets_inside_strings_do_not_count():
    ev = dict(BASE, params={"text": "[" * 500 + "{" * 500 + '\\"]'})
    assert decode_event(json.dumps(ev)).params["text"].startswith("[[[")


@pytest.mark.parametrize("field", ["run_id", "gateway_id", "agent_id", "tool_call_id", "tool_name", "args_hash"])
def test_a_lone_surrogate_in_an_id_is_a_decode_error(field):
    raw = json.dumps(dict(BASE, **{field: "a\udc00"}))  # json.dumps writes the escape \udc00
    assert "\\udc00" in raw
    with pytest.raises(DecodeError, match=field):
        decode_event(raw.encode())


def test_a_lone_surrogate_inside_params_is_kept_for_hashing():
    ev = decode_event(json.dumps(dict(BASE, params={"p": "x\ud800y"})).encode())
    assert ev.params == {"p": "x\ud800y"}


@pytest.mark.parametrize(
    "seq, ok", [(MAX_SAFE_INTEGER, True), (MAX_SAFE_INTEGER + 1, False), (2**64, False), (10**30, False), (-1, False)]
)
def test_seq_range(seq, ok):
    raw = json.dumps(dict(BASE, seq=seq))
    if ok:
        assert decode_event(raw).seq == seq
    else:
        with pytest.raises(DecodeError, match="seq"):
            decode_event(raw)


def test_ts_range():
    assert decode_event(json.dumps(dict(BASE, ts=None))).ts is None
    with pytest.raises(DecodeError, match="ts"):
        decode_event(json.dumps(dict(BASE, ts=2**64)))


@pytest.mark.parametrize("raw", [b"", b"   ", b"\xff\xfe", b"null", b"[]", b'"x"'])
def test_not_an_event(raw):
    with pytest.raises(DecodeError):
        decode_event(raw)


def test_a_config_that_is_not_utf8_is_a_config_error_naming_the_byte():
    with pytest.raises(ConfigError, match="not UTF-8.*0xff"):
        load_config(b'{"tools": "\xff"}', source="bad.json")
