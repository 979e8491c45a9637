"""Malformed messages of every kind the reliability issue found, mixed with valid events
(deterministic for a seed). Each bad message carries the reason every reader must give."""

from __future__ import annotations

import json
import random
from typing import NamedTuple

from streams.tools.trace import generate

MAX_EVENT_BYTES = 65536  # the readers are given this limit, so oversize events stay small


class Message(NamedTuple):
    key: bytes | None
    value: bytes | None
    reason: str | None  # None: a valid event
    kind: str
    in_file: bool = True  # can be a line of a JSONL file (no key involved, no newline, not null)


def _call(run: str, seq: int, **kw) -> dict:
    return {
        "type": "tool_call",
        "run_id": run,
        "seq": seq,
        "gateway_id": "gw-fuzz",
        "tool_name": "read",
        "params": {"path": "/x"},
        **kw,
    }


def _bad(rng: random.Random, i: int) -> list[Message]:
    run = f"poison-{i:04d}"
    key = run.encode()
    base = _call(run, 1)
    dumps = lambda d: json.dumps(d).encode()  # noqa: E731  (json.dumps writes \udc00 as an escape)
    deep = lambda n: json.dumps(base)[:-1].encode() + b', "params": ' + b"[" * n + b"]" * n + b"}"  # noqa: E731
    missing = rng.choice(["seq", "gateway_id", "type", "run_id", "tool_name"])
    garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64)))
    return [
        Message(key, b"{not json", "decode_error", "not_json"),
        Message(key, garbage.replace(b"\n", b" ").replace(b"\r", b" ") or b"\xff", "decode_error", "random_bytes"),
        Message(key, b"", "decode_error", "empty", in_file=True),
        Message(key, b"   ", "decode_error", "blank"),
        Message(key, rng.choice([b"[1,2]", b'"text"', b"42", b"null", b"true"]), "decode_error", "not_an_object"),
        Message(key, dumps({k: v for k, v in base.items() if k != missing}), "decode_error", "missing_field"),
        Message(key, dumps(dict(base, seq=rng.choice(["7", 1.5, -1, None]))), "decode_error", "wrong_type"),
        Message(key, dumps(dict(base, tool_name="   ")), "decode_error", "blank_tool_name"),
        Message(key, dumps(dict(base, type="tool_dance")), "decode_error", "unknown_type"),
        Message(key, deep(rng.choice([128, 10_000])), "decode_error", "deep_nesting"),
        Message(
            key,
            dumps(dict(base, **{rng.choice(["tool_name", "gateway_id", "tool_call_id", "agent_id"]): "x\udc00y"})),
            "decode_error",
            "lone_surrogate_id",
        ),
        Message(None, dumps(dict(base, run_id="r\ud800")), "decode_error", "lone_surrogate_run_id"),
        Message(key, dumps(dict(base, seq=rng.choice([2**53, 2**64, 10**30]))), "decode_error", "huge_seq"),
        Message(key, dumps(dict(base, ts=2**64)), "decode_error", "huge_ts"),
        Message(
            key,
            b'{"type": "tool_call", "run_id": "' + key + b'", "seq": 1, "gateway_id": "g", "tool_name": "\xff\xfe"}',
            "decode_error",
            "invalid_utf8",
        ),
        Message(key, dumps(dict(base, params={"blob": "x" * (MAX_EVENT_BYTES + 10)})), "oversize", "oversize"),
        Message(None, dumps(base), "missing_key", "no_key", in_file=False),
        Message(b"someone-else", dumps(base), "key_mismatch", "key_mismatch", in_file=False),
        Message(key, None, "decode_error", "null_value", in_file=False),
    ]


def mixed(seed: int = 1, valid_events: int = 1500, rounds: int = 3) -> list[Message]:
    """Valid events of interleaved runs, with `rounds` of every bad kind spread among them,
    and stale duplicates of calls whose decisions are no longer remembered."""
    rng = random.Random(seed)
    valid = [
        Message(json.loads(x)["run_id"].encode(), x, None, "valid")
        for x in generate(valid_events, seed=seed, concurrent=30)
    ]
    out = list(valid)
    for i in range(rounds):
        for m in _bad(rng, i):
            out.insert(rng.randrange(len(out) + 1), m)
    # A run of 70 calls, then its first call again: a stale duplicate (only the last 64
    # decisions are remembered), dead-lettered as stale_seq by every reader.
    stale_run = [_call("stale-run", s, params={"path": f"/{s}"}) for s in range(70)]
    out += [Message(b"stale-run", json.dumps(e).encode(), None, "valid") for e in stale_run]
    out.append(Message(b"stale-run", json.dumps(stale_run[0]).encode(), "stale_seq", "stale_seq"))
    return out
