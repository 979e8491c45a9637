"""The golden vectors (tests/vectors/*.json) hold for the Python implementation: canonical
JSON and SHA-256, call signatures, outcome digests, privacy-mode events, decisions
partitions. Clients in other languages check the same files (clients/openclaw)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import msgspec
import pytest

from detectors import decode_event, encode
from detectors.canonical import canon, canon_exact, digest, js_float_literal
from detectors.fingerprint import fingerprint
from streams.gateway.client import partition_for

VECTORS = Path(__file__).resolve().parents[1] / "vectors"
_msgspec_wire = msgspec.json.Decoder(float_hook=js_float_literal)


def load(name: str) -> list[dict]:
    return json.loads((VECTORS / name).read_text(encoding="utf-8"))["vectors"]


def by_name(name: str):
    vs = load(name)
    return pytest.mark.parametrize("v", vs, ids=[v.get("name") or v.get("gateway_id") for v in vs])


def test_every_kind_of_vector_is_there():
    counts = {p.name: len(json.loads(p.read_text(encoding="utf-8"))["vectors"]) for p in VECTORS.glob("*.json")}
    assert counts.keys() == {"canonical.json", "calls.json", "outcomes.json", "fingerprints.json", "partitions.json"}
    assert min(counts.values()) >= 10, counts
    gateways = [v["gateway_id"] for v in load("partitions.json")]
    assert any(not g.isascii() for g in gateways) and any(ord(c) > 0xFFFF for g in gateways for c in g)


@by_name("canonical.json")
def test_canonical_json_and_sha256(v):
    want = v["canonical"].encode("utf-8")
    assert hashlib.sha256(want).hexdigest() == v["sha256"]
    assert canon_exact(json.loads(v["input"])) == want  # plain Python values
    wire = json.loads(v["input"], parse_float=js_float_literal)  # values as the wire decodes them
    assert canon(wire) == want
    assert digest(wire) == v["sha256"]
    try:
        fast = _msgspec_wire.decode(v["input"].encode("utf-8"))
    except msgspec.DecodeError:  # lone surrogate escapes: the wire falls back to the parser above
        assert "\\ud" in v["input"].lower() or "\\udc" in v["input"].lower()
    else:
        assert canon(fast) == want


def _event(kind: str, v: dict) -> str:
    text = f'{{"type":"{kind}","run_id":"r","seq":0,"gateway_id":"g","tool_name":{json.dumps(v["tool_name"])}'
    for k in ("params", "result", "error"):
        if k in v:
            text += f',"{k}":{v[k]}'
    return text + "}"


@by_name("calls.json")
def test_call_signature_and_known_poll(v):
    fp = fingerprint(decode_event(_event("tool_call", v)))
    assert (fp.args_hash, fp.known_poll) == (v["args_hash"], v["known_poll"])
    assert "params" not in json.loads(encode(fp))


@by_name("outcomes.json")
def test_outcome_digest_and_unknown_tool(v):
    sent = json.loads(encode(fingerprint(decode_event(_event("tool_result", v)))))
    assert sent.get("result_hash") == v["result_hash"]
    assert sent.get("unknown_tool_name") == v["unknown_tool_name"]
    assert not {"params", "result", "error"} & sent.keys()


@by_name("fingerprints.json")
def test_privacy_mode_event(v):
    assert json.loads(encode(fingerprint(decode_event(v["event"])))) == v["privacy_event"]


@by_name("partitions.json")
def test_decisions_partition(v):
    assert v["gateway_id"].encode("utf-8").hex() == v["utf8_hex"]
    for n in (8, 12):
        assert partition_for(v["gateway_id"], n) == v[f"partition_{n}"]
